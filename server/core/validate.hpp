// Request checks that need no decoding: options, raw layouts, byte counts.
// Each throws imgstat::Error (kInvalidArgument) with a message that names the
// field and the problem.
#pragma once

#include <cstdint>

#include "imgstat/engine.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

StatsRequest stats_request_of(const v1::Options& options);
Layout raw_layout_of(const v1::RawLayout& raw);
// A raw buffer holds exactly the layout: stride * height bytes, or one row
// of padding fewer.
void check_raw_size(const Layout& layout, uint64_t bytes);
SampleType sample_type_of(v1::SampleType t);
v1::SampleType proto_sample_type(SampleType t);
// INPUT_KIND_UNSPECIFIED is ENCODED.
v1::InputKind kind_of(const v1::Input& input);

}  // namespace imgstat
