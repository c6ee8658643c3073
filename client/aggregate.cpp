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
  const SampleType type = sample_type_of(r.sample_type());
  const std::pair<int, uint32_t> key{r.sample_type(), static_cast<uint32_t>(r.channels_size())};
  auto at = index_.find(key);
  if (at == index_.end()) {
    std::vector<std::string> names;
    for (const v1::ChannelStats& c : r.channels()) names.push_back(c.name());
    groups_.push_back(Group{r.sample_type(), std::move(names),
                            Merger(type, static_cast<uint32_t>(r.channels_size()), request_)});
    at = index_.emplace(key, groups_.size() - 1).first;
  }
  std::vector<ChannelStats> parts;
  for (const v1::ChannelStats& c : r.channels()) parts.push_back(merge_part_of(c, type));
  groups_[at->second].merger.add(parts);
  return true;
}

std::vector<Outcome> Aggregation::outcomes() const {
  std::vector<Outcome> out;
  for (const Group& g : groups_) {
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
      fill_channel(ch, merged.channels[c], request, type, 0);
      o.exact_sums.push_back(request.sum ? g.merger.exact_sum(c) : "");
    }
    if (merged.has_summary) {
      StatsRequest all = request;
      all.histogram = false;
      r.mutable_summary()->set_name("all");
      fill_channel(r.mutable_summary(), merged.summary, all, type, 0);
      o.exact_sums.push_back(request.sum ? g.merger.exact_summary_sum() : "");
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<std::string> Aggregation::notes() const {
  std::vector<std::string> notes;
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
