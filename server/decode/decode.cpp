#include "decode/decode.hpp"
#include "decode/gif/gif.hpp"

#include <opencv2/imgcodecs.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "decode/dicom/dicom.hpp"
#include "decode/fits/fits.hpp"
#include "decode/inflate/gzip.hpp"
#include "decode/nifti/nifti.hpp"
#include "decode/jpeg/check.hpp"
#include "decode/library_messages.hpp"
#include "decode/opencv_codecs.hpp"
#include "decode/png/apng.hpp"
#include "decode/png/png.hpp"
#include "decode/webp.hpp"
#include "decode/tar/tar.hpp"
#include "decode/zarr/zarr.hpp"
#include "decode/sniff.hpp"
#include "decode/tiff/tiff.hpp"

namespace imgstat {
namespace {

std::string pixels_over_limit(uint64_t w, uint64_t h, uint64_t max_pixels) {
  return "image is " + std::to_string(w) + "x" + std::to_string(h) + " = " + std::to_string(w * h) +
         " pixels, over the limit of " + std::to_string(max_pixels);
}

void check_pixels(uint64_t w, uint64_t h, uint64_t max_pixels) {
  if (w != 0 && h > max_pixels / w) fail(ErrorCode::kResourceExhausted, pixels_over_limit(w, h, max_pixels));
}

int cv_depth_of(SampleType t) {
  switch (t) {
    case SampleType::kUint8: return CV_8U;
    case SampleType::kInt8: return CV_8S;
    case SampleType::kUint16: return CV_16U;
    case SampleType::kInt16: return CV_16S;
    case SampleType::kFloat32: return CV_32F;
    case SampleType::kFloat64: return CV_64F;
    default: break;
  }
  fail(ErrorCode::kInternal, "a decoder gave a sample type no image holds");
}

bool sample_type_of(int depth, SampleType* t) {
  switch (depth) {
    case CV_8U: *t = SampleType::kUint8; return true;
    case CV_8S: *t = SampleType::kInt8; return true;
    case CV_16U: *t = SampleType::kUint16; return true;
    case CV_16S: *t = SampleType::kInt16; return true;
    case CV_32F: *t = SampleType::kFloat32; return true;
    case CV_64F: *t = SampleType::kFloat64; return true;
  }
  return false;
}

std::string first_bytes(const uint8_t* d, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    std::snprintf(buf, sizeof buf, i ? " %02x" : "%02x", d[i]);
    s += buf;
  }
  return s;
}

cv::Mat opencv_decode(const uint8_t* data, size_t size, const std::string& format) {
  const cv::Mat buf(1, static_cast<int>(size), CV_8U, const_cast<uint8_t*>(data));
  try {
    return opencv_codecs::imdecode(buf, cv::IMREAD_UNCHANGED);
  } catch (const cv::Exception& e) {
    if (e.code == cv::Error::StsNoMem) fail(ErrorCode::kResourceExhausted, format + ": out of memory while decoding");
    invalid_data(format + ": could not decode (" + (e.err.empty() ? e.msg : e.err) + ")");
  }
}

// What libpng would allocate for a chunk the file cannot hold is refused first.
void check_png_chunks(const uint8_t* data, size_t size, const DecodeOptions& options) {
  const std::string past_end = png_chunk_past_end(data, size, options.release);
  if (!past_end.empty()) invalid_data("PNG: " + past_end + ": corrupt or truncated");
}

}  // namespace

// bgr: the channels are OpenCV's B,G,R(,A), reported as R,G,B(,A).
DecodedImage finish_decoded(DecodedImage out, const cv::Mat& m, const DecodeOptions& options, bool bgr = true);

std::vector<std::string> channel_names(uint32_t n) {
  switch (n) {
    case 1: return {"Gray"};
    case 2: return {"Gray", "A"};
    case 3: return {"R", "G", "B"};
    case 4: return {"R", "G", "B", "A"};
  }
  return {};
}

void configure_decoders(uint64_t max_pixels) {
  static std::once_flag once;
  std::call_once(once, [max_pixels] {
    // OpenCV reads it once, at its first decode: refuse there too what the
    // limit refuses here, should a header disagree with its data.
    setenv("OPENCV_IO_MAX_IMAGE_PIXELS", std::to_string(max_pixels).c_str(), 1);
  });
}

namespace {
// The planes options choose of a file's `planes` (none when the first is
// past the last: plan_decode refuses that below).
std::vector<uint64_t> chosen_planes(uint64_t planes, const DecodeOptions& options) {
  std::vector<uint64_t> out;
  if (options.first_plane >= planes) return out;
  const uint64_t left = planes - options.first_plane;
  const uint64_t n = options.plane_count ? std::min(options.plane_count, left) : left;
  for (uint64_t i = options.first_plane; i < options.first_plane + n; ++i) out.push_back(i);
  return out;
}

// An animation's frames as the plan's planes: composited on `canvas` (the
// planes' layout), the chosen ones with their delays, read by a decoder that
// holds decoder_bytes beside two bands.
void plan_animation(DecodePlan& plan, const Layout& canvas, const std::vector<uint32_t>& delays_ms,
                    uint64_t decoder_bytes, const std::string& warning, const DecodeOptions& options) {
  plan.animated = true;
  plan.width = canvas.width;
  plan.height = canvas.height;
  plan.planes = delays_ms.size();
  if (!warning.empty()) plan.warnings.push_back(warning);
  for (uint64_t i : chosen_planes(plan.planes, options)) {
    plan.plane_offsets.push_back(i);
    plan.plane_delays_ms.push_back(delays_ms[i]);
  }
  plan.first_plane = options.first_plane;
  plan.band_layout = canvas;
  const uint64_t row = canvas.row_bytes();
  plan.band_memory_bytes = decoder_bytes + 2 * uint64_t{band_rows(row, canvas.height)} * row;
  plan.band_rows = 0;
}

// A stack's C axis made channels: its planes are the Z x T planes, in the
// file's order of those, each the C pages of its z and t (C fastest).
void channels_of_pages(const std::vector<uint64_t>& pages, const DecodeOptions& options, DecodePlan& plan) {
  const StackAxes all = plan.axes;
  StackAxes rest = all;
  rest.order.erase(rest.order.find('C'), 1);
  rest.c = 1;
  const uint64_t planes = uint64_t{all.z} * all.t;
  auto page_of = [&](uint64_t z, uint64_t c, uint64_t t) {
    uint64_t index = 0, stride = 1;
    for (char a : all.order) {
      index += (a == 'Z' ? z : a == 'C' ? c : t) * stride;
      stride *= a == 'Z' ? all.z : a == 'C' ? all.c : all.t;
    }
    return index;
  };
  plan.planes = planes;
  plan.pages_per_plane = all.c;
  plan.plane_offsets.clear();
  for (uint64_t q : chosen_planes(planes, options))
    for (uint32_t c = 0; c < all.c; ++c)
      plan.plane_offsets.push_back(pages[page_of(rest.coordinate(q, 'Z'), c, rest.coordinate(q, 'T'))]);
  plan.first_plane = options.first_plane;
  plan.axes.order = rest.order;
  for (uint32_t c = 0; c < all.c; ++c) plan.channel_names.push_back("C" + std::to_string(c));
}
}  // namespace

