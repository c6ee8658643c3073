#include "decode/jpeg/verify.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace imgstat {
namespace {

using jpeg::HuffTable;

struct RawTable {
  bool defined = false;
  uint8_t bits[17] = {};
  uint8_t values[256] = {};
};

uint32_t be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }

// jdhuff.c's jpeg_make_d_derived_tbl, with its checks: false where libjpeg
// would refuse the table.
bool derive(const RawTable& raw, bool dc, HuffTable* t) {
  uint8_t size[257];
  uint32_t code_of[257];
  int n = 0;
  for (int l = 1; l <= 16; ++l) {
    if (n + raw.bits[l] > 256) return false;
    for (int i = 0; i < raw.bits[l]; ++i) size[n++] = static_cast<uint8_t>(l);
  }
  size[n] = 0;
  uint32_t code = 0;
  int si = size[0], p = 0;
  while (size[p]) {
    while (size[p] == si) code_of[p++] = code++;
    if (code >= (uint32_t{1} << si)) return false;
    code <<= 1;
    ++si;
  }
  p = 0;
  for (int l = 1; l <= 16; ++l) {
    if (raw.bits[l]) {
      t->valoffset[l] = p - static_cast<int32_t>(code_of[p]);
      p += raw.bits[l];
      t->maxcode[l] = static_cast<int32_t>(code_of[p - 1]);
    } else {
      t->maxcode[l] = -1;
      t->valoffset[l] = 0;
    }
  }
  t->maxcode[0] = -1;
  t->valoffset[0] = t->valoffset[17] = 0;
  t->maxcode[17] = 0xfffff;
  std::memset(t->lookup, 0, sizeof t->lookup);
  p = 0;
  for (int l = 1; l <= 8; ++l)
    for (int i = 1; i <= raw.bits[l]; ++i, ++p) {
      uint32_t look = code_of[p] << (8 - l);
      for (int c = 1 << (8 - l); c > 0; --c) t->lookup[look++] = static_cast<uint16_t>((l << 8) | raw.values[p]);
    }
  std::memcpy(t->huffval, raw.values, sizeof t->huffval);
  if (dc)
    for (int i = 0; i < n; ++i)
      if (raw.values[i] > 15) return false;
  return true;
}

JpegScan not_covered(JpegScan s, const char* why) {
  s.covered = false;
  s.why_not = why;
  return s;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint32_t segments_needed(const JpegScan& scan) {
  return scan.restart_interval ? static_cast<uint32_t>(ceil_div(scan.mcus, scan.restart_interval)) : 1;
}

}  // namespace

namespace {

// The headers before the first scan, a segment at a time. Where libjpeg
// would stop with an error on a header, this check leaves the file to it:
// lengths exact as jdmarker.c wants them, quantization tables defined, only
// the markers it knows. Each segment's reader gives the reason it leaves
// the file to libjpeg, or null.
class Headers {
 public:
  explicit Headers(JpegScan& s) : s_(s) {}
  const char* frame(const uint8_t* seg, size_t n);
  const char* huffman(const uint8_t* seg, size_t n);
  const char* quantization(const uint8_t* seg, size_t n);
  const char* scan(const uint8_t* seg, size_t n);

 private:
  // The scan's components in the frame's, and the Huffman tables they use
  // derived into the (at most two) DC and AC slots of the GPU decoder.
  const char* entropy_tables(const uint8_t* seg);

