#include "decode/nifti/nifti.hpp"

#include <nifti2_io.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "decode/decode.hpp"
#include "decode/inflate/gzip.hpp"

namespace imgstat {
namespace {

uint32_t swap32(uint32_t v) { return __builtin_bswap32(v); }

int32_t header_size(const uint8_t* data, size_t size, bool* swapped) {
  if (size < 4) return 0;
  uint32_t v;
  std::memcpy(&v, data, 4);
  *swapped = false;
  if (v == 348 || v == 540) return static_cast<int32_t>(v);
  *swapped = true;
  v = swap32(v);
  return v == 348 || v == 540 ? static_cast<int32_t>(v) : 0;
}

std::string printable(const char* text, size_t n) {
  std::string s(text, strnlen(text, n));
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Values of one voxel sample: the file's type S (swapped if need be) to the
// answer's D, scaled or not.
template <class S, class D>
void convert(const uint8_t* from, uint8_t* to, uint64_t samples, bool swap, bool scaled, double slope, double inter) {
  for (uint64_t i = 0; i < samples; ++i) {
    S s;
    std::memcpy(&s, from + i * sizeof(S), sizeof(S));
    if (swap) {
      if constexpr (sizeof(S) == 2) {
        uint16_t u;
        std::memcpy(&u, &s, 2);
        u = __builtin_bswap16(u);
        std::memcpy(&s, &u, 2);
      } else if constexpr (sizeof(S) == 4) {
        uint32_t u;
        std::memcpy(&u, &s, 4);
        u = __builtin_bswap32(u);
        std::memcpy(&s, &u, 4);
      } else if constexpr (sizeof(S) == 8) {
        uint64_t u;
        std::memcpy(&u, &s, 8);
        u = __builtin_bswap64(u);
        std::memcpy(&s, &u, 8);
      }
    }
    D d;
    if (scaled) {
      // nibabel's order: the product, then the sum, each rounded (the
      // barrier keeps the compiler from fusing them into one FMA).
      double product = static_cast<double>(s) * slope;
      asm("" : "+x"(product));
      d = static_cast<D>(product + inter);
    } else {
      d = static_cast<D>(s);
    }
    std::memcpy(to + i * sizeof(D), &d, sizeof(D));
  }
}

template <class S>
void convert_to(const NiftiVolume& v, const uint8_t* from, uint8_t* to, uint64_t samples) {
  switch (v.type) {
    case SampleType::kUint8: return convert<S, uint8_t>(from, to, samples, false, false, 1, 0);
    case SampleType::kInt8: return convert<S, int8_t>(from, to, samples, false, false, 1, 0);
    case SampleType::kUint16: return convert<S, uint16_t>(from, to, samples, v.swap, false, 1, 0);
    case SampleType::kInt16: return convert<S, int16_t>(from, to, samples, v.swap, false, 1, 0);
    case SampleType::kFloat32: return convert<S, float>(from, to, samples, v.swap, false, 1, 0);
    case SampleType::kFloat64: return convert<S, double>(from, to, samples, v.swap, v.scaled, v.slope, v.inter);
  }
}

void convert_samples(const NiftiVolume& v, const uint8_t* from, uint8_t* to, uint64_t samples) {
  switch (v.datatype) {
    case NIFTI_TYPE_UINT8:
    case NIFTI_TYPE_RGB24:
    case NIFTI_TYPE_RGBA32: return convert_to<uint8_t>(v, from, to, samples);
    case NIFTI_TYPE_INT8: return convert_to<int8_t>(v, from, to, samples);
    case NIFTI_TYPE_UINT16: return convert_to<uint16_t>(v, from, to, samples);
    case NIFTI_TYPE_INT16: return convert_to<int16_t>(v, from, to, samples);
    case NIFTI_TYPE_INT32: return convert_to<int32_t>(v, from, to, samples);
    case NIFTI_TYPE_UINT32: return convert_to<uint32_t>(v, from, to, samples);
    case NIFTI_TYPE_INT64: return convert_to<int64_t>(v, from, to, samples);
    case NIFTI_TYPE_UINT64: return convert_to<uint64_t>(v, from, to, samples);
    case NIFTI_TYPE_FLOAT32: return convert_to<float>(v, from, to, samples);
    case NIFTI_TYPE_FLOAT64: return convert_to<double>(v, from, to, samples);
  }
  fail(ErrorCode::kInternal, "NIfTI: a datatype planned but not converted");
}

}  // namespace

uint64_t NiftiVolume::planes() const {
  uint64_t n = 1;
  for (int i = 3; i < 8; ++i) n *= dims[i];
  return n;
}

bool is_nifti(const uint8_t* data, size_t size) {
  bool swapped = false;
  const int32_t n = header_size(data, size, &swapped);
  if (n == 348) return size >= 348 && (std::memcmp(data + 344, "n+1", 4) == 0 || std::memcmp(data + 344, "ni1", 4) == 0);
  if (n == 540) return size >= 540 && (std::memcmp(data + 4, "n+2", 3) == 0 || std::memcmp(data + 4, "ni2", 3) == 0);
  return false;
}

namespace {
// A header's fields, from either version and byte order. Read here from
// nifti1.h's and nifti2.h's structs, field by field: libnifti's own
// converter trusts the numbers it is given (fuzz_nifti overflowed its stack).
struct Header {
  int version = 1;
  bool swap = false;
  int64_t dim[8] = {0};
  int datatype = 0;
  double pixdim[8] = {0};
  double vox_offset = 0, slope = 0, inter = 0;
  int xyzt_units = 0, intent_code = 0;
  char descrip[80] = {0};
};

template <class T>
T field(const T& v, bool swap) {
  if (!swap || sizeof(T) == 1) return v;
  T out;
  const auto* in = reinterpret_cast<const uint8_t*>(&v);
  auto* o = reinterpret_cast<uint8_t*>(&out);
  for (size_t i = 0; i < sizeof(T); ++i) o[i] = in[sizeof(T) - 1 - i];
  return out;
}

Header read_header(const uint8_t* data, int32_t n, bool swap) {
  Header h;
  h.swap = swap;
  if (n == 348) {
    nifti_1_header f;
    std::memcpy(&f, data, sizeof f);
    for (int i = 0; i < 8; ++i) h.dim[i] = field(f.dim[i], swap), h.pixdim[i] = field(f.pixdim[i], swap);
    h.datatype = field(f.datatype, swap);
    h.vox_offset = field(f.vox_offset, swap);
    h.slope = field(f.scl_slope, swap), h.inter = field(f.scl_inter, swap);
    h.xyzt_units = static_cast<unsigned char>(f.xyzt_units);
    h.intent_code = field(f.intent_code, swap);
    std::memcpy(h.descrip, f.descrip, sizeof h.descrip);
  } else {
    nifti_2_header f;
    std::memcpy(&f, data, sizeof f);
    h.version = 2;
    for (int i = 0; i < 8; ++i) h.dim[i] = field(f.dim[i], swap), h.pixdim[i] = field(f.pixdim[i], swap);
    h.datatype = field(f.datatype, swap);
    h.vox_offset = static_cast<double>(field(f.vox_offset, swap));
    h.slope = field(f.scl_slope, swap), h.inter = field(f.scl_inter, swap);
    h.xyzt_units = field(f.xyzt_units, swap);
    h.intent_code = field(f.intent_code, swap);
    std::memcpy(h.descrip, f.descrip, sizeof h.descrip);
  }
  return h;
}
}  // namespace

NiftiPair nifti_pair(const std::map<std::string, TarSpan>& members) {
  NiftiPair pair;
  std::string found;
  for (const auto& [name, span] : members) {
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".hdr") != 0 || !is_nifti(span.data, span.size)) continue;
    if (!found.empty()) invalid_data("NIfTI: the tar holds two pairs' headers (" + found + ", " + name + "); one is read");
    found = name;
    pair.header = span;
    const std::string stem = name.substr(0, name.size() - 4);
    auto img = members.find(stem + ".img");
    if (img == members.end()) img = members.find(stem + ".img.gz");
    if (img == members.end()) invalid_data("NIfTI: " + name + " comes without its " + stem + ".img");
    if (img->second.size == 0) invalid_data("NIfTI: " + img->first + " is empty");
    pair.voxels = img->second;
  }
  if (found.empty()) invalid_data("NIfTI: the tar holds no .hdr of a pair");
  return pair;
}

