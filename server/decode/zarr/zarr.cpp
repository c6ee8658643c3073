#include "decode/zarr/zarr.hpp"

#include <blosc.h>
#include <lz4.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <future>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>

#include "decode/decode.hpp"
#include "decode/inflate/deflate.hpp"

namespace imgstat {
namespace {

using json = nlohmann::json;

// Limits on what a store's metadata may make this hold before a pixel is
// read: chunks in an array's grid (a span each), a chunk
// inflated (zarr-python's chunks are MiBs; Blosc's own limit is 2 GiB), a
// metadata document.
constexpr uint64_t kMaxChunks = uint64_t{1} << 22;
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 20;
constexpr size_t kMaxDims = 32;

uint64_t mul(uint64_t a, uint64_t b, const std::string& what) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
    fail(ErrorCode::kResourceExhausted, "Zarr: " + what + " is past any limit");
  return a * b;
}

using Span = TarSpan;

std::string parent_of(const std::string& key) {
  const size_t slash = key.rfind('/');
  return slash == std::string::npos ? "" : key.substr(0, slash);
}
std::string join(const std::string& folder, const std::string& name) { return folder.empty() ? name : folder + "/" + name; }
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

json metadata(const std::map<std::string, Span>& store, const std::string& key) {
  const auto it = store.find(key);
  if (it == store.end()) return json();
  if (it->second.size > kMaxMetadataBytes)
    invalid_data("Zarr: " + key + " is larger than " + std::to_string(kMaxMetadataBytes) + " bytes");
  const char* s = reinterpret_cast<const char*>(it->second.data);
  json j = json::parse(s, s + it->second.size, nullptr, false);
  if (j.is_discarded()) invalid_data("Zarr: " + key + " is not JSON");
  return j;
}

uint64_t whole(const json& v, const std::string& what) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
    invalid_data("Zarr: " + what + " is not a whole number");
  return v.get<uint64_t>();
}

void read_dtype(ZarrArray& z, const json& dtype) {
  if (!dtype.is_string()) invalid_data("Zarr: the dtype is structured; arrays of one number type are read");
  const std::string d = dtype.get<std::string>();
  z.dtype = d;
  if (d.size() < 3 || (d[0] != '<' && d[0] != '>' && d[0] != '|'))
    invalid_data("Zarr: the dtype \"" + d + "\" is not numpy's");
  z.kind = d[1];
  const std::string bytes = d.substr(2);
  if (bytes != "1" && bytes != "2" && bytes != "4" && bytes != "8")
    invalid_data("Zarr: the dtype \"" + d + "\" is not read (b1, u1-u8, i1-i8, f2-f8 are)");
  z.item_bytes = static_cast<uint32_t>(std::stoul(bytes));
  const bool little = std::endian::native == std::endian::little;
  z.swap = z.item_bytes > 1 && ((d[0] == '<' && !little) || (d[0] == '>' && little));
  switch (z.kind) {
    case 'b':
      if (z.item_bytes == 1) { z.type = SampleType::kUint8; return; }
      break;
    case 'u':
    case 'i':
      z.type = z.item_bytes == 1 ? (z.kind == 'u' ? SampleType::kUint8 : SampleType::kInt8)
               : z.item_bytes == 2 ? (z.kind == 'u' ? SampleType::kUint16 : SampleType::kInt16)
                                   : SampleType::kFloat64;
      return;
    case 'f':
      if (z.item_bytes == 1) break;
      z.type = z.item_bytes == 8 ? SampleType::kFloat64 : SampleType::kFloat32;
      return;
    case 'c': invalid_data("Zarr: complex values (" + d + ") are not read");
    default: break;
  }
  invalid_data("Zarr: the dtype \"" + d + "\" is not read (b1, u1-u8, i1-i8, f2-f8 are)");
}