DecodePlan plan_decode(const uint8_t* data, size_t size, const DecodeOptions& options) {
  if (size == 0) invalid_data("empty input: no bytes to decode");
  // A PNG still arriving is planned from its header (IHDR); its other
  // chunks are walked as the decoder meets them. Anything else, whole.
  constexpr size_t kPngHeadBytes = 33;  // signature and IHDR
  if (options.arrived) options.arrived(std::min(size, kPngHeadBytes));
  bool png_arriving = options.arrived && size >= kPngHeadBytes && probe(data, kPngHeadBytes).format == "PNG";
  // An APNG says so (acTL) before its image data: its frames are read whole.
  if (png_arriving && png_declares_animation(data, size, options.arrived)) png_arriving = false;
  if (options.arrived && !png_arriving) options.arrived(size);
  Probe p = probe(data, png_arriving ? kPngHeadBytes : size);  // memory_bytes counts no tRNS then: planned again whole if needed
  if (p.format == "unknown")
    invalid_data("unrecognized image format (first bytes " + first_bytes(data, size) +
                 "); send raw pixels as kind RAW, or any file as kind BYTES");
  if (!is_supported_format(p.format)) invalid_data(p.format + " images are not supported");
  // Several files as one input: a Zarr store, a NIfTI pair, a DICOM series.
  std::map<std::string, TarSpan> members;
  if (p.format == "tar") {
    members = tar_members(data, size);
    p.format = tar_content(members);
  }
  if (!p.corrupt.empty()) invalid_data(p.format + ": " + p.corrupt + ": corrupt or truncated");
  // OpenCV and giflib take sizes as int: only a TIFF that libtiff reads
  // itself (below) may be larger.
  if (size > static_cast<size_t>(INT32_MAX) && p.format != "TIFF" && p.format != "FITS" &&
      p.format != "NIfTI" && p.format != "DICOM" && p.format != "Zarr")
    fail(ErrorCode::kResourceExhausted,
         p.format + " files over 2 GiB are not supported (TIFF, BigTIFF, FITS, NIfTI, DICOM and Zarr stores are)");
  DecodePlan plan{p.format, p.width, p.height, 0};
  uint64_t extra = 0;
  if (p.format == "JPEG") {
    const JpegHeader h = read_jpeg_header(data, size, options.max_pixels);
    plan.width = h.width;
    plan.height = h.height;
    p.has_size = h.width > 0 && h.height > 0;
    p.bytes_per_pixel = h.components == 1 ? 1 : 3;
    extra = jpeg_coefficient_bytes(h) + (options.allow_truncated ? size + 2 : 0);
    if (h.components != 4 && h.width > 0) {
      const uint64_t row_bytes = h.width * p.bytes_per_pixel;
      plan.band_rows = h.interval_band_rows;
      const uint64_t rows = plan.band_rows ? plan.band_rows : band_rows(row_bytes, h.height);
      // Cut at restart markers, each core's run also holds a copy of its
      // data and libjpeg's rows (a few MCU rows).
      const uint64_t runs = size + uint64_t{h.interval_threads} * 64 * row_bytes;
      plan.band_memory_bytes = 2 * row_bytes * rows + jpeg_coefficient_bytes(h) + (plan.band_rows ? runs : 0);
      plan.band_layout = Layout{h.width, h.height, h.components == 1 ? 1u : 3u, SampleType::kUint8, 0};
    }
  }
  if (p.format == "PNG" && size >= 29) {
    plan.band_memory_bytes = png_stream_memory_bytes(plan.width, plan.height, data[24], data[25], data[28] != 0, size);
    // Colour type 0 gray, 2 RGB and 3 palette (RGBA with a tRNS chunk, which
    // comes later), 4 gray and alpha (BGRA, as OpenCV reads it), 6 RGBA.
    const uint8_t colour = data[25];
    const uint32_t channels = colour == 0 ? 1 : colour == 2 || colour == 3 ? 3 : 4;
    plan.band_layout = Layout{plan.width, plan.height, channels, data[24] == 16 ? SampleType::kUint16 : SampleType::kUint8, 0};
  }
  TiffPlan tiff;
  if (p.format == "TIFF" && p.has_size) {
    tiff = plan_tiff(data, size, options.max_planes, options.cancelled, options.level, options.series);
    plan.levels = tiff.levels;
    plan.level = options.level;
    plan.series_count = tiff.series_count;
    plan.series = tiff.series;
    if (tiff.route == TiffRoute::kRefused) invalid_data("TIFF: " + tiff.refusal);
    if (tiff.route != TiffRoute::kDirect && size > static_cast<size_t>(INT32_MAX))
      fail(ErrorCode::kResourceExhausted, "TIFF files over 2 GiB are read only where imgstat reads their pages itself; "
                                          "this one's are left to OpenCV, which takes up to 2 GiB");
    if (!tiff.warning.empty()) plan.warnings.push_back(tiff.warning);
    plan.reduced_pages = tiff.reduced_pages;
    if (tiff.pages.size() > 1) {
      plan.planes = tiff.pages.size();
      for (uint64_t i : chosen_planes(plan.planes, options)) plan.plane_offsets.push_back(tiff.pages[i]);
      plan.first_plane = options.first_plane;
    } else if (!tiff.pages.empty()) {
      plan.plane_offsets = tiff.pages;  // its one full-resolution page
    }
    if (tiff.pages.size() > 1) plan.axes = stack_axes_of(tiff.description, tiff.pages.size(), tiff.series);
    if (tiff.series > 0) {  // another series' pages have their own size
      plan.width = tiff.width;
      plan.height = tiff.height;
      p.bytes_per_pixel = tiff.channels * sample_size(tiff.type);
    }
    const uint32_t c = plan.axes.c;
    if (c > 1 && tiff.route == TiffRoute::kDirect && tiff.channels == 1 && options.level == 0) {
      if (c <= 4) {
        channels_of_pages(tiff.pages, options, plan);
        p.bytes_per_pixel *= c;
        extra = plan.width * plan.height * c * sample_size(tiff.type);  // the plane its pages are interleaved into
      } else {
        plan.warnings.push_back("the " + plan.axes.source + " stack's C axis has " + std::to_string(c) +
                                " channels, more than the 4 a plane may have: its channels are answered as planes");
      }
    }
    if (options.level > 0) {
      if (tiff.route != TiffRoute::kDirect)
        invalid_data("TIFF: level " + std::to_string(options.level) +
                     " is not one imgstat reads itself (OpenCV reads a file's first page only)");
      plan.width = tiff.width;  // a level's pages are smaller than the first
      plan.height = tiff.height;
    }
    if (tiff.route == TiffRoute::kDirect) {
      plan.band_memory_bytes = tiff.memory_bytes + extra;
      plan.band_rows = tiff.band_rows;
      plan.band_layout = Layout{plan.width, plan.height, tiff.channels * plan.pages_per_plane, tiff.type, 0};
    }
  }
  if (p.format == "FITS") {
    const uint8_t* bytes = data;
    size_t bytes_size = size;
    // cfitsio reads in whole 2880-byte records, past the end of memory
    // that holds no whole last record (fuzz_fits): such a file, and an
    // inflated one, is read from a copy padded to one.
    size_t content = size;
    if (is_gzip(data, size) || size % kFitsRecordBytes != 0) {
      std::vector<uint8_t> copy = is_gzip(data, size)
                                      ? inflate_gzip(data, size, options.max_expanded_bytes, "FITS (gzip-compressed)")
                                      : std::vector<uint8_t>(data, data + size);
      content = copy.size();
      copy.resize(copy.size() + (kFitsRecordBytes - copy.size() % kFitsRecordBytes) % kFitsRecordBytes, 0);
      plan.expanded = std::make_shared<const std::vector<uint8_t>>(std::move(copy));
      bytes = plan.expanded->data();
      bytes_size = plan.expanded->size();
    }
    const FitsPlan fits = plan_fits(bytes, bytes_size, options.max_planes, options.max_planes, options.cancelled, content);
    if (!fits.warning.empty()) plan.warnings.push_back(fits.warning);
    plan.series_count = static_cast<uint32_t>(fits.images.size());
    plan.series = options.series;
    const FitsImage& image = fits.images[std::min<size_t>(options.series, fits.images.size() - 1)];
    if (!image.warning.empty()) plan.warnings.push_back(image.warning);
    plan.width = image.width();
    plan.height = image.height();
    check_pixels(plan.width, plan.height, options.max_pixels);
    if (image.data_end > content)
      invalid_data("FITS HDU " + std::to_string(image.hdu) + ": its header declares data up to byte " +
                   std::to_string(image.data_end) + ", but the file holds " + std::to_string(content) +
                   " bytes: truncated or corrupt");
    p.has_size = true;
    p.bytes_per_pixel = sample_size(image.type);
    plan.planes = image.planes();
    for (uint64_t i : chosen_planes(plan.planes, options)) plan.plane_offsets.push_back(i);
    plan.first_plane = options.first_plane;
    plan.stored_bits = static_cast<uint32_t>(std::abs(image.bitpix));
    plan.keywords = image.keywords;
    plan.fits = std::make_shared<const FitsImage>(image);
    extra = image.decoder_bytes + (plan.expanded ? plan.expanded->size() : 0);
    const uint64_t row_bytes = plan.width * p.bytes_per_pixel;
    plan.band_rows = static_cast<uint32_t>(std::min<uint64_t>(
        plan.height, std::max<uint64_t>(band_rows(row_bytes, plan.height), kFitsBandBytes / row_bytes)));
    // A compressed image's chosen planes are decoded whole by the tile decoder's process.
    if (image.compressed) extra += row_bytes * plan.height * plan.chosen_planes();
    plan.band_memory_bytes = 2 * row_bytes * plan.band_rows + extra;
    plan.band_layout = Layout{plan.width, plan.height, 1, image.type, 0};
    plan.readable = !image.compressed;
  }
  if (p.format == "NIfTI") {
    // A .hdr/.img pair comes as a tar of the two: the header from one, the voxels from the other.
    NiftiPair pair;
    if (!members.empty()) pair = nifti_pair(members);
    const uint8_t* voxels = pair.header.data ? pair.voxels.data : data;
    const size_t voxels_size = pair.header.data ? pair.voxels.size : size;
    // A .nii.gz (or .img.gz) is planned from its inflated header and inflated band by band as it is decoded.
    const bool gz = is_gzip(voxels, voxels_size);
    const std::vector<uint8_t> head = gz && !pair.header.data ? gzip_head(data, size, 540) : std::vector<uint8_t>();
    const uint8_t* bytes = pair.header.data ? pair.header.data : gz ? head.data() : data;
    const size_t bytes_size = pair.header.data ? pair.header.size : gz ? head.size() : size;
    NiftiVolume volume = plan_nifti(bytes, bytes_size, options.max_planes, gz,
                                    pair.header.data ? static_cast<int64_t>(voxels_size) : -1);
    volume.voxels_at = static_cast<uint64_t>(voxels - data);
    volume.voxels_size = voxels_size;
    plan.width = volume.width();
    plan.height = volume.height();
    p.has_size = true;
    p.bytes_per_pixel = volume.channels * sample_size(volume.type);
    plan.planes = volume.planes();
    for (uint64_t i : chosen_planes(plan.planes, options)) plan.plane_offsets.push_back(i);
    plan.first_plane = options.first_plane;
    if (plan.planes > 1) {
      plan.axes.source = "NIfTI";
      plan.axes.order = "ZT";
      plan.axes.z = static_cast<uint32_t>(volume.dims[3]);
      plan.axes.t = static_cast<uint32_t>(plan.planes / volume.dims[3]);
    }
    plan.stored_bits = volume.stored_bytes * 8 / volume.channels;
    plan.keywords = volume.keywords;
    plan.nifti = std::make_shared<const NiftiVolume>(volume);
    extra = gz ? volume.width() * volume.stored_bytes * band_rows(volume.width() * p.bytes_per_pixel, plan.height) : 0;
    const uint64_t row_bytes = plan.width * p.bytes_per_pixel;
    plan.band_memory_bytes = 2 * row_bytes * band_rows(row_bytes, plan.height) + extra;
    plan.band_layout = Layout{plan.width, plan.height, volume.channels, volume.type, 0};
    plan.readable = !gz;
  }
  if (p.format == "DICOM" && !members.empty()) {
    DicomSeries series = plan_dicom_series(members, options.series, options.stored_values, options.max_planes,
                                           options.max_pixels, options.max_expanded_bytes);
    const DicomImage& image = series.slices.front().image;
    plan.width = image.width;
    plan.height = image.height;
    p.has_size = true;
    p.bytes_per_pixel = image.channels * sample_size(series.type);
    plan.series_count = series.series_count;
    plan.series = options.series;
    plan.planes = series.planes;
    for (uint64_t i : chosen_planes(plan.planes, options)) plan.plane_offsets.push_back(i);
    plan.first_plane = options.first_plane;
    if (plan.planes > 1) {
      plan.axes.source = "DICOM";
      plan.axes.order = "ZCT";
      plan.axes.z = static_cast<uint32_t>(std::min<uint64_t>(plan.planes, UINT32_MAX));
    }
    plan.stored_bits = image.bits_stored;
    plan.keywords = image.keywords;
    plan.keywords.emplace_back("Slices", std::to_string(series.slices.size()));
    plan.keywords.emplace_back("SliceOrder", series.order);
    plan.channel_names = image.channel_names;
    plan.warnings.insert(plan.warnings.end(), series.warnings.begin(), series.warnings.end());
    extra = series.decoded_bytes;
    plan.dicom_series = std::make_shared<const DicomSeries>(std::move(series));
    const uint64_t row_bytes = plan.width * p.bytes_per_pixel;
    plan.band_memory_bytes = 2 * row_bytes * band_rows(row_bytes, plan.height) + extra;
    plan.band_layout = Layout{plan.width, plan.height, image.channels, plan.dicom_series->type, 0};
  } else if (p.format == "DICOM") {
    const DicomImage image =
        plan_dicom(data, size, options.stored_values, options.max_planes, options.max_pixels, options.max_expanded_bytes);
    // A segmentation over an image (a map) is a label volume on its planes.
    const bool labels = options.map != DecodeOptions::Map::kNone && image.segmentation;
    if (labels && !options.dicom_places)
      invalid_data("DICOM SEG: its frames are placed on the DICOM images it was made on, and the image is not DICOM");
    plan.width = image.width;
    plan.height = image.height;
    p.has_size = true;
    const SampleType type = labels ? SampleType::kUint16 : image.type;
    const uint32_t channels = labels ? 1 : image.channels;
    p.bytes_per_pixel = channels * sample_size(type);
    plan.planes = labels ? options.dicom_places->size() : image.frames;
    for (uint64_t i : chosen_planes(plan.planes, options)) plan.plane_offsets.push_back(i);
    plan.first_plane = options.first_plane;
    plan.stored_bits = labels ? 16 : image.bits_stored;
    plan.keywords = image.keywords;
    plan.channel_names = image.channel_names;
    plan.dicom = std::make_shared<const DicomImage>(image);
    // GDCM holds the file's attributes (inflated, if deflated) and every frame decoded.
    extra = image.decoded_bytes + size + image.inflated_bytes;
    if (labels) {
      DicomLabels placed = place_segmentation(image, *options.dicom_places);
      placed.union_only = options.map == DecodeOptions::Map::kMask;
      plan.dicom_labels = std::make_shared<const DicomLabels>(std::move(placed));
      for (auto& [key, value] : plan.keywords)
        if (key == "values") value = "segment numbers on the image's planes (0: none)";
      extra += 2 * plan.width * plan.height;  // the plane composed
    }
    const uint64_t row_bytes = plan.width * p.bytes_per_pixel;
    plan.band_memory_bytes = 2 * row_bytes * band_rows(row_bytes, plan.height) + extra;
    plan.band_layout = Layout{plan.width, plan.height, channels, type, 0};
  }
  if (p.format == "Zarr") {
    ZarrPlan zarr = plan_zarr(members, options.series, options.level, options.max_planes);
    const ZarrArray& z = zarr.array;
    plan.width = z.width();
    plan.height = z.height();
    check_pixels(plan.width, plan.height, options.max_pixels);
    p.has_size = true;
    p.bytes_per_pixel = sample_size(z.type);
    plan.series_count = zarr.series_count;
    plan.series = options.series;
    plan.levels = zarr.levels;
    plan.level = options.level;
    plan.planes = z.planes();
    for (uint64_t i : chosen_planes(plan.planes, options)) plan.plane_offsets.push_back(i);
    plan.first_plane = options.first_plane;
    if (!zarr.axes.empty()) {
      // OME-NGFF's t, c and z, slowest first; StackAxes' order is fastest first.
      plan.axes.source = "OME-Zarr";
      plan.axes.order = std::string(zarr.axes.rbegin(), zarr.axes.rend());
      for (char a : std::string("zct"))
        if (plan.axes.order.find(a) == std::string::npos) plan.axes.order += a;
      for (char& a : plan.axes.order) a = static_cast<char>(std::toupper(static_cast<unsigned char>(a)));
      for (size_t i = 0; i < zarr.axes.size(); ++i) {
        const uint32_t n = static_cast<uint32_t>(z.shape[i]);
        if (zarr.axes[i] == 't') plan.axes.t = n;
        else if (zarr.axes[i] == 'c') plan.axes.c = n;
        else plan.axes.z = n;
      }
    }
    plan.stored_bits = z.kind == 'b' ? 1 : z.item_bytes * 8;
    plan.keywords = zarr.keywords;
    plan.warnings.insert(plan.warnings.end(), zarr.warnings.begin(), zarr.warnings.end());
    plan.zarr = std::make_shared<const ZarrArray>(std::move(zarr.array));
    extra = zarr_memory_bytes(*plan.zarr);
    const uint64_t row_bytes = plan.width * p.bytes_per_pixel;
    plan.band_memory_bytes = 2 * row_bytes * band_rows(row_bytes, plan.height) + extra;
    plan.band_layout = Layout{plan.width, plan.height, 1, plan.zarr->type, 0};
  }
  if (p.format == "PNG" && !png_arriving) {
    const ApngPlan apng = plan_apng(data, size, options.max_planes);
    // One frame that is the image data is the still image; one that is not is shown instead of it.
    if (apng.frames() > 1 || (apng.frames() == 1 && apng.default_image_hidden)) {
      plan_animation(plan, Layout{apng.width, apng.height, apng.channels, apng.type, 0}, apng.delays_ms,
                     apng.memory_bytes, apng.warning, options);
      p.bytes_per_pixel = apng.channels * sample_size(apng.type);
      extra = apng.memory_bytes;
    }
  }
  if (p.format == "WebP") {
    const WebpAnimation webp = plan_webp_animation(data, size, options.max_planes);
    if (webp.frames() > 1) {
      plan_animation(plan, Layout{webp.width, webp.height, webp.alpha ? 4u : 3u, SampleType::kUint8, 0}, webp.delays_ms,
                     webp.memory_bytes, "", options);
      p.has_size = webp.width > 0 && webp.height > 0;
      p.bytes_per_pixel = webp.alpha ? 4 : 3;
      p.least_bytes = 0;
      extra = webp.memory_bytes;
    }
  }
  if (p.format == "GIF") {
    const GifPlan gif = plan_gif(data, size, options.max_planes, options.cancelled);
    if (gif.frames() > 1) {  // an animation: its frames composited on its canvas, a plane each
      plan_animation(plan, Layout{gif.width, gif.height, gif.alpha ? 4u : 3u, SampleType::kUint8, 0}, gif.delays_ms,
                     gif.memory_bytes, gif.warning, options);
      p.has_size = gif.width > 0 && gif.height > 0;
      p.bytes_per_pixel = gif.alpha ? 4 : 3;
      p.least_bytes = 0;
      extra = gif.memory_bytes;
    }
  }
  if (!p.has_size) invalid_data(p.format + ": the header gives no image size (corrupt or truncated header)");
  if (options.level > 0 && p.format != "TIFF" && p.format != "Zarr")
    invalid_data("level " + std::to_string(options.level) + " was asked for, but levels are a TIFF pyramid's or an OME-Zarr's; a " +
                 p.format + " has none");
  if (options.series >= plan.series_count)
    invalid_data("series " + std::to_string(options.series) + " was asked for, but this " + p.format +
                 " is one series (series 0)");
  if (options.first_plane >= plan.planes)
    invalid_data("planes from " + std::to_string(options.first_plane) + " were asked for, but this " + p.format +
                 " has " + std::to_string(plan.planes) + (plan.planes == 1 ? " plane" : " planes") +
                 " (numbered from 0)");
  check_pixels(plan.width, plan.height, options.max_pixels);
  if (size < p.least_bytes)
    invalid_data(p.format + ": declares " + std::to_string(plan.width) + "x" + std::to_string(plan.height) +
                 " pixels, but " + std::to_string(size) + " bytes cannot hold that many, however well compressed: "
                 "corrupt or truncated");
  // Last, so that a PNG still arriving, which has it checked only before
  // OpenCV if it comes to that, meets the checks in the same order.
  if (p.format == "PNG" && !png_arriving) check_png_chunks(data, size, options);
  // What the checks above read (a PNG's every chunk header) is done with for now.
  if (options.release) options.release(0, size);
  // Below 2^40 pixels and 2^20 bytes a pixel: no overflow.
  plan.memory_bytes = plan.width * plan.height * p.bytes_per_pixel + extra;
  // The whole image from libtiff's units (the sink's two bands are the
  // image), or OpenCV's image and strip or tile buffers.
  if (tiff.route == TiffRoute::kDirect)
    plan.memory_bytes = std::max(plan.memory_bytes, plan.width * plan.height * p.bytes_per_pixel + tiff.memory_bytes);
  if (tiff.route == TiffRoute::kOpenCv) plan.memory_bytes = std::max(plan.memory_bytes, tiff.memory_bytes);
  return plan;
}

