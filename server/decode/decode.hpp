// Encoded image bytes to pixels, as OpenCV's imread(IMREAD_UNCHANGED) gives
// them (the file's own sample type), with the conventions of docs/conventions.md:
// channels reported R,G,B(,A) or Gray. A multi-page TIFF is a stack of
// planes (DecodePlan::planes), and so is an animation (an animated GIF,
// APNG or WebP: its frames composited), read one after another in bands;
// other formats are one plane. Untrusted input:
// pixel limits are checked from the header before any decoder allocates.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "decode/jpeg/check.hpp"
#include "decode/rows.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

struct DicomPlace;

struct DecodeOptions {
  uint64_t max_pixels = uint64_t{1} << 30;
  bool allow_truncated = false;
  // Polled inside long decodes where the library allows (libjpeg's check
  // pass, giflib's rows); true ends the decode with kCancelled.
  std::function<bool()> cancelled;
  // Called as a streamed decoder (PNG, TIFF) goes: it is done with the
  // input's bytes [begin, end) for now (it may read them again: a check
  // pass before the decode, a decode that gives up and starts over). A
  // caller whose bytes are a file's pages may drop them (the file holds
  // them): memory is then what is in flight, not the whole file.
  std::function<void(uint64_t begin, uint64_t end)> release;
  // The input is still arriving (an upload being spooled): bytes before
  // `end` may be read once arrived(end) has returned how many have come (at
  // least those), which throws should they never come; arrived(0) asks
  // without waiting. plan_decode reads a PNG's header and the PNG decoder its
  // chunks as they come; every other reader waits for all of it.
  std::function<uint64_t(uint64_t end)> arrived;
  // Files of several planes: the most a file may have, and which are read
  // (from first_plane, plane_count of them; 0: to the last).
  uint64_t max_planes = uint64_t{1} << 20;
  uint64_t first_plane = 0;
  uint64_t plane_count = 0;
  // A TIFF pyramid's level (TiffPlan::levels): 0 the full-resolution pages.
  uint32_t level = 0;
  // A file of several series (TiffPlan::series_count): which one is read.
  uint32_t series = 0;
  // A compressed file (a gzip-compressed FITS) is inflated into memory when
  // planned: at most this many bytes (the analyzer's decode memory limit).
  uint64_t max_expanded_bytes = uint64_t{1} << 30;
  // DICOM: the stored values, without the modality LUT, MONOCHROME1's
  // inversion or padding left out (Options.stored_values).
  bool stored_values = false;
  // The map of parts (a mask or label image) over an image being read
  // (Analyzer::read_map): a DICOM segmentation (SEG) is then a label volume
  // of its segments' numbers on the image's planes, placed by where those
  // lie (the image's, where it is DICOM: dicom_places_of; null otherwise,
  // and a SEG is refused). A label image's segments may not overlap; a
  // mask is their union.
  enum class Map { kNone, kMask, kLabels };
  Map map = Map::kNone;
  std::shared_ptr<const std::vector<DicomPlace>> dicom_places;
};

struct FitsImage;
struct DicomLabels;
struct NiftiVolume;
struct DicomImage;
struct DicomSeries;
struct ZarrArray;

// How a stack's planes are laid out, where the file says (an ImageJ
// hyperstack's description, an OME-TIFF's OME-XML): the plane axes in the
// order they vary, fastest first ("CZT": channel, then slice, then frame),
// and their sizes; z * c * t is the number of planes. Empty source: not said.
struct StackAxes {
  std::string source;  // "ImageJ" or "OME"
  std::string order;   // a permutation of "ZCT"
  uint32_t z = 1, c = 1, t = 1;
  // Plane `index`'s coordinate on `axis` ('Z', 'C' or 'T').
  uint64_t coordinate(uint64_t index, char axis) const;
};
// From a first page's ImageDescription: StackAxes of an ImageJ hyperstack
// or an OME-TIFF's image `series` whose sizes multiply to `planes`; empty
// otherwise.
StackAxes stack_axes_of(const std::string& description, uint64_t planes, uint32_t series = 0);
// An OME-TIFF's images (its series): each one's axes, and its planes'
// pages: `planes` from page `first_page` of the main chain (TiffData's IFD,
// else after the image before). Not OME, or OME-XML this does not follow:
// empty. Text from the file: at most kMaxOmeImages, numbers bounded.
struct OmeImage {
  StackAxes axes;
  uint64_t first_page = 0;
  uint64_t planes = 0;
};
constexpr size_t kMaxOmeImages = 4096;
std::vector<OmeImage> ome_images(const std::string& description);

