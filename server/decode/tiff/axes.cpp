// A stack's Z, C and T from what its first page's ImageDescription says: an
// ImageJ hyperstack's "key=value" lines, or the first Pixels element of an
// OME-TIFF's OME-XML. Text from the file: numbers are parsed with bounds,
// and a layout whose sizes do not multiply to the planes is not taken.
#include <string>
#include <vector>

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

// The text of the element that starts at d[start] ("<Pixels ..."), up to its '>'.
std::string element_at(const std::string& d, size_t start) {
  const size_t end = d.find('>', start);
  return end == std::string::npos ? std::string() : d.substr(start, end - start);
}

std::string attribute_of(const std::string& e, const char* name) {
  const std::string k = std::string(" ") + name + "=\"";
  const size_t at = e.find(k);
  if (at == std::string::npos) return {};
  const size_t close = e.find('"', at + k.size());
  return close == std::string::npos ? std::string() : e.substr(at + k.size(), close - at - k.size());
}

}  // namespace

// Each <Image> of an OME-XML, as its <Pixels> element and what follows it
// up to the next image: DimensionOrder="XYZCT" SizeZ="3" SizeC="2"
// SizeT="4", a <Channel> element per plane channel (an RGB channel is one
// with SamplesPerPixel="3": SizeC counts samples, the pages channels) and
// <TiffData IFD="n"> where its pages begin.
std::vector<OmeImage> ome_images(const std::string& d) {
  std::vector<OmeImage> out;
  if (d.find("<OME") == std::string::npos) return out;
  uint64_t next_ifd = 0;
  for (size_t at = d.find("<Pixels "); at != std::string::npos && out.size() < kMaxOmeImages;) {
    const size_t following = d.find("<Pixels ", at + 1);
    const std::string body = d.substr(at, following == std::string::npos ? std::string::npos : following - at);
    const std::string e = element_at(d, at);
    at = following;
    OmeImage image;
    const std::string order = attribute_of(e, "DimensionOrder");
    if (order.size() != 5 || order.compare(0, 2, "XY") != 0) return {};
    const std::string zct = order.substr(2);
    if (zct.find('Z') == std::string::npos || zct.find('C') == std::string::npos || zct.find('T') == std::string::npos)
      return {};
    auto size = [&](const char* name) {
      const std::string v = attribute_of(e, name);
      return v.empty() ? uint64_t{1} : number_at(v, 0);
    };
    const uint64_t z = size("SizeZ"), t = size("SizeT");
    uint64_t c = size("SizeC");
    if (!z || !c || !t) return {};
    uint64_t channels = 0;
    for (size_t k = body.find("<Channel"); k != std::string::npos && channels <= c; k = body.find("<Channel", k + 1))
      if (body.compare(k, 9, "<Channel ") == 0 || body.compare(k, 9, "<Channel>") == 0 || body.compare(k, 10, "<Channel/") == 0)
        ++channels;
    if (channels > 0 && channels < c) c = channels;  // SamplesPerPixel > 1: samples of one page
    if (z * c > (uint64_t{1} << 40) / t) return {};  // more planes than any file holds (and no overflow)
    image.axes = StackAxes{"OME", zct, static_cast<uint32_t>(z), static_cast<uint32_t>(c), static_cast<uint32_t>(t)};
    image.planes = z * c * t;
    const size_t tiff_data = body.find("<TiffData");
    const std::string ifd = tiff_data == std::string::npos ? std::string() : attribute_of(element_at(body, tiff_data), "IFD");
    image.first_page = ifd.empty() ? next_ifd : number_at(ifd, 0);
    if (!ifd.empty() && ifd != "0" && image.first_page == 0) return {};
    next_ifd = image.first_page + image.planes;
    out.push_back(image);
  }
  return out;
}

uint64_t StackAxes::coordinate(uint64_t index, char axis) const {
  for (char a : order) {
    const uint64_t n = a == 'Z' ? z : a == 'C' ? c : t;
    if (a == axis) return index % n;
    index /= n;
  }
  return 0;
}

StackAxes stack_axes_of(const std::string& description, uint64_t planes, uint32_t series) {
  StackAxes a;
  if (!imagej(description, &a)) {
    const std::vector<OmeImage> images = ome_images(description);
    if (series >= images.size()) return {};
    a = images[series].axes;
    // An RGB image whose Channel elements are not given: C is samples.
    if (uint64_t{a.z} * a.c * a.t != planes && uint64_t{a.z} * a.t == planes) a.c = 1;
  } else if (series > 0) {
    return {};
  }
  if (uint64_t{a.z} * a.c * a.t != planes) return {};
  return a;
}

}  // namespace imgstat