NiftiVolume plan_nifti(const uint8_t* data, size_t size, uint64_t max_planes, bool header_only,
                       int64_t pair_voxel_bytes) {
  bool swapped = false;
  const int32_t n = header_size(data, size, &swapped);
  if (n == 0 || size < static_cast<size_t>(n)) invalid_data("NIfTI: the header is cut short");
  // The magic says which kind of file (a pair's header has no voxels).
  const bool pair = n == 348 ? std::memcmp(data + 344, "ni1", 4) == 0 : std::memcmp(data + 4, "ni2", 3) == 0;
  if (pair != (pair_voxel_bytes >= 0) && pair_voxel_bytes >= 0)
    invalid_data("NIfTI: the .hdr of the pair is a single file's header (magic n+1/n+2), not a pair's");
  if (pair && pair_voxel_bytes < 0)
    invalid_data("NIfTI: this is the header of a .hdr/.img pair, which holds no voxels: send both (imgstat-client "
                 "and the Python package send a .hdr's .img with it), or a .nii");
  const Header h = read_header(data, n, swapped);
  NiftiVolume v;
  v.version = h.version;
  const int64_t rank = h.dim[0];
  if (rank < 1 || rank > 7) invalid_data("NIfTI: dim[0] is " + std::to_string(rank) + ", not 1 to 7");
  for (int i = 1; i < 8; ++i) {
    const int64_t d = i <= rank ? h.dim[i] : 1;
    if (d < 1) invalid_data("NIfTI: dim[" + std::to_string(i) + "] is " + std::to_string(d) + ": no voxels");
    v.dims[i] = static_cast<uint64_t>(d);
  }
  v.dims[0] = static_cast<uint64_t>(rank);
  uint64_t planes = 1;
  for (int i = 3; i < 8; ++i) {
    if (v.dims[i] > max_planes || planes > max_planes / v.dims[i])
      fail(ErrorCode::kResourceExhausted, "NIfTI: dim[3] to dim[7] declare more than " + std::to_string(max_planes) +
                                              " planes, past the limit (--max-planes)");
    planes *= v.dims[i];
  }
  if (!(h.vox_offset >= 0 && h.vox_offset < 9.0e18)) invalid_data("NIfTI: vox_offset is not a byte offset");
  int nbyper = 0, swapsize = 0;
  nifti_datatype_sizes(h.datatype, &nbyper, &swapsize);
  v.datatype = h.datatype;
  v.swap = h.swap;
  v.offset = static_cast<uint64_t>(h.vox_offset);
  const std::string dt = nifti_datatype_string(h.datatype);
  switch (h.datatype) {
    case NIFTI_TYPE_UINT8: v.type = SampleType::kUint8; break;
    case NIFTI_TYPE_INT8: v.type = SampleType::kInt8; break;
    case NIFTI_TYPE_UINT16: v.type = SampleType::kUint16; break;
    case NIFTI_TYPE_INT16: v.type = SampleType::kInt16; break;
    case NIFTI_TYPE_FLOAT32: v.type = SampleType::kFloat32; break;
    case NIFTI_TYPE_FLOAT64:
    case NIFTI_TYPE_INT32:
    case NIFTI_TYPE_UINT32:
    case NIFTI_TYPE_INT64:
    case NIFTI_TYPE_UINT64: v.type = SampleType::kFloat64; break;
    case NIFTI_TYPE_RGB24: v.type = SampleType::kUint8, v.channels = 3; break;
    case NIFTI_TYPE_RGBA32: v.type = SampleType::kUint8, v.channels = 4; break;
    default: invalid_data("NIfTI: datatype " + dt + " (" + std::to_string(h.datatype) + ") is not supported");
  }
  const bool rgb = v.channels > 1;
  v.stored_bytes = rgb ? v.channels : static_cast<uint32_t>(nbyper);
  // nibabel's rule: a slope of 0 or not finite is no scaling; with one, an
  // intercept that is not finite is an error.
  const double slope = h.slope, inter = h.inter;
  if (!rgb && slope != 0 && std::isfinite(slope)) {
    if (!std::isfinite(inter)) invalid_data("NIfTI: scl_slope " + number(slope) + " with scl_inter " + number(inter));
    if (slope != 1 || inter != 0) {
      v.scaled = true, v.slope = slope, v.inter = inter;
      v.type = SampleType::kFloat64;
    }
  }
  // The voxels must lie in the file.
  uint64_t bytes = v.width() * v.stored_bytes;  // below 2^63 * 8: checked next
  if (v.width() > (uint64_t{1} << 40) || v.height() > (uint64_t{1} << 40) ||
      (v.height() && bytes > UINT64_MAX / v.height()) || (bytes *= v.height(), planes && bytes > UINT64_MAX / planes) ||
      (bytes *= planes, v.offset > UINT64_MAX - bytes) || (!header_only && v.offset + bytes > (pair_voxel_bytes >= 0 ? static_cast<uint64_t>(pair_voxel_bytes) : size)))
    invalid_data("NIfTI: its header declares " + std::to_string(v.width()) + "x" + std::to_string(v.height()) + "x" +
                 std::to_string(planes) + " voxels of " + dt + " from byte " + std::to_string(v.offset) +
                 ", more than the file's " +
                     std::to_string(pair_voxel_bytes >= 0 ? static_cast<uint64_t>(pair_voxel_bytes) : size) +
                     " bytes hold: truncated or corrupt");
  auto keep = [&](const char* key, std::string value) { v.keywords.emplace_back(key, std::move(value)); };
  keep("datatype", dt);
  keep("version", "NIfTI-" + std::to_string(v.version));
  std::string pixdim;
  for (int64_t i = 1; i <= rank; ++i) pixdim += (i > 1 ? " " : "") + number(h.pixdim[i]);
  keep("pixdim", pixdim);
  if (h.xyzt_units & 0x07) keep("xyz_units", nifti_units_string(h.xyzt_units & 0x07));
  if (h.xyzt_units & 0x38) keep("time_units", nifti_units_string(h.xyzt_units & 0x38));
  if (v.scaled) keep("scl_slope", number(slope)), keep("scl_inter", number(inter));
  const std::string descrip = printable(h.descrip, sizeof h.descrip);
  if (!descrip.empty()) keep("descrip", descrip);
  if (h.intent_code) keep("intent", nifti_intent_string(h.intent_code));
  return v;
}