uint32_t band_rows(uint64_t row_bytes, uint64_t height) {
  const uint64_t rows = std::max<uint64_t>(16, kBandBytes / std::max<uint64_t>(1, row_bytes));
  return static_cast<uint32_t>(std::min<uint64_t>(rows, std::max<uint64_t>(1, height)));
}

JpegCheck check_jpeg_data(const uint8_t* data, size_t size, const DecodeOptions& options) {
  JpegCheck check = check_jpeg(data, size, options.cancelled);
  if (!check.ok && check.error == "cancelled") fail(ErrorCode::kCancelled, "cancelled while decoding");
  enforce_jpeg_check(check, options.allow_truncated);
  return check;
}

void enforce_jpeg_check(const JpegCheck& check, bool allow_truncated) {
  if (!check.ok) invalid_data("JPEG: " + check.error);
  if (check.corrupt) invalid_data("JPEG: " + check.corrupt_reason);
  if (check.truncated && !allow_truncated)
    invalid_data("JPEG data ends before its last block (truncated file); libjpeg would fill the "
                 "rest with gray. Set allow_truncated to analyze it anyway");
}

DecodedImage decode_image(const uint8_t* data, size_t size, const DecodeOptions& options) {
  return decode_image(data, size, plan_decode(data, size, options), options);
}