  JpegScan& s_;
  RawTable raw_[2][4];  // [DC, AC][id]
  uint8_t ids_[3] = {}, tq_[3] = {};
  bool quant_defined_[4] = {};
  bool frame_ = false;
};

const char* Headers::frame(const uint8_t* seg, size_t n) {
  if (frame_) return "two frame headers";
  if (n < 6) return "short frame header";
  if (seg[0] != 8) return "not 8-bit";
  s_.height = be16(seg + 1);
  s_.width = be16(seg + 3);
  s_.components = seg[5];
  if (s_.components != 1 && s_.components != 3) return "neither gray nor three components";
  if (n != 6 + 3 * size_t{s_.components}) return "a frame header of the wrong length";
  for (uint32_t c = 0; c < s_.components; ++c) {
    ids_[c] = seg[6 + 3 * c];
    tq_[c] = seg[8 + 3 * c];
    s_.h[c] = seg[7 + 3 * c] >> 4;
    s_.v[c] = seg[7 + 3 * c] & 15;
    if (s_.h[c] < 1 || s_.h[c] > 4 || s_.v[c] < 1 || s_.v[c] > 4) return "bad sampling factors";
  }
  if (s_.components == 3 && (ids_[0] == ids_[1] || ids_[0] == ids_[2] || ids_[1] == ids_[2]))
    return "two components with one id";
  frame_ = true;
  return nullptr;
}

const char* Headers::huffman(const uint8_t* seg, size_t n) {
  size_t k = 0;
  while (k < n) {
    if (k + 17 > n) return "short Huffman table";
    const uint32_t tc = seg[k] >> 4, th = seg[k] & 15;
    if (tc > 1 || th > 3) return "bad Huffman table id";
    RawTable& t = raw_[tc][th];
    uint32_t count = 0;
    for (int l = 1; l <= 16; ++l) count += t.bits[l] = seg[k + l];
    if (count > 256 || k + 17 + count > n) return "bad Huffman table";
    std::memset(t.values, 0, sizeof t.values);
    std::memcpy(t.values, seg + k + 17, count);
    t.defined = true;
    k += 17 + count;
  }
  return nullptr;
}

const char* Headers::quantization(const uint8_t* seg, size_t n) {
  size_t k = 0;
  while (k < n) {
    const uint32_t precision = seg[k] >> 4, id = seg[k] & 15;
    if (precision > 1 || id > 3) return "a bad quantization table";
    const size_t bytes = 64 * (precision + 1);
    if (n - k - 1 < bytes) return "a short quantization table";
    quant_defined_[id] = true;
    k += 1 + bytes;
  }
  return nullptr;
}

const char* Headers::scan(const uint8_t* seg, size_t n) {
  if (!frame_) return "a scan before the frame header";
  if (n < 1 || seg[0] != s_.components) return "a scan without every component";
  if (n != 4 + 2 * size_t{seg[0]}) return "a scan header of the wrong length";
  for (uint32_t c = 0; c < s_.components; ++c)
    if (tq_[c] > 3 || !quant_defined_[tq_[c]]) return "an undefined quantization table";
  const uint8_t* p = seg + 1 + 2 * s_.components;
  if (p[0] != 0 || p[1] != 63 || p[2] != 0) return "not a sequential scan";
  if (s_.width == 0 || s_.height == 0 || s_.width > 65500 || s_.height > 65500) return "no image size libjpeg takes";
  if (s_.components == 3) {
    if (ids_[0] == 'R' && ids_[1] == 'G' && ids_[2] == 'B') return "RGB components";
    const uint32_t hm = s_.h[0], vm = s_.v[0];
    if (s_.h[1] != 1 || s_.v[1] != 1 || s_.h[2] != 1 || s_.v[2] != 1 || (hm != 1 && hm != 2 && hm != 4) ||
        (vm != 1 && vm != 2))
      return "a chroma subsampling the GPU path does not take";
    s_.mcus = ceil_div(s_.width, 8 * hm) * ceil_div(s_.height, 8 * vm);
  } else {
    s_.mcus = ceil_div(s_.width, 8) * ceil_div(s_.height, 8);  // a lone component: one block per MCU
  }
  return entropy_tables(seg);
}

const char* Headers::entropy_tables(const uint8_t* seg) {
  jpeg::EntropyTables& t = s_.tables;
  int dc_slot[4] = {-1, -1, -1, -1}, ac_slot[4] = {-1, -1, -1, -1}, dc_used = 0, ac_used = 0;
  for (uint32_t c = 0; c < s_.components; ++c) {
    const uint8_t cs = seg[1 + 2 * c], td = seg[2 + 2 * c] >> 4, ta = seg[2 + 2 * c] & 15;
    uint32_t fc = 0;
    while (fc < s_.components && ids_[fc] != cs) ++fc;
    if (fc == s_.components) return "scan components differ from the frame's";
    // T.81 orders a scan's components as the frame does; libjpeg refuses
    // them in any other order ("Invalid component ID"; fuzz_jpeg_verify).
    if (fc != c) return "scan components in another order than the frame's";
    if (td > 3 || ta > 3 || !raw_[0][td].defined || !raw_[1][ta].defined)
      return "a scan names an undefined Huffman table";
    if (dc_slot[td] < 0) {
      if (dc_used == 2) return "more than two DC tables";
      if (!derive(raw_[0][td], true, &t.dc[dc_used])) return "a bad DC Huffman table";
      dc_slot[td] = dc_used++;
    }
    if (ac_slot[ta] < 0) {
      if (ac_used == 2) return "more than two AC tables";
      if (!derive(raw_[1][ta], false, &t.ac[ac_used])) return "a bad AC Huffman table";
      ac_slot[ta] = ac_used++;
    }
    const uint32_t blocks = s_.components == 1 ? 1 : s_.h[fc] * s_.v[fc];
    for (uint32_t b = 0; b < blocks; ++b) {
      t.dc_of_block[t.blocks_in_mcu] = static_cast<uint8_t>(dc_slot[td]);
      t.ac_of_block[t.blocks_in_mcu] = static_cast<uint8_t>(ac_slot[ta]);
      ++t.blocks_in_mcu;
    }
  }
  return nullptr;
}

}  // namespace

