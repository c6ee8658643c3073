// Request checks that need no decoding: options, raw layouts, byte counts.
// Each throws imgstat::Error (kInvalidArgument) with a message that names the
// field and the problem.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "imgstat/engine.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

StatsRequest stats_request_of(const v1::Options& options);
// A raw image's layout; a raw stack's (RawLayout.depth) is its planes one
// below the other, depth times height rows.
Layout raw_layout_of(const v1::RawLayout& raw);
// Its planes: 1, or RawLayout.depth.
inline uint64_t raw_planes_of(const v1::RawLayout& raw) { return raw.depth() > 1 ? raw.depth() : 1; }
// A raw buffer holds exactly the layout: stride * height bytes, or one row
// of padding fewer.
void check_raw_size(const Layout& layout, uint64_t bytes);
SampleType sample_type_of(v1::SampleType t);
v1::SampleType proto_sample_type(SampleType t);
// Options.parts as the engines take it, without its mask or label image
// (parts.map is left for the caller to set); kWhole when absent.
struct Limits;
Parts parts_of(const v1::Options& options, const Limits& limits);
// A raw mask or label image: its layout checked against `bytes` as
// raw_layout_of() and check_raw_size() check an image's.
PartMapView raw_map_of(const v1::RawLayout& raw, const void* data, uint64_t bytes, const char* what);
// INPUT_KIND_UNSPECIFIED is ENCODED.
v1::InputKind kind_of(const v1::Input& input);

// A request's options as the analyzer and its uploads take them,
// translated once: the statistics, and the parts (without their map).
// Options.planes: which planes of a file are answered, and each apart too.
struct PlaneChoice {
  bool each = false;
  uint64_t first = 0;
  uint64_t count = 0;  // 0: to the last
  uint32_t level = 0;  // a pyramid's
  // A file of several series: the one answered; none: every series.
  std::optional<uint32_t> series;
};

struct RequestPlan {
  StatsRequest stats;
  Parts parts;
  PlaneChoice planes;
  bool with_parts() const { return parts.kind != PartsKind::kWhole; }
};
RequestPlan plan_request(const v1::Options& options, const Limits& limits);

// The request for an image whose reported channel i is engine channel
// order[i]: R, G and B for the luminance; joint histogram channels, which
// come as reported (a colour space's are its own).
StatsRequest with_rgb(StatsRequest request, const std::vector<uint32_t>& order);

}  // namespace imgstat
