// A test image as a raw AnalyzeRequest: its bytes (the last row without its
// padding) and its layout.
#pragma once

#include <string>

#include "core/validate.hpp"
#include "imgstat/v1/imgstat.pb.h"
#include "test_images.hpp"

namespace imgstat::testing {

inline v1::AnalyzeRequest raw_request(const TestImage& img) {
  v1::AnalyzeRequest r;
  const Layout& l = img.view.layout;
  r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  r.mutable_input()->set_data(std::string(static_cast<const char*>(img.view.data), l.min_bytes()));
  v1::RawLayout* raw = r.mutable_input()->mutable_raw();
  raw->set_width(static_cast<uint32_t>(l.width));
  raw->set_height(static_cast<uint32_t>(l.height));
  raw->set_channels(l.channels);
  raw->set_sample_type(proto_sample_type(l.type));
  raw->set_row_stride(l.row_stride);
  return r;
}

}  // namespace imgstat::testing