JpegScan parse_jpeg_scan(const uint8_t* data, size_t size) {
  JpegScan s;
  if (size < 4 || data[0] != 0xff || data[1] != 0xd8) return not_covered(s, "no JPEG start marker");
  Headers headers(s);
  size_t i = 2;
  for (;;) {
    if (i + 4 > size || data[i] != 0xff) return not_covered(s, "headers end before the first scan");
    while (i + 1 < size && data[i + 1] == 0xff) ++i;  // fill bytes
    if (i + 4 > size) return not_covered(s, "headers end before the first scan");
    const uint8_t m = data[i + 1];
    if (m == 0xd8 || m == 0xd9 || (m >= 0xd0 && m <= 0xd7) || m == 0x01 || m == 0x00)
      return not_covered(s, "a marker without a segment before the first scan");
    const size_t len = be16(data + i + 2);
    if (len < 2 || i + 2 + len > size) return not_covered(s, "a header segment runs past the data");
    const uint8_t* seg = data + i + 4;
    const size_t n = len - 2;
    const char* why_not = nullptr;
    switch (m) {
      case 0xc0:
      case 0xc1: why_not = headers.frame(seg, n); break;
      case 0xc4: why_not = headers.huffman(seg, n); break;
      case 0xdb: why_not = headers.quantization(seg, n); break;
      case 0xdd:
        if (n != 2) return not_covered(s, "a restart interval of the wrong length");
        s.restart_interval = be16(seg);
        break;
      case 0xe0:
        // jdmarker.c warns of a JFIF major version other than 1: that file's
        // answer carries libjpeg's warning, so libjpeg decides it.
        if (n >= 14 && std::memcmp(seg, "JFIF\0", 5) == 0 && seg[5] != 1)
          return not_covered(s, "a JFIF version libjpeg warns about");
        break;
      case 0xee:
        if (n >= 5 && std::memcmp(seg, "Adobe", 5) == 0) return not_covered(s, "an Adobe colour transform marker");
        break;
      case 0xda:
        if ((why_not = headers.scan(seg, n))) break;
        s.data_offset = i + 2 + len;
        s.covered = true;
        return s;
      default:
        if (m >= 0xc0 && m <= 0xcf) return not_covered(s, "not a baseline Huffman JPEG");
        if ((m >= 0xe0 && m <= 0xef) || m == 0xfe) break;  // APPn, COM
        return not_covered(s, "a marker this check does not read");
    }
    if (why_not) return not_covered(s, why_not);
    i += 2 + len;
  }
}

JpegSegments unstuff_jpeg_scan(const JpegScan& scan, const uint8_t* data, size_t size, uint8_t* out) {
  JpegSegments g;
  const uint32_t needed = segments_needed(scan);
  size_t i = scan.data_offset;
  uint64_t o = 0;
  g.start.push_back(0);
  auto end_segment = [&](int marker) {
    g.marker.push_back(marker);
    g.start.push_back(o);
  };
  for (;;) {
    const void* ff = i < size ? std::memchr(data + i, 0xff, size - i) : nullptr;
    const size_t stop = ff ? static_cast<size_t>(static_cast<const uint8_t*>(ff) - data) : size;
    std::memcpy(out + o, data + i, stop - i);
    o += stop - i;
    if (!ff) {
      end_segment(-1);
      break;
    }
    size_t j = stop + 1;
    while (j < size && data[j] == 0xff) ++j;  // FFs before a marker are fill; FF..FF 00 is one FF
    if (j >= size) {
      end_segment(-1);
      break;
    }
    if (data[j] == 0) {
      out[o++] = 0xff;
      i = j + 1;
      continue;
    }
    const int marker = data[j];
    i = j + 1;
    end_segment(marker);
    if (!(scan.restart_interval && marker >= 0xd0 && marker <= 0xd7 && g.marker.size() < needed)) break;
  }
  g.bytes = o;
  uint64_t subs = 0;
  for (size_t s = 0; s + 1 < g.start.size(); ++s) {
    g.sub_first.push_back(subs);
    subs += std::max<uint64_t>(1, ceil_div(g.start[s + 1] - g.start[s], jpeg::kSubsequenceBytes));
  }
  g.sub_first.push_back(subs);
  return g;
}

