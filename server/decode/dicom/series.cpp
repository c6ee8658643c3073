// A DICOM series as one volume (dicom.hpp says what it is).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <tbb/parallel_for.h>

#include "decode/decode.hpp"
#include "decode/dicom/dicom.hpp"

namespace imgstat {

DicomSeries plan_dicom_series(const std::map<std::string, TarSpan>& members, uint32_t series, bool stored_values,
                              uint64_t max_planes, uint64_t max_pixels, uint64_t max_inflated) {
  // Each file's attributes, on every core (GDCM reads them under a shared lock).
  std::vector<DicomSlice> all;
  for (const auto& [name, span] : members)
    if (is_dicom(span.data, span.size)) all.push_back(DicomSlice{name, span, {}});
  tbb::parallel_for(size_t{0}, all.size(), [&](size_t i) {
    DicomSlice& slice = all[i];
    try {
      slice.image = plan_dicom(slice.bytes.data, slice.bytes.size, stored_values, max_planes, max_pixels, max_inflated);
    } catch (const Error& e) {
      fail(e.code(), slice.name + ": " + e.what());
    }
  });
  // The series, in the order their first file comes (names sorted).
  std::vector<std::string> uids;
  std::vector<std::vector<DicomSlice>> groups;
  uint64_t planes = 0;
  for (DicomSlice& slice : all) {
    planes += slice.image.frames;
    if (planes > max_planes)
      fail(ErrorCode::kResourceExhausted, "DICOM: the series' slices hold more than " + std::to_string(max_planes) +
                                              " planes, past the limit (--max-planes)");
    // A file without a SeriesInstanceUID is a series of its own.
    const auto it = slice.image.series_uid.empty() ? uids.end() : std::find(uids.begin(), uids.end(), slice.image.series_uid);
    if (it == uids.end()) {
      uids.push_back(slice.image.series_uid);
      groups.emplace_back();
      groups.back().push_back(std::move(slice));
    } else {
      groups[static_cast<size_t>(it - uids.begin())].push_back(std::move(slice));
    }
  }
  if (groups.empty()) invalid_data("DICOM: the tar holds no DICOM file");
  DicomSeries out;
  out.series_count = static_cast<uint32_t>(groups.size());
  if (series >= groups.size())
    invalid_data("series " + std::to_string(series) + " was asked for, but these files hold " +
                 std::to_string(groups.size()) + " series");
  out.slices = std::move(groups[series]);
  std::vector<DicomSlice>& s = out.slices;
  const DicomImage& first = s.front().image;
  for (const DicomSlice& x : s) {
    if (x.image.width != first.width || x.image.height != first.height || x.image.channels != first.channels)
      invalid_data("DICOM: " + x.name + " is " + std::to_string(x.image.width) + "x" + std::to_string(x.image.height) +
                   " with " + std::to_string(x.image.channels) + " channels, but " + s.front().name + " of its series is " +
                   std::to_string(first.width) + "x" + std::to_string(first.height) + " with " +
                   std::to_string(first.channels));
  }
  // Along the slice normal where every slice says where it lies.
  const bool geometry = std::all_of(s.begin(), s.end(), [](const DicomSlice& x) {
    return x.image.has_position && x.image.has_orientation;
  });
  const bool instances = std::all_of(s.begin(), s.end(), [](const DicomSlice& x) { return x.image.has_instance; });
  if (geometry) {
    const double* o = first.orientation;
    const double n[3] = {o[1] * o[5] - o[2] * o[4], o[2] * o[3] - o[0] * o[5], o[0] * o[4] - o[1] * o[3]};
    auto along = [&](const DicomSlice& x) {
      return x.image.position[0] * n[0] + x.image.position[1] * n[1] + x.image.position[2] * n[2];
    };
    std::stable_sort(s.begin(), s.end(), [&](const DicomSlice& a, const DicomSlice& b) { return along(a) < along(b); });
    out.order = "ImagePositionPatient";
    for (size_t i = 1; i < s.size(); ++i) {
      if (along(s[i]) == along(s[i - 1])) {
        out.warnings.push_back("DICOM: " + s[i - 1].name + " and " + s[i].name + " lie at the same position");
        break;
      }
    }
    for (const DicomSlice& x : s) {
      if (!std::equal(x.image.orientation, x.image.orientation + 6, first.orientation)) {
        out.warnings.push_back("DICOM: the slices' orientations differ (" + x.name + "): ordered along the first's normal");
        break;
      }
    }
  } else if (instances) {
    std::stable_sort(s.begin(), s.end(), [](const DicomSlice& a, const DicomSlice& b) { return a.image.instance < b.image.instance; });
    out.order = "InstanceNumber";
  } else {
    out.order = "file names";
    out.warnings.push_back("DICOM: the slices say neither where they lie nor their InstanceNumber: ordered by name");
  }
  out.type = first.type;
  for (const DicomSlice& x : s) {
    if (x.image.type != out.type) out.type = SampleType::kFloat64;
    out.planes += x.image.frames;
    out.decoded_bytes = std::max(out.decoded_bytes, x.image.decoded_bytes + x.bytes.size + x.image.inflated_bytes);
  }
  if (out.type == SampleType::kFloat64 && first.type != SampleType::kFloat64)
    out.warnings.push_back("DICOM: the slices' values are of several types (their rescales differ): float64");
  return out;
}

namespace {

template <class T>
void widen(const uint8_t* from, uint64_t n, double* to) {
  for (uint64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, from + i * sizeof(T), sizeof(T));
    to[i] = static_cast<double>(v);
  }
}

void to_float64(const uint8_t* from, uint64_t n, SampleType type, double* to) {
  switch (type) {
    case SampleType::kUint8: return widen<uint8_t>(from, n, to);
    case SampleType::kInt8: return widen<int8_t>(from, n, to);
    case SampleType::kUint16: return widen<uint16_t>(from, n, to);
    case SampleType::kInt16: return widen<int16_t>(from, n, to);
    case SampleType::kFloat32: return widen<float>(from, n, to);
    case SampleType::kFloat64: std::memcpy(to, from, n * 8); return;
  }
}

}  // namespace