void read_fill(ZarrArray& z, const json& v, std::vector<std::string>& warnings) {
  if (v.is_null()) {
    // zarr-python leaves such a chunk's values unset; 0 is what a fresh buffer holds.
    warnings.push_back("Zarr: fill_value is null: absent chunks are read as 0");
    z.fill = 0;
    return;
  }
  double f = 0;
  if (v.is_boolean()) f = v.get<bool>() ? 1 : 0;
  else if (v.is_number()) f = v.get<double>();
  else if (v.is_string() && v == "NaN") f = std::numeric_limits<double>::quiet_NaN();
  else if (v.is_string() && v == "Infinity") f = std::numeric_limits<double>::infinity();
  else if (v.is_string() && v == "-Infinity") f = -std::numeric_limits<double>::infinity();
  else invalid_data("Zarr: fill_value " + v.dump() + " is not a number");
  if (z.kind != 'f') {
    const double lo = z.kind == 'b' || z.kind == 'u' ? 0.0 : -std::ldexp(1.0, int(z.item_bytes) * 8 - 1);
    const double hi = z.kind == 'b' ? 1.0 : std::ldexp(1.0, int(z.item_bytes) * 8 - (z.kind == 'i' ? 1 : 0)) - 1;
    if (!(f == std::floor(f) && f >= lo && f <= hi)) invalid_data("Zarr: fill_value " + v.dump() + " is not a " + z.dtype);
  }
  z.fill = f;
}

ZarrArray read_array(const std::map<std::string, Span>& store, const std::string& path, uint64_t max_planes,
                     std::vector<std::string>& warnings, std::vector<std::pair<std::string, std::string>>& keywords) {
  const std::string key = join(path, ".zarray");
  const json m = metadata(store, key);
  if (!m.is_object()) invalid_data("Zarr: " + key + " is missing or not an object");
  if (m.value("zarr_format", json()) != 2) invalid_data("Zarr: " + key + " is not zarr_format 2");
  ZarrArray z;
  z.path = path;
  const json& shape = m.value("shape", json()), &chunks = m.value("chunks", json());
  if (!shape.is_array() || !chunks.is_array() || shape.size() != chunks.size())
    invalid_data("Zarr: " + key + ": shape and chunks are not arrays of one length");
  if (shape.size() < 2 || shape.size() > kMaxDims)
    invalid_data("Zarr: an array of " + std::to_string(shape.size()) + " dimensions is not an image (2 to 32 are read)");
  for (size_t i = 0; i < shape.size(); ++i) {
    z.shape.push_back(whole(shape[i], "shape"));
    z.chunks.push_back(whole(chunks[i], "chunks"));
    if (z.shape.back() == 0) invalid_data("Zarr: " + key + ": its shape has a 0: it holds no values");
    if (z.chunks.back() == 0) invalid_data("Zarr: " + key + ": a chunk size of 0");
  }
  read_dtype(z, m.value("dtype", json()));
  const std::string order = m.value("order", json("C")).is_string() ? m.value("order", std::string("C")) : "";
  if (order != "C" && order != "F") invalid_data("Zarr: order \"" + order + "\" is neither C nor F");
  z.fortran = order == "F";
  const json& filters = m.value("filters", json());
  if (!filters.is_null() && !(filters.is_array() && filters.empty())) {
    std::string ids;
    if (filters.is_array())
      for (const json& f : filters) ids += (ids.empty() ? "" : ", ") + (f.is_object() ? f.value("id", std::string("?")) : "?");
    invalid_data("Zarr: filters (" + ids + ") are not read");
  }
  const json& compressor = m.value("compressor", json());
  if (!compressor.is_null()) {
    if (!compressor.is_object() || !compressor.value("id", json()).is_string())
      invalid_data("Zarr: " + key + ": the compressor has no id");
    z.compressor = compressor["id"].get<std::string>();
    if (z.compressor != "blosc" && z.compressor != "zstd" && z.compressor != "zlib" && z.compressor != "gzip" &&
        z.compressor != "lz4")
      invalid_data("Zarr: the compressor \"" + z.compressor + "\" is not read (blosc, zstd, zlib, gzip, lz4 are)");
  }
  const json& separator = m.value("dimension_separator", json("."));
  if (separator != "." && separator != "/") invalid_data("Zarr: dimension_separator " + separator.dump() + " is neither . nor /");
  z.separator = separator.get<std::string>();
  read_fill(z, m.value("fill_value", json()), warnings);
  if (z.kind != 'f' && z.item_bytes == 8)
    warnings.push_back("Zarr: " + z.dtype + " values are float64: exact to 2^53");

  if (z.planes() > max_planes)
    fail(ErrorCode::kResourceExhausted, "Zarr: " + std::to_string(z.planes()) + " planes are more than the " +
                                            std::to_string(max_planes) + " allowed");
  if (z.chunk_bytes_decoded() > kMaxChunkBytes)
    fail(ErrorCode::kResourceExhausted, "Zarr: a chunk of " + std::to_string(z.chunk_bytes_decoded()) +
                                            " bytes is more than the " + std::to_string(kMaxChunkBytes) + " read");
  std::vector<uint64_t> grid;
  uint64_t cells = 1;
  for (size_t i = 0; i < z.shape.size(); ++i) {
    grid.push_back((z.shape[i] + z.chunks[i] - 1) / z.chunks[i]);
    cells = mul(cells, grid.back(), "its chunk grid");
  }
  if (cells > kMaxChunks)
    fail(ErrorCode::kResourceExhausted, "Zarr: " + std::to_string(cells) + " chunks are more than the " +
                                            std::to_string(kMaxChunks) + " read");
  z.chunk_bytes.assign(cells, {nullptr, 0});
  // The chunks present: members under the array whose names are grid indices.
  const std::string prefix = path.empty() ? "" : path + "/";
  for (auto it = store.lower_bound(prefix); it != store.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    const std::string name = it->first.substr(prefix.size());
    uint64_t index = 0;
    size_t pos = 0, d = 0;
    bool ok = !name.empty();
    while (ok && d < grid.size()) {
      size_t end = name.find(z.separator, pos);
      if (end == std::string::npos) end = name.size();
      const std::string part = name.substr(pos, end - pos);
      ok = !part.empty() && part.size() < 20 && part.find_first_not_of("0123456789") == std::string::npos;
      if (ok) {
        const uint64_t c = std::stoull(part);
        ok = c < grid[d];
        index = index * grid[d] + c;
      }
      ++d;
      pos = end + z.separator.size();
      if (ok && d < grid.size() && end == name.size()) ok = false;
      if (ok && d == grid.size() && end != name.size()) ok = false;
    }
    if (ok) z.chunk_bytes[index] = {it->second.data, it->second.size};
  }
  std::string chunk_text;
  for (size_t i = 0; i < z.chunks.size(); ++i) chunk_text += (i ? "x" : "") + std::to_string(z.chunks[i]);
  keywords.emplace_back("DTYPE", z.dtype);
  keywords.emplace_back("CHUNKS", chunk_text);
  std::string codec = z.compressor.empty() ? "none" : z.compressor;
  if (z.compressor == "blosc" && compressor.value("cname", json()).is_string())
    codec += "/" + compressor["cname"].get<std::string>();
  keywords.emplace_back("COMPRESSOR", codec);
  keywords.emplace_back("ORDER", order);
  return z;
}

