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
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

// What `request` asked for of `s`, a channel of `type` samples; width turns
// positions into (x, y) (0: none).
void fill_channel(v1::ChannelStats* c, const ChannelStats& s, const StatsRequest& request, SampleType type,
                  uint64_t width);

// An image as it is reported: its format and layout, and for each reported
// channel (R, G, B, A or Gray, in that order) the engine's channel holding it.
struct Described {
  std::string format;
  Layout layout;
  std::vector<uint32_t> order;  // engine channel of each reported channel
  std::vector<std::string> names;
};
Described describe_pixels(const std::string& format, const Layout& layout);
// The channels reported: a colour space's, in its order, or the image's.
Described measured(const Described& d, const StatsRequest& request);

// Everything a result answers for `image`: channels, summary, luminance,
// joint histogram, parts (parts: the request asked for parts, for the
// warnings that say what parts do not get).
void fill_response(v1::AnalyzeResponse& r, const Described& image, const Result& result, const StatsRequest& request,
                   bool parts = false);
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