namespace {
DecodedImage decode_planned(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options);
}  // namespace

DecodedImage decode_image(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options) {
  // What libpng or OpenCV print while decoding this file is its own: a
  // warning of the answer, or the reason given with its error.
  LibraryMessages said;
  try {
    DecodedImage out = decode_planned(data, size, plan, options);
    for (const std::string& line : said.lines()) out.warnings.push_back(line);
    return out;
  } catch (const Error& e) {
    if (said.lines().empty()) throw;
    std::string because;
    for (const std::string& line : said.lines()) because += (because.empty() ? "" : "; ") + line;
    throw Error(e.code(), std::string(e.what()) + " (" + because + ")");
  }
}

namespace {
DecodedImage decode_planned(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options) {
  configure_decoders(options.max_pixels);
  if (plan.chosen_planes() > 1)
    fail(ErrorCode::kInternal, plan.format + ": a stack of planes is decoded in bands, not into one image");
  DecodedImage out;
  out.format = plan.format;
  out.warnings = plan.warnings;
  // One frame of an animation: composited by its streamed decoder, gathered.
  if (plan.animated) return decode_planes(data, size, plan, options);
  std::string refusal;  // a streamed decoder's library's words, should OpenCV refuse the file too
  {
    // The streamed decoders into one image: JPEG in one libjpeg-turbo pass
    // (no second entropy decode for the check, no copy into BGR order), PNG
    // with its own unfiltering. What a decoder gives up on after some rows
    // is decoded again below.
    cv::Mat m;
    RowSink sink;
    sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
      check_pixels(w, h, options.max_pixels);
      m.create(static_cast<int>(h), static_cast<int>(w), CV_MAKETYPE(cv_depth_of(type), static_cast<int>(channels)));
      return RowBand{m.data, h};
    };
    sink.band = [](const uint8_t*, uint32_t, uint32_t) { return RowBand{}; };
    BandedDecode banded = decode_in_bands(data, size, plan, options, sink);
    if (banded.taken) {
      out.warnings = std::move(banded.warnings);
      out.decoder = std::move(banded.decoder);
      out = finish_decoded(std::move(out), m, options, /*bgr=*/false);
      if (!plan.channel_names.empty()) out.channel_names = plan.channel_names;
      return out;
    }
    if (banded.final) invalid_data(plan.format + ": could not decode (corrupt or truncated data; " + banded.refusal + ")");
    refusal = std::move(banded.refusal);
  }
  if (options.arrived) {  // the rest reads the whole file
    options.arrived(size);
    if (plan.format == "PNG") check_png_chunks(data, size, options);
  }
  if (plan.format == "JPEG") {  // CMYK and YCCK: OpenCV's conversion, after the check pass
    const JpegCheck check = check_jpeg_data(data, size, options);
    out.warnings.insert(out.warnings.end(), check.warnings.begin(), check.warnings.end());
    out.decoder = "libjpeg-turbo";
    if (check.truncated) {
      // libjpeg's file reader meets the end of the data with a made-up
      // end-of-image marker and fills the rest with gray; OpenCV's memory
      // reader just stops. The marker, appended, gives imread's answer.
      std::vector<uint8_t> completed(data, data + size);
      completed.push_back(0xff);
      completed.push_back(0xd9);
      cv::Mat m = opencv_decode(completed.data(), completed.size(), plan.format);
      if (m.empty()) invalid_data("JPEG: could not decode (truncated)");
      return finish_decoded(std::move(out), m, options);
    }
  }