// The plane axes OME-NGFF names (0.4: objects with "name"; 0.3: strings),
// slowest first, when every one of them is t, c or z.
std::string ome_plane_axes(const json& axes, size_t dims) {
  if (!axes.is_array() || axes.size() != dims) return "";
  std::string out;
  for (size_t i = 0; i + 2 < dims; ++i) {
    const json& a = axes[i];
    const std::string name = a.is_string() ? a.get<std::string>() : a.is_object() && a.value("name", json()).is_string()
                                                                         ? a["name"].get<std::string>()
                                                                         : "";
    if (name != "t" && name != "c" && name != "z") return "";
    if (out.find(name[0]) != std::string::npos) return "";
    out += name;
  }
  return out;
}

ZarrPlan plan_store(const std::map<std::string, Span>& store, uint32_t series, uint32_t level, uint64_t max_planes);

}  // namespace

uint64_t ZarrArray::planes() const {
  uint64_t n = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) n = mul(n, shape[i], "its number of planes");
  return n;
}

uint64_t ZarrArray::chunk_bytes_decoded() const {
  uint64_t n = item_bytes;
  for (uint64_t c : chunks) n = mul(n, c, "a chunk's size");
  return n;
}

// A pass decodes the chunks that hold a run of consecutive planes whole:
// the planes of one chunk along the first leading dimension whose chunks
// hold more than one plane, with every plane of the dimensions after it.
// (Planes go to the engine in order, and a chunk is inflated once.)
uint64_t ZarrArray::slab_planes() const {
  const size_t lead = shape.size() - 2;
  for (size_t j = 0; j < lead; ++j) {
    if (chunks[j] > 1) {
      uint64_t n = std::min(chunks[j], shape[j]);
      for (size_t k = j + 1; k < lead; ++k) n = mul(n, shape[k], "a pass's planes");
      return n;
    }
  }
  return 1;
}

