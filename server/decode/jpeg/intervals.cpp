#include "decode/jpeg/intervals.hpp"

#include <cstring>
#include <numeric>

namespace imgstat {
namespace {

uint32_t be16(const uint8_t* p) { return uint32_t{p[0]} << 8 | p[1]; }

// The baseline or extended-sequential frame header's height field, found by
// walking the marker segments before the scan.
std::optional<size_t> sof_height_offset(const uint8_t* d, size_t scan_start) {
  std::optional<size_t> found;
  size_t pos = 2;  // after SOI
  while (pos + 4 <= scan_start) {
    if (d[pos] != 0xff) return std::nullopt;
    const uint8_t code = d[pos + 1];
    if (code == 0xff) {  // fill
      ++pos;
      continue;
    }
    const size_t length = be16(d + pos + 2);
    if (length < 2) return std::nullopt;
    if (code == 0xc0 || code == 0xc1) {
      if (found || length < 8) return std::nullopt;
      found = pos + 5;
    } else if (code >= 0xc2 && code <= 0xcf && code != 0xc4 && code != 0xc8 && code != 0xcc) {
      return std::nullopt;  // another kind of frame
    }
    if (code == 0xda) return found;
    pos += 2 + length;
  }
  return std::nullopt;
}

}  // namespace

uint32_t cut_every(const JpegScanFacts& f) {
  if (f.restart_interval == 0 || f.mcus_per_row == 0 || f.mcu_rows < 2) return 0;
  const uint32_t every = f.restart_interval / std::gcd(f.mcus_per_row, f.restart_interval);
  return every <= f.mcu_rows / 2 ? every : 0;
}

std::optional<RestartMap> map_restarts(const uint8_t* d, size_t size, const JpegScanFacts& f) {
  if (cut_every(f) == 0 || f.scan_start >= size) return std::nullopt;
  RestartMap map;
  const std::optional<size_t> sof = sof_height_offset(d, f.scan_start);
  if (!sof || be16(d + *sof) != f.height) return std::nullopt;
  map.sof_height_at = *sof;
  map.cut_every = cut_every(f);
  const uint64_t mcus = uint64_t{f.mcus_per_row} * f.mcu_rows;
  const uint64_t intervals = (mcus + f.restart_interval - 1) / f.restart_interval;
  map.interval_begin.reserve(intervals);
  map.interval_end.reserve(intervals);
  map.interval_begin.push_back(f.scan_start);
  size_t i = f.scan_start;
  for (;;) {
    const void* ff = std::memchr(d + i, 0xff, size - i);
    if (!ff) return std::nullopt;  // no end-of-image marker
    i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
    size_t j = i + 1;
    while (j < size && d[j] == 0xff) ++j;  // fill bytes
    if (j >= size) return std::nullopt;
    const uint8_t code = d[j];
    if (code == 0x00) {  // a stuffed 0xFF data byte
      i = j + 1;
      continue;
    }
    const uint64_t k = map.interval_end.size();
    if (code >= 0xd0 && code <= 0xd7) {
      if (code != 0xd0 + k % 8 || k + 1 >= intervals) return std::nullopt;
      map.interval_end.push_back(i);
      map.interval_begin.push_back(j + 1);
      i = j + 1;
      continue;
    }
    if (code != 0xd9 || k + 1 != intervals) return std::nullopt;  // another marker, or intervals missing
    map.interval_end.push_back(i);
    return map;
  }
}

std::vector<uint8_t> jpeg_of_mcu_rows(const uint8_t* d, const RestartMap& map, const JpegScanFacts& f, uint32_t first,
                                      uint32_t last) {
  const uint64_t k0 = uint64_t{first} * f.mcus_per_row / f.restart_interval;
  const uint64_t k1 = last >= f.mcu_rows ? map.interval_end.size()
                                         : uint64_t{last} * f.mcus_per_row / f.restart_interval;
  size_t bytes = f.scan_start + 2;
  for (uint64_t k = k0; k < k1; ++k) bytes += map.interval_end[k] - map.interval_begin[k] + 2;
  std::vector<uint8_t> out;
  out.reserve(bytes);
  out.insert(out.end(), d, d + f.scan_start);
  const uint32_t rows = std::min<uint64_t>(f.height, uint64_t{last} * f.mcu_height) - uint64_t{first} * f.mcu_height;
  out[map.sof_height_at] = static_cast<uint8_t>(rows >> 8);
  out[map.sof_height_at + 1] = static_cast<uint8_t>(rows);
  for (uint64_t k = k0; k < k1; ++k) {
    out.insert(out.end(), d + map.interval_begin[k], d + map.interval_end[k]);
    out.push_back(0xff);
    out.push_back(k + 1 < k1 ? static_cast<uint8_t>(0xd0 + (k - k0) % 8) : 0xd9);
  }
  return out;
}

}  // namespace imgstat