// What a file declares, from its header alone, before anything is allocated.
struct DecodePlan {
  std::string format;
  uint64_t width = 0;   // of the image that will be decoded (a GIF's first frame)
  uint64_t height = 0;
  uint64_t memory_bytes = 0;  // most memory the decode may hold at once
  // Gray and YCbCr JPEG, plain PNG: the memory when decoded in bands
  // (decode_in_bands) straight into an engine's stream; 0 where only the
  // whole image will do.
  uint64_t band_memory_bytes = 0;
  // Rows a band should hold for that decode; 0: band_rows()'s. A JPEG cut at
  // its restart markers wants large bands, one run per core in each.
  uint32_t band_rows = 0;
  // The pixels the banded decoder gives (channels 0: not known), so that an
  // engine can say before the decode what its stream of them would keep.
  // Exact for TIFF; a PNG's tRNS chunk may add an alpha channel to RGB.
  Layout band_layout{0, 0, 0, SampleType::kUint8, 0};
  // Planes in the file (width and height are each one's), and those chosen
  // (DecodeOptions::first_plane, plane_count): a TIFF's pages, by their
  // directories' offsets, an animated GIF's frames by their index (empty:
  // the file is one plane). Several chosen
  // planes are decoded in bands only (decode_in_bands).
  uint64_t planes = 1;
  uint64_t first_plane = 0;
  std::vector<uint64_t> plane_offsets;
  uint64_t reduced_pages = 0;  // TIFF pages that are reduced-resolution copies, left out
  uint32_t levels = 1, level = 0;  // a TIFF pyramid's levels, and the one read
  uint32_t series_count = 1, series = 0;  // a file's series (pages of one kind, OME images), and the one read
  // An animation (GIF, APNG, WebP of several frames): its frames are
  // composited planes, read by its own decoder in bands, whatever their count.
  bool animated = false;
  std::vector<uint32_t> plane_delays_ms;  // an animation's chosen frames: how long each shows
  StackAxes axes;
  // An ImageJ or OME stack of one-channel pages whose C axis (2 to 4) is
  // made channels: each plane is C pages (plane_offsets holds C a plane, C
  // fastest), named C0, C1, ...; axes.order then leaves C out.
  uint32_t pages_per_plane = 1;
  std::vector<std::string> channel_names;  // empty: channel_names(n)
  std::vector<std::string> warnings;
  // Bits a sample is stored in where the values' type differs (a FITS
  // file's BITPIX); 0: the type's.
  uint32_t stored_bits = 0;
  // What a scientific format's header says of the image (FITS keywords).
  std::vector<std::pair<std::string, std::string>> keywords;
  // A gzip-compressed file, inflated when planned: what is decoded.
  std::shared_ptr<const std::vector<uint8_t>> expanded;
  std::shared_ptr<const FitsImage> fits;  // the FITS image HDU read
  std::shared_ptr<const NiftiVolume> nifti;
  std::shared_ptr<const DicomImage> dicom;
  std::shared_ptr<const DicomSeries> dicom_series;  // a series' slices as one volume (a tar of its files)
  std::shared_ptr<const DicomLabels> dicom_labels;  // a SEG read as a map: its frames on the image's planes
  std::shared_ptr<const ZarrArray> zarr;  // a Zarr store's array read (its chunks where they lie in the tar)
  // The decoded planes are a pure function of the input's bytes (an
  // uncompressed FITS image): handed to a sink's read_planes when it has one,
  // so an engine's second pass reads them again rather than keeping them.
  bool readable = false;
  uint64_t chosen_planes() const { return plane_offsets.empty() ? 1 : plane_offsets.size() / pages_per_plane; }
};