ZarrPlan plan_zarr(const std::map<std::string, Span>& store, uint32_t series, uint32_t level, uint64_t max_planes) {
  // A metadata value of another type than the one read (a name that is a
  // number) is nlohmann's exception: the file's error, said as such.
  try {
    return plan_store(store, series, level, max_planes);
  } catch (const json::exception& e) {
    invalid_data(std::string("Zarr: metadata of another shape than Zarr's (") + e.what() + ")");
  }
}

namespace {
ZarrPlan plan_store(const std::map<std::string, Span>& store, uint32_t series, uint32_t level, uint64_t max_planes) {
  // The store's root: the shallowest folder with Zarr metadata.
  std::string root;
  size_t depth = SIZE_MAX;
  bool found = false;
  for (const auto& [key, span] : store) {
    if (!ends_with("/" + key, "/.zarray") && !ends_with("/" + key, "/.zgroup") && !ends_with("/" + key, "/.zattrs")) continue;
    const std::string folder = parent_of(key);
    const size_t d = folder.empty() ? 0 : std::count(folder.begin(), folder.end(), '/') + 1;
    if (d < depth) root = folder, depth = d, found = true;
    else if (d == depth && folder != root && (root.empty() || folder.rfind(root + "/", 0) != 0))
      invalid_data("Zarr: the tar holds two stores (" + root + " and " + folder + "); one is read");
  }
  if (!found)
    invalid_data("the tar holds no Zarr store (.zarray, .zgroup or .zattrs): archives of images are not read yet");
  ZarrPlan plan;
  std::string array_path;
  if (store.count(join(root, ".zarray"))) {
    array_path = root;
  } else {
    const json attrs = metadata(store, join(root, ".zattrs"));
    const json& multiscales = attrs.is_object() ? attrs.value("multiscales", json()) : json();
    if (multiscales.is_array() && !multiscales.empty()) {
      plan.series_count = static_cast<uint32_t>(std::min<size_t>(multiscales.size(), UINT32_MAX));
      if (series >= multiscales.size())
        invalid_data("Zarr: series " + std::to_string(series) + ": the image has " + std::to_string(multiscales.size()) +
                     " multiscales");
      const json& ms = multiscales[series];
      const json& datasets = ms.is_object() ? ms.value("datasets", json()) : json();
      if (!datasets.is_array() || datasets.empty()) invalid_data("Zarr: multiscales has no datasets");
      plan.levels = static_cast<uint32_t>(std::min<size_t>(datasets.size(), UINT32_MAX));
      if (level >= datasets.size())
        invalid_data("Zarr: level " + std::to_string(level) + ": the image has " + std::to_string(datasets.size()) +
                     " levels");
      const json& ds = datasets[level];
      if (!ds.is_object() || !ds.value("path", json()).is_string()) invalid_data("Zarr: a multiscales dataset has no path");
      const std::string p = ds["path"].get<std::string>();
      if (p.empty() || p.find("..") != std::string::npos || p.front() == '/')
        invalid_data("Zarr: the dataset path \"" + p + "\" is not a folder of the store");
      array_path = join(root, p);
      if (ms.value("name", json()).is_string()) plan.keywords.emplace_back("NAME", ms["name"].get<std::string>());
      plan.keywords.emplace_back("LEVEL", p);
      if (ms.value("version", json()).is_string()) plan.keywords.emplace_back("OME-NGFF", ms["version"].get<std::string>());
      plan.array = read_array(store, array_path, max_planes, plan.warnings, plan.keywords);
      plan.axes = ome_plane_axes(ms.value("axes", json()), plan.array.shape.size());
      if (ms.value("axes", json()).is_array()) {
        std::string names;
        for (const json& a : ms["axes"])
          names += a.is_string() ? a.get<std::string>() : a.is_object() ? a.value("name", std::string("?")) : "?";
        plan.keywords.emplace_back("AXES", names);
      }
      return plan;
    }
    // A plain group: its arrays, by path, are its series.
    std::vector<std::string> arrays;
    const std::string prefix = root.empty() ? "" : root + "/";
    for (const auto& [key, span] : store)
      if (key.compare(0, prefix.size(), prefix) == 0 && ends_with("/" + key, "/.zarray")) arrays.push_back(parent_of(key));
    if (arrays.empty()) invalid_data("Zarr: the group holds no arrays");
    plan.series_count = static_cast<uint32_t>(std::min<size_t>(arrays.size(), UINT32_MAX));
    if (series >= arrays.size())
      invalid_data("Zarr: series " + std::to_string(series) + ": the group has " + std::to_string(arrays.size()) + " arrays");
    array_path = arrays[series];
    plan.keywords.emplace_back("ARRAY", array_path.substr(prefix.size()));
  }
  plan.array = read_array(store, array_path, max_planes, plan.warnings, plan.keywords);
  return plan;
}
}  // namespace

