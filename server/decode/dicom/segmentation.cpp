// A DICOM segmentation's frames placed on the planes of the image it was
// made on (dicom.hpp says the rule).
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "decode/decode.hpp"
#include "decode/dicom/dicom.hpp"

namespace imgstat {
namespace {

DicomPlace place_of(const DicomImage& image, uint64_t frame) {
  DicomPlace p;
  p.sop_instance = image.sop_instance;
  p.frame = frame + 1;
  if (!image.frame_places.empty() && image.frame_places[frame].has_position) {
    p.has_position = true;
    for (int i = 0; i < 3; ++i) p.position[i] = image.frame_places[frame].position[i];
  } else if (image.frames == 1 && image.has_position) {
    p.has_position = true;
    for (int i = 0; i < 3; ++i) p.position[i] = image.position[i];
  }
  return p;
}

}  // namespace

std::vector<DicomPlace> dicom_places(const DicomImage& image) {
  std::vector<DicomPlace> out;
  for (uint64_t f = 0; f < image.frames; ++f) out.push_back(place_of(image, f));
  return out;
}

std::vector<DicomPlace> dicom_places(const DicomSeries& series) {
  std::vector<DicomPlace> out;
  for (const DicomSlice& slice : series.slices)
    for (uint64_t f = 0; f < slice.image.frames; ++f) out.push_back(place_of(slice.image, f));
  return out;
}

DicomLabels place_segmentation(const DicomImage& seg, const std::vector<DicomPlace>& planes) {
  if (!seg.segmentation) fail(ErrorCode::kInternal, "DICOM: placing an image that is not a segmentation");
  if (seg.fractional)
    invalid_data("DICOM SEG: a FRACTIONAL segmentation (probabilities or occupancy) is not a label volume; "
                 "analyze it as an image");
  if (seg.frame_places.size() != seg.frames)
    invalid_data("DICOM SEG: its per-frame functional groups (5200,9230) do not describe each of its " +
                 std::to_string(seg.frames) + " frames");
  std::map<std::pair<std::string, uint64_t>, uint64_t> by_source;
  for (uint64_t k = 0; k < planes.size(); ++k)
    if (!planes[k].sop_instance.empty()) by_source.emplace(std::make_pair(planes[k].sop_instance, planes[k].frame), k);
  auto at_position = [&](const double* at) -> int64_t {
    for (uint64_t k = 0; k < planes.size(); ++k) {
      if (!planes[k].has_position) continue;
      double d = 0;
      for (int i = 0; i < 3; ++i) d = std::max(d, std::fabs(planes[k].position[i] - at[i]));
      if (d <= kPlaceTolerance) return static_cast<int64_t>(k);
    }
    return -1;
  };
  DicomLabels out;
  out.frames.resize(planes.size());
  for (uint64_t f = 0; f < seg.frames; ++f) {
    const DicomFramePlace& p = seg.frame_places[f];
    const std::string which = "its frame " + std::to_string(f + 1) + " (segment " + std::to_string(p.segment) + ")";
    if (p.segment == 0 || p.segment > 65535 ||
        !std::binary_search(seg.segments.begin(), seg.segments.end(), p.segment))
      invalid_data("DICOM SEG: " + which + " names a segment its SegmentSequence does not describe");
    int64_t k = -1;
    if (!p.source.empty()) {
      const auto it = by_source.find({p.source, p.source_frame ? p.source_frame : 1});
      if (it != by_source.end()) k = static_cast<int64_t>(it->second);
    }
    if (k < 0 && p.has_position) k = at_position(p.position);
    if (k < 0)
      invalid_data("DICOM SEG: " + which + " lies on no plane of the image: " +
                   (p.source.empty() ? "it names no source image" : "the image it was made on is not among the image's") +
                   " and " + (p.has_position ? "no plane lies at its position" : "it gives no position"));
    out.frames[static_cast<size_t>(k)].push_back(static_cast<uint32_t>(f));
    ++out.frames_placed;
  }
  return out;
}

}  // namespace imgstat