namespace {
// A .nii.gz's bytes, inflated in order as they are asked for.
class GzipReader {
 public:
  GzipReader(const uint8_t* data, size_t size) {
    if (inflateInit2(&z_, 15 + 16) != Z_OK) fail(ErrorCode::kResourceExhausted, "NIfTI: zlib could not start");
    z_.next_in = const_cast<Bytef*>(data);
    left_ = size;
  }
  ~GzipReader() { inflateEnd(&z_); }
  // The next n bytes into `to` (null: skipped).
  void read(uint8_t* to, uint64_t n) {
    std::vector<uint8_t> skip;
    while (n > 0) {
      uint8_t* out = to;
      uint64_t want = n;
      if (!to) {
        skip.resize(static_cast<size_t>(std::min<uint64_t>(n, 1 << 20)));
        out = skip.data();
        want = skip.size();
      }
      want = std::min<uint64_t>(want, uint64_t{1} << 30);
      z_.next_out = out;
      z_.avail_out = static_cast<uInt>(want);
      while (z_.avail_out > 0) {
        if (z_.avail_in == 0) {
          const size_t feed = std::min<size_t>(left_, size_t{1} << 30);
          z_.avail_in = static_cast<uInt>(feed);
          left_ -= feed;
        }
        const int rc = ::inflate(&z_, Z_NO_FLUSH);
        if (rc == Z_STREAM_END && z_.avail_out > 0) invalid_data("NIfTI: the voxels end early (truncated .nii.gz)");
        if (rc == Z_BUF_ERROR && z_.avail_in == 0 && left_ == 0) invalid_data("NIfTI: the .nii.gz ends early (truncated)");
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
          invalid_data(std::string("NIfTI: its gzip data is damaged (") + (z_.msg ? z_.msg : "zlib") + ")");
      }
      const uint64_t got = want;
      if (to) to += got;
      n -= got;
    }
  }