uint64_t zarr_memory_bytes(const ZarrArray& z) {
  const uint64_t threads = static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  const uint64_t slab = mul(mul(mul(z.slab_planes(), z.height(), "a pass"), z.width(), "a pass"), sample_size(z.type), "a pass");
  // Two passes' buffers where there are several (one inflating while the other goes to the engine).
  const uint64_t passes = z.planes() > z.slab_planes() ? 2 : 1;
  return mul(passes, slab, "two passes") + mul(threads + 1, z.chunk_bytes_decoded(), "the chunks in flight");
}

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (frac << 13);
  else if (exp != 0) bits = sign | ((exp + 112) << 23) | (frac << 13);
  else if (frac == 0) bits = sign;
  else {
    // A subnormal half is a normal float: frac * 2^-24, exact.
    const float v = std::ldexp(static_cast<float>(frac), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(bits);
}

template <class T>
T load(const uint8_t* p, bool swap) {
  T v;
  std::memcpy(&v, p, sizeof v);
  if (swap) {
    uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    std::reverse(b, b + sizeof v);
    std::memcpy(&v, b, sizeof v);
  }
  return v;
}

// n values from src (stride elements apart) to dst, as the values' type.
void convert(const ZarrArray& z, const uint8_t* src, uint64_t stride, uint64_t n, uint8_t* dst) {
  const uint64_t step = stride * z.item_bytes;
  auto each = [&](auto out, auto f) {
    for (uint64_t i = 0; i < n; ++i) out[i] = f(src + i * step);
  };
  if (z.kind == 'b') return each(dst, [](const uint8_t* p) { return uint8_t(*p != 0); });
  if (z.item_bytes == 1 || (z.item_bytes == 2 && z.kind != 'f') || (z.kind == 'f' && z.item_bytes >= 4)) {
    // Kept as stored: a copy, swapped where the order is the other.
    if (stride == 1 && !z.swap) return void(std::memcpy(dst, src, n * z.item_bytes));
    for (uint64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * z.item_bytes, src + i * step, z.item_bytes);
      if (z.swap) std::reverse(dst + i * z.item_bytes, dst + (i + 1) * z.item_bytes);
    }
    return;
  }
  if (z.kind == 'f') return each(reinterpret_cast<float*>(dst), [&](const uint8_t* p) { return half_to_float(load<uint16_t>(p, z.swap)); });
  auto* out = reinterpret_cast<double*>(dst);
  if (z.kind == 'u' && z.item_bytes == 4) return each(out, [&](const uint8_t* p) { return double(load<uint32_t>(p, z.swap)); });
  if (z.kind == 'i' && z.item_bytes == 4) return each(out, [&](const uint8_t* p) { return double(load<int32_t>(p, z.swap)); });
  if (z.kind == 'u') return each(out, [&](const uint8_t* p) { return double(load<uint64_t>(p, z.swap)); });
  return each(out, [&](const uint8_t* p) { return double(load<int64_t>(p, z.swap)); });
}