void decode_dicom_series(const DicomSeries& series, bool stored_values, const std::vector<uint64_t>& planes,
                         const std::function<bool()>& cancelled, const RowSink& sink) {
  const DicomImage& first = series.slices.front().image;
  const uint64_t samples_per_row = first.width * first.channels;
  RowBand current;  // the sink's band the rows go to
  bool begun = false;
  size_t k = 0;           // planes handed so far
  uint64_t slice_first = 0;  // the series' plane index of this slice's frame 0
  for (const DicomSlice& slice : series.slices) {
    const uint64_t frames = slice.image.frames;
    std::vector<uint64_t> local;
    for (size_t j = k; j < planes.size() && planes[j] < slice_first + frames; ++j) local.push_back(planes[j] - slice_first);
    slice_first += frames;
    if (local.empty()) continue;
    const size_t base = k;
    const bool convert = slice.image.type != series.type;
    std::vector<uint8_t> staging;
    auto staged = [&](RowBand real) {
      if (!convert) return real;
      staging.resize(real.count * samples_per_row * sample_size(slice.image.type));
      return RowBand{staging.data(), real.count};
    };
    // One slice's decode as part of the volume: its begin is the volume's
    // (the first slice) or its next plane; its planes are the volume's.
    RowSink one;
    one.begin = [&](uint32_t w, uint32_t h, uint32_t c, SampleType) {
      if (!begun) {
        begun = true;
        current = sink.begin(w, h, c, series.type);
      } else {
        sink.plane(base);
      }
      return staged(current);
    };
    one.band = [&](const uint8_t* rows, uint32_t first_row, uint32_t count) {
      if (convert) {
        to_float64(rows, uint64_t{count} * samples_per_row, slice.image.type, reinterpret_cast<double*>(current.rows));
        rows = current.rows;
      }
      current = sink.band(rows, first_row, count);
      return staged(current);
    };
    one.plane = [&](uint64_t i) { sink.plane(base + i); };
    decode_dicom(slice.bytes.data, slice.bytes.size, slice.image, stored_values, local, cancelled, one);
    k += local.size();
  }
}

}  // namespace imgstat