JpegCheck jpeg_verdict(const JpegScan& scan, const JpegSegments& g, const jpeg::Record* records,
                       bool* covered, bool* synchronized) {
  JpegCheck out;
  out.ok = true;
  *covered = true;
  *synchronized = true;
  const uint32_t needed = segments_needed(scan);
  const size_t segments = g.marker.size();
  bool truncated = false;
  for (size_t s = 0; s < segments; ++s) {
    const uint64_t owed = scan.restart_interval ? std::min<uint64_t>(scan.restart_interval, scan.mcus - s * scan.restart_interval)
                                                : scan.mcus;
    uint64_t count = 0;
    int64_t last_end = -1;
    for (uint64_t j = g.sub_first[s]; j < g.sub_first[s + 1]; ++j) {
      const jpeg::Record& r = records[j];
      if (j > g.sub_first[s] && r.entry != records[j - 1].exit) *synchronized = false;
      if (r.first_bad >= 0 && count + static_cast<uint64_t>(r.first_bad) < owed && !out.corrupt) {
        out.corrupt = true;
        out.corrupt_reason = "Corrupt JPEG data: bad Huffman code";
      }
      count += r.mcus;
      if (r.mcus) last_end = r.last_mcu_end;
    }
    if (!*synchronized) {
      *covered = false;
      return out;
    }
    if (count > owed) *covered = false;  // MCUs to spare: libjpeg skips them with a warning of its own
    if (count == owed && g.start[s + 1] > ceil_div(static_cast<uint64_t>(last_end), 8)) *covered = false;  // extraneous bytes
    if (count < owed) truncated = true;
    const int m = g.marker[s];
    if (s + 1 < needed) {
      const int expected = 0xd0 + static_cast<int>(s & 7);
      if (m == expected) continue;
      if (m == -1 || m == 0xd9) {
        truncated = true;
      } else if (m >= 0xd0 && m <= 0xd7) {
        if (!out.corrupt) {
          char text[80];
          std::snprintf(text, sizeof text, "Corrupt JPEG data: found marker 0x%02x instead of RST%d", m, static_cast<int>(s & 7));
          out.corrupt = true;
          out.corrupt_reason = text;
        }
      } else {
        *covered = false;
      }
      break;  // libjpeg resynchronizes its own way from here
    }
    if (m == -1) truncated = true;
    else if (m != 0xd9) *covered = false;  // more segments, or markers between the scan and the end
  }
  if (out.corrupt) {
    out.warnings.push_back(out.corrupt_reason);
  } else if (truncated) {
    out.truncated = true;
  }
  return out;
}

JpegCheck verify_jpeg_on_host(const uint8_t* data, size_t size, bool* covered, int* rounds) {
  const JpegScan scan = parse_jpeg_scan(data, size);
  *covered = scan.covered;
  if (!scan.covered) return {};
  std::vector<uint8_t> bytes(size);
  const JpegSegments g = unstuff_jpeg_scan(scan, data, size, bytes.data());
  const uint32_t segments = static_cast<uint32_t>(g.marker.size());
  const uint64_t n = g.sub_first.back();
  std::vector<jpeg::Record> records(n);
  for (uint64_t j = 0; j < n; ++j) {
    const jpeg::Span sp = jpeg::span_of(j, g.start.data(), g.sub_first.data(), segments);
    records[j] = jpeg::first_decode(scan.tables, bytes.data(), sp);
  }
  // As the GPU does: each round reads the exits the last round left.
  int r = 0;
  for (;; ++r) {
    std::vector<jpeg::Record> before = records;
    bool changed = false;
    for (uint64_t j = 1; j < n; ++j) {
      const jpeg::Span sp = jpeg::span_of(j, g.start.data(), g.sub_first.data(), segments);
      if (sp.first_of_segment || before[j].entry == before[j - 1].exit) continue;
      records[j] = jpeg::decode_span(scan.tables, bytes.data(), sp.seg_end_bits, sp.limit_bits, before[j - 1].exit);
      changed = true;
    }
    if (!changed) break;
  }
  if (rounds) *rounds = r;
  bool synchronized = false;
  JpegCheck out = jpeg_verdict(scan, g, records.data(), covered, &synchronized);
  return out;
}

}  // namespace imgstat