[[noreturn]] inline void invalid_data(const std::string& message) { fail(ErrorCode::kInvalidArgument, message); }

// Sets OpenCV's own pixel limit (OPENCV_IO_MAX_IMAGE_PIXELS) to max_pixels
// before its first decode; later calls change nothing.
void configure_decoders(uint64_t max_pixels);

struct DecodedImage {
  std::string format;
  cv::Mat pixels;  // owns the samples that view points at
  ImageView view;
  // Reported channel i is engine channel channel_order[i] (OpenCV's BGR(A) is
  // reported as R,G,B(,A)).
  std::vector<uint32_t> channel_order;
  std::vector<std::string> channel_names;
  std::vector<std::string> warnings;
  std::string decoder;  // "libjpeg-turbo", "imgstat-zarr", "imgstat-png", "imgstat-apng", "libtiff", "giflib", "libwebp", "imgstat-bmp" or "opencv"
};

// The streamed decoders: a Gray or YCbCr JPEG (libjpeg-turbo's one pass,
// which is also its check), a plain PNG (decode_png) and most TIFFs
// (decode_tiff), rows to sink a band at a time. Not taken: nothing went to the sink, and decode_image answers.
// Throws as decode_image does.
struct BandedDecode {
  bool taken = false;
  std::string decoder;
  std::vector<std::string> warnings;
  std::string refusal;  // not taken because the library refused part of the file: its words
  bool final = false;    // and no other decoder would read it right: the refusal is the answer
};
BandedDecode decode_in_bands(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options,
                             const RowSink& sink);

// Throws imgstat::Error: kInvalidArgument for empty, unrecognized or corrupt
// headers and unsupported formats, kResourceExhausted over max_pixels.
DecodePlan plan_decode(const uint8_t* data, size_t size, const DecodeOptions& options);
// Where a DICOM image's planes lie (DecodeOptions::dicom_places), for a
// map over it; null where the plan is not DICOM.
std::shared_ptr<const std::vector<DicomPlace>> dicom_places_of(const DecodePlan& plan);

// Throws imgstat::Error: kInvalidArgument for corrupt, truncated or
// unsupported data, kResourceExhausted over max_pixels, kCancelled.
DecodedImage decode_image(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options);
// libjpeg's check pass over a whole JPEG, as decode_image runs it before any
// JPEG decoder: throws kInvalidArgument for corrupt data and, unless
// allow_truncated, for data that ends before its last block; kCancelled.
JpegCheck check_jpeg_data(const uint8_t* data, size_t size, const DecodeOptions& options);

// The answer a check's verdict gives, the same for the CPU and GPU paths:
// throws kInvalidArgument for corrupt data, for truncated data unless
// allowed, and for what libjpeg refused.
void enforce_jpeg_check(const JpegCheck& check, bool allow_truncated);

// A stack's chosen planes decoded into one image, one plane below the
// other (a label volume, or a volume whose parts are asked): the streamed
// decoder's bands gathered. Holds plan.band_layout's bytes times the planes
// beside the decoder's own (stack_memory_bytes). Throws as decode_image does.
DecodedImage decode_planes(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options);
uint64_t stack_memory_bytes(const DecodePlan& plan);

// plan_decode, then decode_image.
DecodedImage decode_image(const uint8_t* data, size_t size, const DecodeOptions& options);

// Names of n channels in their stored order: Gray; Gray,A; R,G,B; R,G,B,A.
std::vector<std::string> channel_names(uint32_t n);

// The decoders OpenCV 4.6 lacks or gets wrong, each with its own library or
// parser. Empty Mat: not handled here, leave it to OpenCV. Results are in
// OpenCV's channel order (BGR, BGRA) so that every path reports alike.
cv::Mat decode_bmp_core(const uint8_t* data, size_t size, const DecodeOptions& options);
cv::Mat decode_gif(const uint8_t* data, size_t size, const DecodeOptions& options, std::vector<std::string>* warnings);
cv::Mat decode_webp_frames(const uint8_t* data, size_t size, std::vector<std::string>* warnings);

}  // namespace imgstat