  cv::Mat m;
  if (plan.format == "BMP" && !(m = decode_bmp_core(data, size, options)).empty()) out.decoder = "imgstat-bmp";
  if (plan.format == "GIF" && !(m = decode_gif(data, size, options, &out.warnings)).empty()) out.decoder = "giflib";
  if (m.empty()) {
    m = opencv_decode(data, size, plan.format);
    if (out.decoder.empty()) out.decoder = "opencv";
  }
  if (m.empty() && plan.format == "WebP" && !(m = decode_webp_frames(data, size, &out.warnings)).empty())
    out.decoder = "libwebp";
  if (m.empty())
    invalid_data(plan.format + ": could not decode (corrupt, truncated or unsupported data" +
                 (refusal.empty() ? std::string() : "; " + refusal) + ")");
  return finish_decoded(std::move(out), m, options);
}
}  // namespace

namespace {
// The pages of one channel that make a plane of C channels (DecodePlan::
// pages_per_plane), C a plane in order: each page's bands are put into
// its channel of the plane, which goes on to `out` in its bands once its
// last channel is in.
class PagesAsChannels {
 public:
  PagesAsChannels(const RowSink& out, const DecodePlan& plan) : out_(out), plan_(plan), c_(plan.pages_per_plane) {}
  RowSink sink() {
    RowSink s;
    s.begin = [this](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
      if (channels != 1) fail(ErrorCode::kInternal, "TIFF: pages made channels have one channel each");
      w_ = w, h_ = h, type_ = type, sample_ = sample_size(type);
      rows_ = plan_.band_rows ? std::min(plan_.band_rows, h) : band_rows(uint64_t{w} * sample_, h);
      plane_.assign(uint64_t{w} * h * c_ * sample_, 0);
      band_.assign(uint64_t{rows_} * w * sample_, 0);
      page_ = 0;
      return RowBand{band_.data(), rows_};
    };
    s.band = [this](const uint8_t* rows, uint32_t first, uint32_t count) {
      interleave(rows, first, count);
      const uint64_t next = uint64_t{first} + count;
      if (next == h_ && page_ % c_ == c_ - 1)
        out_band_ = send_plane(out_, out_band_, plane_.data(), w_, h_, c_, type_, page_ / c_, "TIFF");
      const uint64_t left = next < h_ ? h_ - next : h_;
      return RowBand{band_.data(), static_cast<uint32_t>(std::min<uint64_t>(rows_, left))};
    };
    s.plane = [this](uint64_t page) { page_ = page; };
    return s;
  }