 private:
  z_stream z_{};
  size_t left_ = 0;
};
}  // namespace

void decode_nifti(const uint8_t* data, size_t size, const NiftiVolume& v, const std::vector<uint64_t>& planes,
                  const std::function<bool()>& cancelled, const RowSink& sink) {
  const uint64_t width = v.width(), height = v.height();
  const uint64_t in_row = width * v.stored_bytes, out_row = width * v.channels * sample_size(v.type);
  const uint64_t plane_bytes = in_row * height;
  if (is_gzip(data, size)) {
    GzipReader gz(data, size);
    gz.read(nullptr, v.offset);
    uint64_t at = 0;  // the next plane the stream holds
    std::vector<uint8_t> staging;
    RowBand band = sink.begin(static_cast<uint32_t>(width), static_cast<uint32_t>(height), v.channels, v.type);
    for (size_t k = 0; k < planes.size(); ++k) {
      if (planes[k] < at) fail(ErrorCode::kInternal, "NIfTI: planes not in order");
      for (; at < planes[k]; ++at) gz.read(nullptr, plane_bytes);
      if (k > 0) sink.plane(k);
      for (uint64_t y = 0; y < height;) {
        if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
        if (band.count == 0) fail(ErrorCode::kInternal, "NIfTI: the sink gave a band of no rows");
        const uint64_t n = std::min<uint64_t>(band.count, height - y);
        const bool direct = !v.swap && !v.scaled && v.stored_bytes == v.channels * sample_size(v.type) &&
                            v.datatype != NIFTI_TYPE_INT32 && v.datatype != NIFTI_TYPE_UINT32 &&
                            v.datatype != NIFTI_TYPE_INT64 && v.datatype != NIFTI_TYPE_UINT64;
        if (direct) {
          gz.read(band.rows, n * in_row);  // the file's samples are the values
        } else {
          staging.resize(n * in_row);
          gz.read(staging.data(), n * in_row);
          convert_samples(v, staging.data(), band.rows, n * width * v.channels);
        }
        band = sink.band(band.rows, static_cast<uint32_t>(y), static_cast<uint32_t>(n));
        y += n;
      }
      ++at;
    }
    return;
  }
  if (v.offset + plane_bytes * v.planes() > size) invalid_data("NIfTI: the voxels end early");
  if (sink.read_planes) {  // each sample a function of its stored bytes: the engine reads them where they lie
    const uint64_t plane_samples = width * height * v.channels;
    const size_t in_size = v.stored_bytes / v.channels, out_size = sample_size(v.type);
    sink.read_planes(Layout{width, height, v.channels, v.type, 0}, planes.size(),
                     [&](uint64_t at, uint64_t n, uint8_t* out) {
                       if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
                       read_converted_planes(
                           at, n, out, planes.size(), plane_samples, in_size, out_size,
                           [&](uint64_t k) { return data + v.offset + planes[k] * plane_bytes; },
                           [&](const uint8_t* from, uint8_t* to, uint64_t count) { convert_samples(v, from, to, count); },
                           "NIfTI");
                     });
    return;
  }
  const int threads = std::max(1, tbb::this_task_arena::max_concurrency());
  RowBand band = sink.begin(static_cast<uint32_t>(width), static_cast<uint32_t>(height), v.channels, v.type);
  for (size_t k = 0; k < planes.size(); ++k) {
    if (k > 0) sink.plane(k);
    const uint8_t* plane = data + v.offset + planes[k] * plane_bytes;
    for (uint64_t y = 0; y < height;) {
      if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      if (band.count == 0) fail(ErrorCode::kInternal, "NIfTI: the sink gave a band of no rows");
      const uint64_t n = std::min<uint64_t>(band.count, height - y);
      const uint64_t samples_per_row = width * v.channels;
      auto rows = [&](uint64_t r0, uint64_t r1) {
        convert_samples(v, plane + (y + r0) * in_row, band.rows + r0 * out_row, (r1 - r0) * samples_per_row);
      };
      const uint64_t runs = threads > 1 && n * out_row >= (uint64_t{1} << 20) ? std::min<uint64_t>(n, threads) : 1;
      if (runs == 1) {
        rows(0, n);
      } else {
        tbb::this_task_arena::isolate([&] {
          tbb::parallel_for(uint64_t{0}, runs, [&](uint64_t i) { rows(n * i / runs, n * (i + 1) / runs); });
        });
      }
      band = sink.band(band.rows, static_cast<uint32_t>(y), static_cast<uint32_t>(n));
      y += n;
    }
  }
}

}  // namespace imgstat
