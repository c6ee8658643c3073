// The step from an engine's statistics to the contract's: an AnalyzeResponse,
// its channels, parts, joint histograms and facts. The analyzer and its
// uploads answer with it, and the CLI's --aggregate writes its merged
// answers with it, so all read the same.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "imgstat/engine.hpp"
#include "decode/decode.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

// Where positions are: in an image `width` wide (0: none), or in a stack of
// planes `plane_height` high each, the first of them `first_plane`.
struct PositionFrame {
  uint64_t width = 0;
  uint64_t plane_height = 0;  // 0: one plane
  uint64_t first_plane = 0;
};
// What `request` asked for of `s`, a channel of `type` samples; positions
// as (x, y) or (x, y, plane) in `frame`.
void fill_channel(v1::ChannelStats* c, const ChannelStats& s, const StatsRequest& request, SampleType type,
                  const PositionFrame& frame);

// An image as it is reported: its format and layout, and for each reported
// channel (R, G, B, A or Gray, in that order) the engine's channel holding it.
struct Described {
  std::string format;
  Layout layout;  // a stack's: its planes one below the other
  std::vector<uint32_t> order;  // engine channel of each reported channel
  std::vector<std::string> names;
  uint64_t planes = 1;       // in the layout
  uint64_t first_plane = 0;  // in the file, of the first of them
  uint64_t plane_height() const { return layout.height / planes; }
};
// One plane of a stack's layout (its height, the stack's stride).
inline Layout plane_layout(const Described& d) {
  Layout l = d.layout;
  l.height = d.plane_height();
  return l;
}
Described describe_pixels(const std::string& format, const Layout& layout);
// Raw pixels, a stack of RawLayout.depth planes where it says so; a depth
// over max_planes is refused (kResourceExhausted, naming --max-planes).
Described describe_raw(const v1::RawLayout& raw, uint64_t max_planes);
// The channels reported: a colour space's, in its order, or the image's.
Described measured(const Described& d, const StatsRequest& request);

// Everything a result answers for `image`: channels, summary, luminance,
// joint histogram, parts (parts: the request asked for parts, for the
// warnings that say what parts do not get).
void fill_response(v1::AnalyzeResponse& r, const Described& image, const Result& result, const StatsRequest& request,
                   bool parts = false);
// Each label part's box (boxes in the parts' order).
void fill_boxes(v1::AnalyzeResponse& r, const std::vector<LabelBox>& boxes);
// Options.planes.each: each plane's own answer (planes: Results in order,
// of the planes of `image`, a stack); or, with no stack, the image's
// channels once more as its one plane's.
void fill_planes(v1::AnalyzeResponse& r, const Described& image, const std::vector<Result>& planes,
                 const StatsRequest& request);
// The file's planes, in its facts.
// With an animation's frame delays for the planes answered (r.planes, in order).
void fill_plane_facts(v1::AnalyzeResponse& r, uint64_t planes, uint64_t answered, uint64_t reduced_pages,
                      const std::vector<uint32_t>& delays_ms = {});
// A decoded file's: its planes, its frames' delays, its stack's axes (each
// plane's z, c and t).
void fill_plane_facts(v1::AnalyzeResponse& r, const DecodePlan& plan, uint64_t answered);
// A joint histogram's counts: dense up to kDenseJointBins, else the bins
// that are not zero, as (index, count).
void set_joint_counts(v1::JointHistogram* out, const std::vector<uint64_t>& counts);
// What an encoded file says about itself; bit depth and colour type from
// the decoded pixels where its format did not say.
void fill_facts(v1::AnalyzeResponse& r, const uint8_t* data, size_t size, const Layout& layout,
                const std::function<void(uint64_t, uint64_t)>& release = {});
void set_duration(google::protobuf::Duration* d, std::chrono::steady_clock::duration t);

// The reverse, for what merges: count, NaN and Inf counts, the histogram and
// the merge state of a channel of `type` samples.
ChannelStats merge_part_of(const v1::ChannelStats& c, SampleType type);

}  // namespace imgstat
