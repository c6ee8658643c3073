// What the table, JSON and CSV renderers share: names and numbers as text.
#pragma once

#include <cstdio>
#include <string>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat::client {

inline bool is_float_type(v1::SampleType t) { return t == v1::SAMPLE_TYPE_FLOAT32 || t == v1::SAMPLE_TYPE_FLOAT64; }

inline std::string sample_type_name(v1::SampleType t) {
  switch (t) {
    case v1::SAMPLE_TYPE_UINT8: return "uint8";
    case v1::SAMPLE_TYPE_UINT16: return "uint16";
    case v1::SAMPLE_TYPE_INT8: return "int8";
    case v1::SAMPLE_TYPE_INT16: return "int16";
    case v1::SAMPLE_TYPE_FLOAT32: return "float32";
    case v1::SAMPLE_TYPE_FLOAT64: return "float64";
    default: return "unknown";
  }
}

inline double ms(const google::protobuf::Duration& d) { return d.seconds() * 1e3 + d.nanos() * 1e-6; }

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// s right-aligned in a field of width w.
inline std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? " " + s : std::string(w - s.size(), ' ') + s;
}

// Numbers of the sample type: integers without a fraction, floats with
// enough digits to tell them apart.
inline std::string number(double v, bool flt) { return flt ? fmt("%.9g", v) : fmt("%.0f", v); }

}  // namespace imgstat::client
