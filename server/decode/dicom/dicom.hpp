// DICOM images through GDCM (Debian's libgdcm: uncompressed little and big
// endian, JPEG baseline, extended and lossless, JPEG-LS, JPEG 2000, RLE),
// their values as pydicom's apply_modality_lut gives them:
// - modality values by default: RescaleSlope * stored + RescaleIntercept
//   (Hounsfield units for CT). Where slope and intercept are integers the
//   values are integers, in the narrowest of uint8, int8, uint16 and int16
//   that holds every value the stored bits can give (float64 past them);
//   other scalings are float64;
// - Pixel Padding Value (and its range limit): those pixels are missing,
//   NaN (float32 where that holds every value exactly, else float64), left
//   out of every statistic and counted apart;
// - MONOCHROME1 is inverted as viewers show it, within the values' range
//   (lo + hi - v), and a fact says so;
// - stored values on request (DecodeOptions::stored_values): the samples as
//   the file holds them, nothing applied;
// - frames are planes; colour (RGB, YBR) is channels, planar or not; JPEG's
//   YCbCr comes as libjpeg converts it (RGB);
// - PALETTE COLOR through its lookup tables (segmented ones expanded) to
//   R, G, B and, with an alpha table, A (pydicom's apply_color_lut; uint8
//   or uint16 as the tables' entries), its stored indices on request;
// - 1-bit pixel data (uncompressed) as uint8 0 and 1;
// - a deflated data set (Deflated Explicit VR Little Endian) inflated first;
// - a segmentation (SEG) over DICOM images, as a mask or label image: a
//   label volume of its segments' numbers on the image's planes (below).
// Personal data stays out: of the attributes, only the allowlisted facts
// (modality, body part, series description, pixel spacing, slice
// thickness, transfer syntax, photometric interpretation, rescale) are
// read into answers, and GDCM's own messages are silenced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "decode/rows.hpp"
#include "decode/tar/tar.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

// Where a frame lies, from a multi-frame file's per-frame functional
// groups; a segmentation's frame also names its segment and the image it
// was made on (DerivationImageSequence's source).
struct DicomFramePlace {
  bool has_position = false;
  double position[3] = {0, 0, 0};  // PlanePositionSequence's ImagePositionPatient
  uint32_t segment = 0;            // SegmentIdentificationSequence's ReferencedSegmentNumber
  std::string source;              // ReferencedSOPInstanceUID (never in an answer)
  uint64_t source_frame = 0;       // ReferencedFrameNumber (0: not said)
};

struct DicomImage {
  uint64_t width = 0, height = 0, frames = 1;
  uint32_t channels = 1;
  SampleType type = SampleType::kUint16;  // the values' (as above)
  uint32_t bits_stored = 0;
  uint64_t decoded_bytes = 0;  // GDCM's buffer of every frame
  uint64_t inflated_bytes = 0;  // a deflated file's bytes as read, inflated (0: not deflated)
  std::vector<std::string> channel_names;
  std::vector<std::pair<std::string, std::string>> keywords;
  std::vector<std::string> warnings;
  // Where the slice lies, to order a series' slices (never in an answer:
  // the series' UID only groups them).
  std::string series_uid;
  bool has_position = false, has_orientation = false, has_instance = false;
  double position[3] = {0, 0, 0};     // ImagePositionPatient
  double orientation[6] = {0, 0, 0, 0, 0, 0};  // ImageOrientationPatient: row, then column direction
  int64_t instance = 0;                // InstanceNumber
  std::string sop_instance;            // SOPInstanceUID: where a SEG's frames point (never in an answer)
  std::vector<DicomFramePlace> frame_places;  // each frame's, where the file says (else empty)
  // A segmentation (SEG): BINARY (1-bit) or FRACTIONAL, and its segments'
  // numbers (SegmentSequence), ascending.
  bool segmentation = false, fractional = false;
  std::vector<uint32_t> segments;
};

