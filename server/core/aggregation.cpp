#include "core/aggregation.hpp"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

#include "core/response.hpp"
#include "core/validate.hpp"

namespace imgstat {

namespace {

// A merger's state as one image's channels would carry it.
void put_state(google::protobuf::RepeatedPtrField<v1::ChannelStats>* out, const Merger& m, SampleType type,
               const std::vector<std::string>& names) {
  StatsRequest carried;
  carried.min_max = carried.sum = carried.stddev = false;
  carried.histogram = is_float(type) && m.request().histogram;  // integers' bins follow from their value counts
  const std::vector<ChannelStats> state = m.state();
  for (size_t c = 0; c < state.size(); ++c) {
    v1::ChannelStats* ch = out->Add();
    ch->set_name(c < names.size() ? names[c] : "");
    fill_channel(ch, state[c], carried, type, {});
  }
}

std::vector<ChannelStats> states_of(const google::protobuf::RepeatedPtrField<v1::ChannelStats>& cs, SampleType type) {
  std::vector<ChannelStats> out;
  for (const v1::ChannelStats& c : cs) out.push_back(merge_part_of(c, type));
  return out;
}

}  // namespace

Aggregation::Aggregation(const v1::Options& options) : request_(stats_request_of(options)) {
  const StatsRequest part = Merger::part_request(request_);
  part_options_ = options;
  part_options_.clear_statistics();
  part_options_.add_statistics(v1::STATISTIC_MERGE_STATE);
  if (part.histogram) part_options_.add_statistics(v1::STATISTIC_HISTOGRAM);
  // Each image's quality measures: QualitySummary's, not the merge's.
  if (request_.quality) part_options_.add_statistics(v1::STATISTIC_QUALITY);
  // And their hashes: DuplicateFinder's.
  if (request_.hashes) part_options_.add_statistics(v1::STATISTIC_HASHES);
  part_options_.clear_percentiles();
  made_with_ = made_with_of(options);
}

// What a merge state depends on, the same from every client (the CLI's and
// Python's): the histogram's bins and range, colour space, joint
// histogram, which values (stored or not) of which planes, and the parts'
// kind (labels and the ignored one, or a mask) without their images.
// Statistics asked, percentiles, decoders and label limits are left out.
v1::Options made_with_of(const v1::Options& o) {
  v1::Options m;
  m.set_bins(o.bins() ? o.bins() : 256);
  if (o.has_range()) *m.mutable_range() = o.range();
  m.set_colour_space(o.colour_space());
  if (o.has_joint()) *m.mutable_joint() = o.joint();
  if (o.has_planes()) {
    *m.mutable_planes() = o.planes();
    m.mutable_planes()->clear_each();
  }
  m.set_stored_values(o.stored_values());
  if (o.parts().has_labels()) {
    v1::Labels* l = m.mutable_parts()->mutable_labels();
    if (o.parts().labels().has_ignore()) l->set_ignore(o.parts().labels().ignore());
  } else if (o.parts().has_mask()) {
    m.mutable_parts()->mutable_mask()->set_alpha(o.parts().mask().alpha());
  }
  return m;
}

bool Aggregation::add(const v1::AnalyzeResponse& r, std::string* why, uint64_t order) {
  try {
    return add_or_throw(r, order);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

bool Aggregation::add_or_throw(const v1::AnalyzeResponse& r, uint64_t order) {
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
  std::vector<std::string> names;
  const auto& named = r.channels_size() ? r.channels() : r.parts_size() ? r.parts(0).channels() : r.channels();
  for (const v1::ChannelStats& c : named) names.push_back(c.name());
  if (names.size() != channels) fail(ErrorCode::kInvalidArgument, "the answer's channels do not match its channel count");
  if (channels == 0 || channels > kMaxMergedChannels)
    fail(ErrorCode::kInvalidArgument, "an answer of " + std::to_string(channels) + " channels");
  Group& g = groups_[group_of(r.sample_type(), channels, std::move(names), r.channel_count())];
  g.first = std::min(g.first, order);
  auto states = [&](const google::protobuf::RepeatedPtrField<v1::ChannelStats>& cs) { return states_of(cs, type); };
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

size_t Aggregation::group_of(v1::SampleType type, uint32_t channels, std::vector<std::string> names,
                              uint32_t image_channels) {
  const std::pair<int, uint32_t> key{type, channels};
  auto at = index_.find(key);
  if (at == index_.end()) {
    const SampleType t = sample_type_of(type);
    const StatsRequest measured = measured_request(request_, Layout{1, 1, image_channels, t, 0});
    groups_.push_back(Group{type, std::move(names), Merger(t, channels, measured), {}, 0, {}, {}, UINT64_MAX});
    at = index_.emplace(key, groups_.size() - 1).first;
  }
  return at->second;
}


v1::Partial Aggregation::partial() const {
  v1::Partial p;
  p.set_version(kPartialVersion);
  *p.mutable_made_with() = made_with_;
  p.set_images_without_parts(files_without_parts_);
  std::vector<const Group*> ordered;
  for (const Group& g : groups_) ordered.push_back(&g);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Group* a, const Group* b) { return a->first < b->first; });
  for (const Group* at : ordered) {
    const Group& g = *at;
    const SampleType type = sample_type_of(g.type);
    v1::PartialGroup* out = p.add_groups();
    out->set_sample_type(g.type);
    for (const std::string& n : g.names) out->add_channel_names(n);
    out->set_images(g.merger.images());
    if (g.merger.images() > 0) put_state(out->mutable_channels(), g.merger, type, g.names);
    for (const auto& [label, merger] : g.labels) {
      v1::PartialLabel* l = out->add_labels();
      l->set_label(label);
      l->set_images(merger.images());
      put_state(l->mutable_channels(), merger, type, g.names);
    }
    out->set_label_images(g.label_files);
    if (g.joint) {
      *out->mutable_joint() = *g.joint;
      set_joint_counts(out->mutable_joint(), g.joint_counts);
    }
  }
  return p;
}

void Aggregation::merge(const v1::Partial& p) {
  auto refuse = [](const std::string& why) { fail(ErrorCode::kInvalidArgument, "cannot merge the partial: " + why); };
  if (p.version() != kPartialVersion)
    refuse("its version is " + std::to_string(p.version()) + ", and this client reads version " +
           std::to_string(kPartialVersion));
  if (!google::protobuf::util::MessageDifferencer::Equals(made_with_of(p.made_with()), made_with_))
    refuse("it was made with other options (histogram range or bins, colour space, joint histogram, planes, stored "
           "values or parts) than these: give the options it was made with");
  // Its sizes are a file's: what merging it would hold, before anything is.
  uint64_t bytes = 0;
  for (const v1::PartialGroup& g : p.groups()) {
    const SampleType type = sample_type_of(g.sample_type());
    if (!is_float(type) && type_bits(type) > 16) refuse(std::string("a group of ") + to_string(type) + " samples");
    if (g.channel_names_size() == 0 || g.channel_names_size() > static_cast<int>(kMaxMergedChannels))
      refuse("a group of " + std::to_string(g.channel_names_size()) + " channels");
    const uint64_t bins = is_float(type) ? request_.hist.bins : uint64_t{1} << type_bits(type);
    const uint64_t mergers = 1 + static_cast<uint64_t>(g.labels_size());
    bytes += mergers * static_cast<uint64_t>(g.channel_names_size()) * bins * 8;
    if (bytes > kMaxPartialBytes)
      refuse("its groups and labels would take more than " + std::to_string(kMaxPartialBytes >> 30) + " GiB to merge");
  }
  for (const v1::PartialGroup& pg : p.groups()) {
    const SampleType type = sample_type_of(pg.sample_type());
    const uint32_t channels = static_cast<uint32_t>(pg.channel_names_size());
    Group& g = groups_[group_of(pg.sample_type(), channels,
                                std::vector<std::string>(pg.channel_names().begin(), pg.channel_names().end()), channels)];
    if (pg.images() > 0) {
      if (pg.has_joint()) check_joint(g, pg.joint());
      g.merger.add(states_of(pg.channels(), type), pg.images());
      if (pg.has_joint()) add_joint(g, pg.joint());
    } else if (pg.channels_size() > 0) {
      refuse("a group of no images with channels");
    }
    for (const v1::PartialLabel& l : pg.labels()) {
      if (l.images() == 0) refuse("a label of no images");
      g.labels.try_emplace(l.label(), type, channels, g.merger.request()).first->second.add(states_of(l.channels(), type),
                                                                                              l.images());
    }
    g.label_files += pg.label_images();
  }
  files_without_parts_ += p.images_without_parts();
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

}  // namespace imgstat
