#include "common/luminance.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

#include <tbb/parallel_for.h>

namespace imgstat {

namespace {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Rows in parallel: a plane is a full pass over the image.
template <class T>
void plane_of(const ImageView& image, const uint32_t* rgb, uint8_t* plane) {
  const Layout& l = image.layout;
  const auto* base = static_cast<const uint8_t*>(image.data);
  const uint64_t pb = l.pixel_bytes();
  tbb::parallel_for(uint64_t{0}, l.height, [&](uint64_t y) {
    uint8_t* out = plane + y * l.width * sizeof(std::conditional_t<std::is_floating_point_v<T>, double, T>);
    const uint8_t* row = base + y * l.stride();
    for (uint64_t x = 0; x < l.width; ++x) {
      const uint8_t* px = row + x * pb;
      const T r = load<T>(px + rgb[0] * sizeof(T)), g = load<T>(px + rgb[1] * sizeof(T)),
              b = load<T>(px + rgb[2] * sizeof(T));
      if constexpr (std::is_floating_point_v<T>) {
        const double v = luma_float(r, g, b);
        std::memcpy(out, &v, sizeof v);
        out += sizeof v;
      } else {
        const int64_t lo = type_lo(l.type);
        const T v = static_cast<T>(
            static_cast<int64_t>(luma_offset(static_cast<uint32_t>(r - lo), static_cast<uint32_t>(g - lo),
                                             static_cast<uint32_t>(b - lo))) +
            lo);
        std::memcpy(out, &v, sizeof v);
        out += sizeof v;
      }
    }
  });
}

}  // namespace

std::vector<uint8_t> luminance_plane(const ImageView& image, const uint32_t* rgb) {
  const Layout& l = image.layout;
  std::vector<uint8_t> out(l.pixels() * sample_size(luminance_type(l.type)));
  switch (l.type) {
    case SampleType::kUint8: plane_of<uint8_t>(image, rgb, out.data()); break;
    case SampleType::kInt8: plane_of<int8_t>(image, rgb, out.data()); break;
    case SampleType::kUint16: plane_of<uint16_t>(image, rgb, out.data()); break;
    case SampleType::kInt16: plane_of<int16_t>(image, rgb, out.data()); break;
    case SampleType::kFloat32: plane_of<float>(image, rgb, out.data()); break;
    case SampleType::kFloat64: plane_of<double>(image, rgb, out.data()); break;
  }
  return out;
}

StatsRequest luminance_request(const StatsRequest& request) {
  StatsRequest r = request;
  r.luminance = false;
  r.unique_colors = false;
  r.summary = false;
  // The luminance of the pixels as they are: a colour space and a joint
  // histogram are of the image's channels, not of this plane.
  r.colour_space = ColourSpace::kNone;
  r.joint = JointSpec{};
  r.channel_hists.clear();
  return r;
}

void add_luminance(Engine& engine, const ImageView& image, const StatsRequest& request, Result& result) {
  if (!has_luminance(image.layout, request)) return;
  const std::vector<uint8_t> plane = luminance_plane(image, request.rgb);
  const Layout l{image.layout.width, image.layout.height, 1, luminance_type(image.layout.type), 0};
  Result y = engine.analyze(ImageView{plane.data(), l}, luminance_request(request));
  result.has_luminance = true;
  result.luminance = std::move(y.channels.front());
}

}  // namespace imgstat
