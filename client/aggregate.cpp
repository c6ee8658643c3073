#include "aggregate.hpp"

#include "core/response.hpp"
#include "core/validate.hpp"

namespace imgstat::client {

Aggregation::Aggregation(const v1::Options& options) : request_(stats_request_of(options)) {
  const StatsRequest part = Merger::part_request(request_);
  part_options_ = options;
  part_options_.clear_statistics();
  part_options_.add_statistics(v1::STATISTIC_MERGE_STATE);
  if (part.histogram) part_options_.add_statistics(v1::STATISTIC_HISTOGRAM);
  part_options_.clear_percentiles();
}

bool Aggregation::add(const v1::AnalyzeResponse& r, std::string* why) {
  try {
    return add_or_throw(r);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

bool Aggregation::add_or_throw(const v1::AnalyzeResponse& r) {
  if (part_options_.has_parts() && r.parts_size() == 0) {  // every pixel of the file had the ignored label
    ++files_without_parts_;
    return true;
  }
  const SampleType type = sample_type_of(r.sample_type());
  // With a colour space the channels are the space's, not the image's.
  const uint32_t channels = request_.colour_space == ColourSpace::kNone
                                ? r.channel_count()
                                : static_cast<uint32_t>(r.channels_size() ? r.channels_size()
                                                        : r.parts_size() ? r.parts(0).channels_size() : 0);
  const std::pair<int, uint32_t> key{r.sample_type(), channels};
  auto at = index_.find(key);
  if (at == index_.end()) {
    std::vector<std::string> names;
    const auto& named = r.channels_size() ? r.channels() : r.parts_size() ? r.parts(0).channels() : r.channels();
    for (const v1::ChannelStats& c : named) names.push_back(c.name());
    if (names.size() != channels) fail(ErrorCode::kInvalidArgument, "the answer's channels do not match its channel count");
    const StatsRequest measured = measured_request(request_, Layout{1, 1, r.channel_count(), type, 0});
    groups_.push_back(Group{r.sample_type(), std::move(names), Merger(type, channels, measured), {}, 0, {}, {}});
    at = index_.emplace(key, groups_.size() - 1).first;
  }
  Group& g = groups_[at->second];
  auto states = [&](const google::protobuf::RepeatedPtrField<v1::ChannelStats>& cs) {
    std::vector<ChannelStats> out;
    for (const v1::ChannelStats& c : cs) out.push_back(merge_part_of(c, type));
    return out;
  };
  if (r.parts_size() == 0) {
    std::vector<ChannelStats> merged = states(r.channels());
    if (r.has_joint()) check_joint(g, r.joint());  // before anything of this answer is added
    g.merger.add(merged);
    if (r.has_joint()) add_joint(g, r.joint());
    return true;
  }
  for (const v1::PartStats& p : r.parts()) {
    if (!p.has_label()) fail(ErrorCode::kInvalidArgument, "only labelled parts are merged across files");
    g.labels.try_emplace(p.label(), type, channels, g.merger.request()).first->second.add(states(p.channels()));
  }
  ++g.label_files;
  return true;
}

// A server's answer is untrusted: a joint histogram's shape is checked as a
// request's is, and against the group's, before anything is sized by it.
uint64_t Aggregation::check_joint(const Group& g, const v1::JointHistogram& h) {
  if (h.bins_size() < 2 || h.bins_size() > static_cast<int>(kMaxJointAxes))
    fail(ErrorCode::kInvalidArgument, "a joint histogram of " + std::to_string(h.bins_size()) + " axes");
  uint64_t bins = 1;
  for (uint32_t b : h.bins()) {
    if (b == 0 || bins * b > kMaxJointBins)
      fail(ErrorCode::kInvalidArgument, "a joint histogram with an axis of no bins or more than 2^24 bins");
    bins *= b;
  }
  if (static_cast<uint64_t>(h.counts_size()) > bins || h.nonzero_index_size() != h.nonzero_count_size())
    fail(ErrorCode::kInvalidArgument, "a joint histogram's counts do not fit its bins");
  for (uint64_t i : h.nonzero_index())
    if (i >= bins) fail(ErrorCode::kInvalidArgument, "a joint histogram bin past its bins");
  if (g.joint) {
    bool same = g.joint->bins_size() == h.bins_size();
    for (int a = 0; same && a < h.bins_size(); ++a) same = g.joint->bins(a) == h.bins(a);
    if (!same) fail(ErrorCode::kInvalidArgument, "joint histograms of different shapes cannot be merged");
  }
  return bins;
}

// Joint histograms add bin by bin; every file's has the same shape and ranges.
void Aggregation::add_joint(Group& g, const v1::JointHistogram& h) {
  const uint64_t bins = check_joint(g, h);
  if (!g.joint) {
    g.joint = h;
    g.joint->clear_counts();
    g.joint->clear_nonzero_index();
    g.joint->clear_nonzero_count();
    g.joint->set_outside(0);
    g.joint_counts.assign(bins, 0);
  }
  for (int i = 0; i < h.counts_size(); ++i) g.joint_counts[i] += h.counts(i);
  for (int i = 0; i < h.nonzero_index_size(); ++i) g.joint_counts[h.nonzero_index(i)] += h.nonzero_count(i);
  g.joint->set_outside(g.joint->outside() + h.outside());
}

std::vector<Outcome> Aggregation::outcomes() const {
  std::vector<Outcome> out;
  for (const Group& g : groups_) {
    if (!g.labels.empty()) {  // each label over every file, in ascending order
      const SampleType type = sample_type_of(g.type);
      Outcome o;
      o.ok = true;
      o.images = g.label_files;
      o.file = "all " + std::to_string(o.images) + " " + to_string(type) + " image" + (o.images == 1 ? "" : "s") +
               " of " + std::to_string(g.names.size()) + " channel" + (g.names.size() == 1 ? "" : "s") + ", by label";
      v1::AnalyzeResponse& r = o.response;
      r.set_format("aggregate");
      r.set_channel_count(static_cast<uint32_t>(g.names.size()));
      r.set_sample_type(g.type);
      for (const auto& [label, merger] : g.labels) {
        const Result merged = merger.result();
        r.set_engine(merged.engine);
        v1::PartStats* p = r.add_parts();
        p->set_label(label);
        for (size_t c = 0; c < merged.channels.size(); ++c) {
          v1::ChannelStats* ch = p->add_channels();
          ch->set_name(g.names[c]);
          fill_channel(ch, merged.channels[c], merger.request(), type, {});
        }
      }
      out.push_back(std::move(o));
    }
    if (g.merger.images() == 0) continue;
    const Result merged = g.merger.result();
    const StatsRequest& request = g.merger.request();
    const SampleType type = sample_type_of(g.type);
    Outcome o;
    o.ok = true;
    o.images = g.merger.images();
    o.file = "all " + std::to_string(o.images) + " " + to_string(type) + " image" + (o.images == 1 ? "" : "s") +
             " of " + std::to_string(g.names.size()) + " channel" + (g.names.size() == 1 ? "" : "s");
    v1::AnalyzeResponse& r = o.response;
    r.set_format("aggregate");
    r.set_channel_count(static_cast<uint32_t>(g.names.size()));
    r.set_sample_type(g.type);
    r.set_engine(merged.engine);
    for (size_t c = 0; c < merged.channels.size(); ++c) {
      v1::ChannelStats* ch = r.add_channels();
      ch->set_name(g.names[c]);
      fill_channel(ch, merged.channels[c], request, type, {});
      o.exact_sums.push_back(request.sum ? g.merger.exact_sum(c) : "");
    }
    if (merged.has_summary) {
      StatsRequest all = request;
      all.histogram = false;
      r.mutable_summary()->set_name("all");
      fill_channel(r.mutable_summary(), merged.summary, all, type, {});
      o.exact_sums.push_back(request.sum ? g.merger.exact_summary_sum() : "");
    }
    if (g.joint) {
      v1::JointHistogram* j = r.mutable_joint();
      *j = *g.joint;
      set_joint_counts(j, g.joint_counts);
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<std::string> Aggregation::notes() const {
  std::vector<std::string> notes;
  if (files_without_parts_)
    notes.push_back(std::to_string(files_without_parts_) + " file" + (files_without_parts_ == 1 ? " has" : "s have") +
                    " no label but the ignored one: nothing of " + (files_without_parts_ == 1 ? "it" : "them") +
                    " is merged");
  bool floats = false;
  for (const Group& g : groups_) floats |= is_float(sample_type_of(g.type)) && g.merger.images() > 0;
  if (!floats) return notes;
  if (request_.histogram && !request_.hist.explicit_range)
    notes.push_back("float images: a histogram of many images needs one range for all of them: give --range LO:HI");
  if (request_.distribution)
    notes.push_back("float images: the median, percentiles, mode and entropy of many images are not merged "
                    "(each image bins its own [min, max])");
  return notes;
}

}  // namespace imgstat::client
