// A stack's Z, C and T from what its first page's ImageDescription says: an
// ImageJ hyperstack's "key=value" lines, or the first Pixels element of an
// OME-TIFF's OME-XML. Text from the file: numbers are parsed with bounds,
// and a layout whose sizes do not multiply to the planes is not taken.
#include <string>

#include "decode/decode.hpp"

namespace imgstat {

namespace {

// The decimal number at s[at...], 0 when none or past 2^31.
uint64_t number_at(const std::string& s, size_t at) {
  uint64_t v = 0;
  size_t i = at;
  for (; i < s.size() && i < at + 10 && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  return i == at || v >= (uint64_t{1} << 31) ? 0 : v;
}

// ImageJ: "images=24\nchannels=2\nslices=3\nframes=4" (absent: 1), the
// channel varying fastest, then the slice, then the frame.
bool imagej(const std::string& d, StackAxes* out) {
  if (d.compare(0, 7, "ImageJ=") != 0) return false;
  auto value = [&](const char* key) -> uint64_t {
    const std::string k = std::string("\n") + key + "=";
    const size_t at = d.find(k);
    return at == std::string::npos ? 1 : number_at(d, at + k.size());
  };
  const uint64_t c = value("channels"), z = value("slices"), t = value("frames");
  if (!c || !z || !t) return false;
  *out = StackAxes{"ImageJ", "CZT", static_cast<uint32_t>(z), static_cast<uint32_t>(c), static_cast<uint32_t>(t)};
  return true;
}

// OME: <Pixels DimensionOrder="XYZCT" SizeZ="3" SizeC="2" SizeT="4" ...>,
// the first image's.
bool ome(const std::string& d, StackAxes* out, uint64_t planes) {
  const size_t start = d.find("<Pixels ");
  if (start == std::string::npos || d.find("<OME") == std::string::npos) return false;
  const size_t end = d.find('>', start);
  if (end == std::string::npos) return false;
  const std::string e = d.substr(start, end - start);
  auto attribute = [&](const char* name) -> std::string {
    const std::string k = std::string(" ") + name + "=\"";
    const size_t at = e.find(k);
    if (at == std::string::npos) return {};
    const size_t close = e.find('"', at + k.size());
    return close == std::string::npos ? std::string() : e.substr(at + k.size(), close - at - k.size());
  };
  const std::string order = attribute("DimensionOrder");
  if (order.size() != 5 || order.compare(0, 2, "XY") != 0) return false;
  const std::string zct = order.substr(2);
  if (zct.find('Z') == std::string::npos || zct.find('C') == std::string::npos || zct.find('T') == std::string::npos)
    return false;
  auto size = [&](const char* name) {
    const std::string v = attribute(name);
    return v.empty() ? uint64_t{1} : number_at(v, 0);
  };
  uint64_t z = size("SizeZ"), c = size("SizeC"), t = size("SizeT");
  if (!z || !c || !t) return false;
  // An RGB channel is one page of three samples: C is then not a plane axis.
  if (z * c * t != planes && z * t == planes) c = 1;
  *out = StackAxes{"OME", zct, static_cast<uint32_t>(z), static_cast<uint32_t>(c), static_cast<uint32_t>(t)};
  return true;
}

}  // namespace

uint64_t StackAxes::coordinate(uint64_t index, char axis) const {
  for (char a : order) {
    const uint64_t n = a == 'Z' ? z : a == 'C' ? c : t;
    if (a == axis) return index % n;
    index /= n;
  }
  return 0;
}

StackAxes stack_axes_of(const std::string& description, uint64_t planes) {
  StackAxes a;
  if (!imagej(description, &a) && !ome(description, &a, planes)) return {};
  if (uint64_t{a.z} * a.c * a.t != planes) return {};
  return a;
}

}  // namespace imgstat