void fill_values(const ZarrArray& z, uint64_t n, uint8_t* dst) {
  switch (z.type) {
    case SampleType::kUint8: std::fill_n(dst, n, static_cast<uint8_t>(z.fill)); break;
    case SampleType::kInt8: std::fill_n(reinterpret_cast<int8_t*>(dst), n, static_cast<int8_t>(z.fill)); break;
    case SampleType::kUint16: std::fill_n(reinterpret_cast<uint16_t*>(dst), n, static_cast<uint16_t>(z.fill)); break;
    case SampleType::kInt16: std::fill_n(reinterpret_cast<int16_t*>(dst), n, static_cast<int16_t>(z.fill)); break;
    case SampleType::kFloat32: std::fill_n(reinterpret_cast<float*>(dst), n, static_cast<float>(z.fill)); break;
    case SampleType::kFloat64: std::fill_n(reinterpret_cast<double*>(dst), n, z.fill); break;
  }
}

// A pass's buffer straight from the kernel, with transparent huge pages
// where the system gives them (deflate::map_array): its hundreds of MiB are
// each touched once, and faulted 4 KiB at a time they were most of a Zarr
// array's time (a 1 GiB array: 3.6 s of system time on 2 virtual cores, 4.0
// s in all).
using Slab = deflate::Mapped<uint8_t>;
Slab map_slab(uint64_t bytes) { return deflate::map_array<uint8_t>(static_cast<size_t>(bytes)); }

// A chunk's stored bytes inflated into out (exactly its size, or it is damaged).
void inflate_chunk(const ZarrArray& z, const uint8_t* src, uint64_t size, std::vector<uint8_t>& out, uint64_t index) {
  const uint64_t want = out.size();
  auto damaged = [&](const std::string& why) {
    invalid_data("Zarr: chunk " + std::to_string(index) + " of " + (z.path.empty() ? "the array" : z.path) + ": " + why);
  };
  if (z.compressor.empty()) {
    if (size != want) damaged("holds " + std::to_string(size) + " bytes, not " + std::to_string(want));
    std::memcpy(out.data(), src, want);
  } else if (z.compressor == "blosc") {
    size_t nbytes = 0;
    if (blosc_cbuffer_validate(src, size, &nbytes) != 0) damaged("not a Blosc buffer");
    if (nbytes != want) damaged("Blosc holds " + std::to_string(nbytes) + " bytes, not " + std::to_string(want));
    if (blosc_decompress_ctx(src, out.data(), want, 1) != static_cast<int>(want)) damaged("Blosc cannot decompress it");
  } else if (z.compressor == "zstd") {
    const size_t got = ZSTD_decompress(out.data(), want, src, size);
    if (ZSTD_isError(got)) damaged(std::string("zstd: ") + ZSTD_getErrorName(got));
    if (got != want) damaged("zstd gives " + std::to_string(got) + " bytes, not " + std::to_string(want));
  } else if (z.compressor == "lz4") {
    // numcodecs' LZ4: the inflated size (4 bytes, little endian), then one LZ4 block.
    if (size < 4) damaged("too short for LZ4");
    const uint32_t declared = load<uint32_t>(src, std::endian::native != std::endian::little);
    if (declared != want) damaged("LZ4 declares " + std::to_string(declared) + " bytes, not " + std::to_string(want));
    if (size - 4 > static_cast<uint64_t>(INT32_MAX)) damaged("too large for LZ4");
    const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(src + 4), reinterpret_cast<char*>(out.data()),
                                        static_cast<int>(size - 4), static_cast<int>(want));
    if (got != static_cast<int>(want)) damaged("LZ4 cannot decompress it");
  } else {
    z_stream s{};
    if (inflateInit2(&s, z.compressor == "gzip" ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) damaged("zlib could not start");
    s.next_in = const_cast<uint8_t*>(src);
    s.next_out = out.data();
    uint64_t in_left = size, out_left = want;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const uInt in = static_cast<uInt>(std::min<uint64_t>(in_left, UINT32_MAX)),
                 room = static_cast<uInt>(std::min<uint64_t>(out_left, UINT32_MAX));
      s.avail_in = in;
      s.avail_out = room;
      rc = inflate(&s, Z_FINISH);
      in_left -= in - s.avail_in;
      out_left -= room - s.avail_out;
      if (rc == Z_BUF_ERROR && out_left > 0 && in_left > 0) rc = Z_OK;
    }
    inflateEnd(&s);
    if (rc != Z_STREAM_END || out_left != 0) damaged(z.compressor + " stream is damaged or not " + std::to_string(want) + " bytes");
  }
}

}  // namespace