bool is_dicom(const uint8_t* data, size_t size);  // "DICM" at 128
// Throws kInvalidArgument naming what is not read; kResourceExhausted for
// frames past max_planes or frames past max_pixels, or a deflated data set
// inflating past max_inflated bytes.
DicomImage plan_dicom(const uint8_t* data, size_t size, bool stored_values, uint64_t max_planes, uint64_t max_pixels,
                      uint64_t max_inflated);
// The chosen frames, one after another, in the sink's bands.
void decode_dicom(const uint8_t* data, size_t size, const DicomImage& image, bool stored_values,
                  const std::vector<uint64_t>& frames, const std::function<bool()>& cancelled, const RowSink& sink);

// A series as one volume: the DICOM files of a tar (the client's making:
// a folder's files), grouped by SeriesInstanceUID (each group a series of
// the input, in the order its first file comes), each group's slices
// ordered along the slice normal (ImageOrientationPatient's row x column)
// by ImagePositionPatient, else by InstanceNumber, else by name; a slice's
// frames are planes in their order. Every slice must have the first's size
// and channels; values whose types differ between slices (a rescale that
// is integral in one, not in another) are float64.
struct DicomSlice {
  std::string name;
  TarSpan bytes;
  DicomImage image;
};
struct DicomSeries {
  std::vector<DicomSlice> slices;  // ordered
  uint32_t series_count = 1;
  std::string order;  // "ImagePositionPatient", "InstanceNumber" or "file names"
  SampleType type = SampleType::kUint16;
  uint64_t planes = 0;
  uint64_t decoded_bytes = 0;  // the largest slice's: one slice is decoded at a time
  std::vector<std::string> warnings;
};
DicomSeries plan_dicom_series(const std::map<std::string, TarSpan>& members, uint32_t series, bool stored_values,
                              uint64_t max_planes, uint64_t max_pixels, uint64_t max_inflated);
void decode_dicom_series(const DicomSeries& series, bool stored_values, const std::vector<uint64_t>& planes,
                         const std::function<bool()>& cancelled, const RowSink& sink);

// Where each plane of an image lies, to place a segmentation's frames on
// it: the SOP instance and frame it comes from and, where the files say,
// its ImagePositionPatient. A file's frames, or a series' planes in order.
struct DicomPlace {
  std::string sop_instance;
  uint64_t frame = 1;  // 1-based, as ReferencedFrameNumber counts
  bool has_position = false;
  double position[3] = {0, 0, 0};
};
std::vector<DicomPlace> dicom_places(const DicomImage& image);
std::vector<DicomPlace> dicom_places(const DicomSeries& series);

// A segmentation's frames placed on an image's planes (highdicom's and
// dcmqi's rule): a frame lies on the plane of the source image it names
// (ReferencedSOPInstanceUID and ReferencedFrameNumber), else on the plane
// at its ImagePositionPatient (within kPlaceTolerance mm). A frame lying on
// no plane, a FRACTIONAL segmentation, or a segment number the file does not
// describe is kInvalidArgument. The volume's values are segment numbers
// (uint16; 0 where no segment is), each plane the union of its frames;
// segments that overlap on a pixel are refused when decoded, unless the
// volume is a mask (union_only).
constexpr double kPlaceTolerance = 0.01;
struct DicomLabels {
  std::vector<std::vector<uint32_t>> frames;  // each plane's frames (0-based), in frame order
  uint64_t frames_placed = 0;
  bool union_only = false;  // a mask: segments may overlap
};
DicomLabels place_segmentation(const DicomImage& segmentation, const std::vector<DicomPlace>& planes);
// The chosen planes of that volume, in the sink's bands (uint16).
void decode_dicom_labels(const uint8_t* data, size_t size, const DicomImage& segmentation, const DicomLabels& labels,
                         const std::vector<uint64_t>& planes, const std::function<bool()>& cancelled,
                         const RowSink& sink);

}  // namespace imgstat