 private:
  void interleave(const uint8_t* rows, uint32_t first, uint32_t count) {
    const uint64_t c = page_ % c_, step = uint64_t{c_} * sample_, n = uint64_t{count} * w_;
    uint8_t* to = plane_.data() + (uint64_t{first} * w_ * c_ + c) * sample_;
    switch (sample_) {
      case 1: for (uint64_t i = 0; i < n; ++i) to[i * step] = rows[i]; break;
      case 2: for (uint64_t i = 0; i < n; ++i) std::memcpy(to + i * step, rows + i * 2, 2); break;
      case 4: for (uint64_t i = 0; i < n; ++i) std::memcpy(to + i * step, rows + i * 4, 4); break;
      default: for (uint64_t i = 0; i < n; ++i) std::memcpy(to + i * step, rows + i * 8, 8); break;
    }
  }
  const RowSink& out_;
  const DecodePlan& plan_;
  const uint32_t c_;
  uint32_t w_ = 0, h_ = 0, rows_ = 0;
  SampleType type_ = SampleType::kUint8;
  size_t sample_ = 1;
  uint64_t page_ = 0;
  std::vector<uint8_t> plane_, band_;
  RowBand out_band_;
};
}  // namespace

BandedDecode decode_in_bands(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options,
                             const RowSink& sink) {
  BandedDecode out;
  out.warnings = plan.warnings;
  auto add = [&out](std::vector<std::string>& w) { out.warnings.insert(out.warnings.end(), w.begin(), w.end()); };
  if (plan.format == "JPEG") {
    bool taken = false;
    JpegCheck check = decode_jpeg(data, size, options.cancelled, sink, &taken);
    if (!check.ok && check.error == "cancelled") fail(ErrorCode::kCancelled, "cancelled while decoding");
    if (!taken && check.ok) return out;  // CMYK, YCCK: OpenCV's conversion
    enforce_jpeg_check(check, options.allow_truncated);
    out.taken = true;
    out.decoder = "libjpeg-turbo";
    add(check.warnings);
  } else if (plan.format == "PNG" && plan.animated) {  // an animation's canvas is its band layout
    decode_apng_frames(data, size, plan.band_layout, plan.plane_offsets.front(), plan.plane_offsets.back(),
                       options.cancelled, sink);
    out.taken = true;
    out.decoder = "imgstat-apng";
  } else if (plan.format == "PNG" && plan.band_memory_bytes > 0) {
    PngDecode png = decode_png(data, size, options.cancelled, sink, options.release, options.arrived);
    out.taken = png.taken;
    out.decoder = "imgstat-png";
    add(png.warnings);
  } else if (plan.format == "WebP" && plan.animated) {
    decode_webp_animation(data, size, plan.band_layout, plan.plane_offsets.front(), plan.plane_offsets.back(),
                          options.cancelled, sink);
    out.taken = true;
    out.decoder = "libwebp";
  } else if (plan.format == "GIF" && plan.animated) {
    decode_gif_frames(data, size, plan.band_layout, plan.plane_offsets.front(), plan.plane_offsets.back(),
                      options.cancelled, sink);
    out.taken = true;
    out.decoder = "giflib";
  } else if (plan.format == "TIFF" && plan.band_memory_bytes > 0) {
    PagesAsChannels channels(sink, plan);
    TiffDecode tiff = decode_tiff(data, size, options.cancelled, plan.pages_per_plane > 1 ? channels.sink() : sink,
                                  options.release, plan.plane_offsets);
    out.taken = tiff.taken;
    out.decoder = "libtiff";
    if (!tiff.libtiff_error.empty()) out.refusal = "libtiff: " + tiff.libtiff_error;
    out.final = !tiff.libtiff_error.empty();
  } else if (plan.format == "FITS" && plan.fits) {
    const uint8_t* bytes = plan.expanded ? plan.expanded->data() : data;
    const size_t bytes_size = plan.expanded ? plan.expanded->size() : size;
    decode_fits(bytes, bytes_size, *plan.fits, plan.plane_offsets, options.cancelled, sink);
    out.taken = true;
    out.decoder = "cfitsio";
  } else if (plan.format == "NIfTI" && plan.nifti) {
    decode_nifti(data + plan.nifti->voxels_at, plan.nifti->voxels_size, *plan.nifti, plan.plane_offsets,
                 options.cancelled, sink);
    out.taken = true;
    out.decoder = "libnifti";
  } else if (plan.format == "Zarr" && plan.zarr) {
    decode_zarr(*plan.zarr, plan.plane_offsets, options.cancelled, sink);
    out.taken = true;
    out.decoder = "imgstat-zarr";
  } else if (plan.format == "DICOM" && plan.dicom_series) {
    decode_dicom_series(*plan.dicom_series, options.stored_values, plan.plane_offsets, options.cancelled, sink);
    out.taken = true;
    out.decoder = "gdcm";
  } else if (plan.format == "DICOM" && plan.dicom_labels) {
    decode_dicom_labels(data, size, *plan.dicom, *plan.dicom_labels, plan.plane_offsets, options.cancelled, sink);
    out.taken = true;
    out.decoder = "gdcm";
  } else if (plan.format == "DICOM" && plan.dicom) {
    decode_dicom(data, size, *plan.dicom, options.stored_values, plan.plane_offsets, options.cancelled, sink);
    out.taken = true;
    out.decoder = "gdcm";
  }
  return out;
}