void decode_zarr(const ZarrArray& z, const std::vector<uint64_t>& planes, const std::function<bool()>& cancelled,
                 const RowSink& sink) {
  const size_t dims = z.shape.size(), lead = dims - 2;
  const uint64_t width = z.width(), height = z.height(), out_size = sample_size(z.type);
  const uint64_t row_bytes = width * out_size, plane_bytes = row_bytes * height;
  std::vector<uint64_t> grid(dims), inner_planes(lead + 1, 1);
  for (size_t i = 0; i < dims; ++i) grid[i] = (z.shape[i] + z.chunks[i] - 1) / z.chunks[i];
  for (size_t i = lead; i-- > 0;) inner_planes[i] = inner_planes[i + 1] * z.shape[i];  // planes a step in dim i skips
  size_t j = 0;
  while (j < lead && z.chunks[j] == 1) ++j;
  // Element strides within a chunk as stored (C: last fastest; F: first).
  std::vector<uint64_t> stride(dims, 1);
  if (z.fortran) for (size_t i = 1; i < dims; ++i) stride[i] = stride[i - 1] * z.chunks[i - 1];
  else for (size_t i = dims - 1; i-- > 0;) stride[i] = stride[i + 1] * z.chunks[i + 1];

  // The passes the chosen planes need, in order: each its first plane, how
  // many, and the chunk index ranges it decodes.
  struct Pass {
    uint64_t first = 0, count = 1;
    std::vector<uint64_t> lo, hi;
  };
  std::vector<Pass> passes;
  for (uint64_t p : planes) {
    if (!passes.empty() && p < passes.back().first + passes.back().count) continue;
    Pass pass;
    pass.first = p;
    pass.lo.assign(dims, 0);
    pass.hi.assign(dims, 0);
    uint64_t rest = p;
    for (size_t i = 0; i < lead; ++i) {
      const uint64_t c = rest / inner_planes[i + 1];
      rest %= inner_planes[i + 1];
      if (i < j) pass.lo[i] = c, pass.hi[i] = c + 1;
      else if (i == j) pass.lo[i] = c / z.chunks[i], pass.hi[i] = pass.lo[i] + 1;
      else pass.lo[i] = 0, pass.hi[i] = grid[i];
    }
    for (size_t i = lead; i < dims; ++i) pass.lo[i] = 0, pass.hi[i] = grid[i];
    if (j < lead) {
      pass.first = p / inner_planes[j] * inner_planes[j] + pass.lo[j] * z.chunks[j] * inner_planes[j + 1];
      pass.count = std::min(z.chunks[j], z.shape[j] - pass.lo[j] * z.chunks[j]) * inner_planes[j + 1];
    }
    passes.push_back(std::move(pass));
  }

  const uint64_t threads = static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  tbb::enumerable_thread_specific<std::vector<uint8_t>> buffers([&] { return std::vector<uint8_t>(z.chunk_bytes_decoded()); });
  // A pass's chunks inflated and placed in its buffer, one chunk a core.
  auto decode_pass = [&](const Pass& pass, uint8_t* slab) {
    std::vector<std::vector<uint64_t>> cells;
    std::vector<uint64_t> c = pass.lo;
    for (;;) {
      cells.push_back(c);
      size_t i = dims;
      while (i-- > 0 && ++c[i] == pass.hi[i]) c[i] = pass.lo[i];
      if (i == SIZE_MAX) break;
    }
    auto decode_cell = [&](size_t n) {
      if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      const std::vector<uint64_t>& cell = cells[n];
      uint64_t index = 0;
      for (size_t i = 0; i < dims; ++i) index = index * grid[i] + cell[i];
      const auto [src, size] = z.chunk_bytes[index];
      std::vector<uint8_t>& buffer = buffers.local();
      if (src) inflate_chunk(z, src, size, buffer, index);
      // The chunk's part inside the array, every row of it to its place in the pass.
      std::vector<uint64_t> start(dims), extent(dims);
      for (size_t i = 0; i < dims; ++i) {
        start[i] = cell[i] * z.chunks[i];
        extent[i] = std::min(z.chunks[i], z.shape[i] - start[i]);
      }
      std::vector<uint64_t> at(dims - 1, 0);  // a row's coordinates within the chunk (all but x)
      for (;;) {
        uint64_t plane = 0, offset = 0;
        for (size_t i = 0; i < lead; ++i) plane += (start[i] + at[i]) * inner_planes[i + 1];
        for (size_t i = 0; i + 1 < dims; ++i) offset += at[i] * stride[i];
        const uint64_t y = start[lead] + at[lead];
        uint8_t* dst = slab + (plane - pass.first) * plane_bytes + y * row_bytes + start[dims - 1] * out_size;
        if (src) convert(z, buffer.data() + offset * z.item_bytes, stride[dims - 1], extent[dims - 1], dst);
        else fill_values(z, extent[dims - 1], dst);
        size_t i = dims - 1;
        while (i-- > 0 && ++at[i] == extent[i]) at[i] = 0;
        if (i == SIZE_MAX) break;
      }
    };
    tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, cells.size(), decode_cell); });
  };

  // Two pass buffers where there are several passes: the next pass inflates
  // while this one goes to the engine. Not zeroed: every value of a pass is
  // written (a chunk's or its fill) before it is read.
  const uint64_t slab_bytes = z.slab_planes() * plane_bytes;
  Slab slabs[2];
  slabs[0] = map_slab(slab_bytes);
  if (passes.size() > 1) slabs[1] = map_slab(slab_bytes);
  std::future<void> next;
  WaitOnExit<void> wait_next{next};
  // A sink that takes rows in place and says when it is done with them gets
  // each plane where it was inflated, whole (no copy, and one large feed);
  // it is done with a pass buffer before the pass after next inflates into
  // it, and with both before they go, however the decode ends.
  const bool in_place = sink.takes_rows_in_place && sink.release;
  struct Released {
    const RowSink& sink;
    bool on;
    ~Released() {
      if (on) sink.release();
    }
  } released{sink, in_place};
  RowBand band = sink.begin(static_cast<uint32_t>(width), static_cast<uint32_t>(height), 1, z.type);
  size_t k = 0;
  for (size_t n = 0; n < passes.size(); ++n) {
    uint8_t* slab = slabs[n % 2].get();
    if (n == 0) decode_pass(passes[0], slab);
    else next.get();
    if (n + 1 < passes.size()) {
      if (in_place) sink.release();
      next = std::async(std::launch::async, decode_pass, std::cref(passes[n + 1]), slabs[(n + 1) % 2].get());
    }
    const Pass& pass = passes[n];
    // The chosen planes of this pass, in order.
    for (; k < planes.size() && planes[k] < pass.first + pass.count; ++k) {
      if (k > 0) sink.plane(k);
      const uint8_t* pixels = slab + (planes[k] - pass.first) * plane_bytes;
      if (in_place) {
        if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
        band = sink.band(pixels, 0, static_cast<uint32_t>(height));
        continue;
      }
      for (uint64_t y = 0; y < height;) {
        if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
        if (band.count == 0) fail(ErrorCode::kInternal, "Zarr: the sink gave a band of no rows");
        // Copied: the pass's buffer is a later pass's, and rows handed in
        // place must stay until the decode ends. A band is MiBs: copied on
        // every core, as chunks are inflated.
        const uint64_t rows = std::min<uint64_t>(band.count, height - y);
        const uint64_t runs = rows * row_bytes >= (uint64_t{1} << 20) ? std::min<uint64_t>(rows, threads * 4) : 1;
        auto copy = [&](size_t i) {
          const uint64_t r0 = rows * i / runs, r1 = rows * (i + 1) / runs;
          std::memcpy(band.rows + r0 * row_bytes, pixels + (y + r0) * row_bytes, (r1 - r0) * row_bytes);
        };
        if (runs == 1) copy(0);
        else tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, static_cast<size_t>(runs), copy); });
        band = sink.band(band.rows, static_cast<uint32_t>(y), static_cast<uint32_t>(rows));
        y += rows;
      }
    }
  }
}

}  // namespace imgstat