std::shared_ptr<const std::vector<DicomPlace>> dicom_places_of(const DecodePlan& plan) {
  if (plan.format != "DICOM" || plan.dicom_labels) return nullptr;
  if (plan.dicom_series) return std::make_shared<const std::vector<DicomPlace>>(dicom_places(*plan.dicom_series));
  if (plan.dicom) return std::make_shared<const std::vector<DicomPlace>>(dicom_places(*plan.dicom));
  return nullptr;
}

uint64_t stack_memory_bytes(const DecodePlan& plan) {
  const Layout& l = plan.band_layout;
  return l.width * l.height * l.pixel_bytes() * plan.chosen_planes() + plan.band_memory_bytes;
}

DecodedImage decode_planes(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options) {
  const Layout& l = plan.band_layout;
  if (plan.band_memory_bytes == 0 || l.channels == 0)
    fail(ErrorCode::kInternal, plan.format + ": a stack of planes the streamed decoder does not take");
  const uint64_t planes = plan.chosen_planes(), plane_bytes = l.height * l.row_bytes();
  if (l.height * planes > static_cast<uint64_t>(INT32_MAX))
    fail(ErrorCode::kResourceExhausted, plan.format + ": " + std::to_string(planes) + " planes of " +
                                            std::to_string(l.height) + " rows are more rows than one image holds");
  cv::Mat m(static_cast<int>(l.height * planes), static_cast<int>(l.width),
            CV_MAKETYPE(cv_depth_of(l.type), static_cast<int>(l.channels)));
  uint64_t plane = 0;
  uint32_t rows = 0;
  RowSink sink;
  // Each band is the image's own rows: nothing is copied.
  auto at = [&](uint64_t row) { return RowBand{m.data + plane * plane_bytes + row * l.row_bytes(), rows}; };
  sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
    if (w != l.width || h != l.height || channels != l.channels || type != l.type)
      fail(ErrorCode::kInternal, plan.format + ": its planes are not as planned");
    plane = 0;
    rows = plan.band_rows ? std::min<uint32_t>(plan.band_rows, h) : band_rows(l.row_bytes(), h);
    return at(0);
  };
  // A plane's last band hands over the next plane's first: the planes lie
  // one after another.
  sink.band = [&](const uint8_t*, uint32_t first, uint32_t count) {
    const uint64_t next = uint64_t{first} + count;
    const uint64_t left = next < l.height ? l.height - next : l.height;
    return RowBand{m.data + plane * plane_bytes + next * l.row_bytes(), static_cast<uint32_t>(std::min<uint64_t>(rows, left))};
  };
  sink.plane = [&](uint64_t p) {
    if (p >= planes) fail(ErrorCode::kInternal, plan.format + ": more planes than planned");
    plane = p;
  };
  BandedDecode banded = decode_in_bands(data, size, plan, options, sink);
  if (!banded.taken)
    invalid_data(plan.format + ": could not decode its planes (" +
                 (banded.refusal.empty() ? std::string("corrupt or truncated data") : banded.refusal) + ")");
  DecodedImage out;
  out.format = plan.format;
  out.warnings = banded.warnings;
  out.decoder = banded.decoder;
  out = finish_decoded(std::move(out), m, options, false);
  if (!plan.channel_names.empty()) out.channel_names = plan.channel_names;
  return out;
}

DecodedImage finish_decoded(DecodedImage out, const cv::Mat& m, const DecodeOptions& options, bool bgr) {
  const std::string& format = out.format;
  check_pixels(static_cast<uint64_t>(m.cols), static_cast<uint64_t>(m.rows), options.max_pixels);
  SampleType type;
  if (!sample_type_of(m.depth(), &type))
    invalid_data(format + ": unsupported sample type (OpenCV depth " + std::to_string(m.depth()) + ")");
  const uint32_t channels = static_cast<uint32_t>(m.channels());
  if (channels < 1 || channels > 4) invalid_data(format + ": unsupported channel count " + std::to_string(channels));

  out.pixels = m;
  out.view = ImageView{m.data, Layout{static_cast<uint64_t>(m.cols), static_cast<uint64_t>(m.rows), channels, type,
                                      static_cast<uint64_t>(m.step[0])}};
  out.channel_names = channel_names(channels);
  for (uint32_t c = 0; c < channels; ++c) out.channel_order.push_back(c);
  if (bgr && channels >= 3) std::swap(out.channel_order[0], out.channel_order[2]);  // BGR(A) -> RGB(A)
  return out;
}

}  // namespace imgstat
