#include "imgstat/merge.hpp"

#include "common/moments.hpp"
#include "common/partial.hpp"

namespace imgstat {

struct Merger::State {
  // Integer samples: the count of every value, summed.
  std::vector<std::vector<uint64_t>> counts;
  // Float samples: moments merged pairwise, and the explicit range's bins.
  std::vector<FloatMoments> moments;
  std::vector<Histogram> histograms;
  std::vector<uint64_t> samples;  // per channel, every sample counted (NaN and Inf too): kept under 2^64
};

namespace {

[[noreturn]] void unfit(const std::string& why) { fail(ErrorCode::kInvalidArgument, "cannot merge: " + why); }

void add_checked(uint64_t& into, uint64_t more, const char* what) {
  if (__builtin_add_overflow(into, more, &into)) unfit(std::string(what) + " pass 2^64");
}

std::string decimal(int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  uint128 u = negative ? static_cast<uint128>(-(v + 1)) + 1 : static_cast<uint128>(v);
  std::string digits;
  for (; u; u /= 10) digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
  return negative ? "-" + digits : digits;
}

}  // namespace

Merger::Merger(SampleType type, uint32_t channels, const StatsRequest& request)
    : type_(type), channels_(channels), request_(request), state_(std::make_unique<State>()) {
  request_.merge_state = request_.positions = request_.unique_colors = request_.luminance = false;
  if (is_float(type)) {
    request_.distribution = false;
    if (!request_.hist.explicit_range) request_.histogram = false;
  }
  State& s = *state_;
  s.samples.assign(channels, 0);
  if (is_float(type)) {
    s.moments.resize(channels);
    s.histograms.resize(channels);
    for (Histogram& h : s.histograms)
      if (request_.histogram) h.counts.assign(request_.hist.bins, 0);
  } else {
    s.counts.assign(channels, std::vector<uint64_t>(size_t{1} << type_bits(type), 0));
  }
}

Merger::~Merger() = default;
Merger::Merger(Merger&&) noexcept = default;
Merger& Merger::operator=(Merger&&) noexcept = default;

StatsRequest Merger::part_request(const StatsRequest& request) {
  StatsRequest r;
  r.min_max = r.sum = r.stddev = false;
  r.merge_state = true;
  // Integer histograms are binned from the merged value counts; float ones
  // merge only over a range every image shares.
  r.histogram = request.histogram && request.hist.explicit_range;
  r.hist = request.hist;
  return r;
}

void Merger::add(const std::vector<ChannelStats>& channels, uint64_t images) {
  if (channels.size() != channels_)
    unfit("an image of " + std::to_string(channels.size()) + " channels among images of " + std::to_string(channels_));
  State& s = *state_;
  // Checked before anything is added, so that a refused image leaves no trace.
  uint64_t all_images = images_;
  add_checked(all_images, images, "images");
  for (uint32_t c = 0; c < channels_; ++c) {
    const ChannelStats& in = channels[c];
    if (!in.has_merge_state) unfit("channel " + std::to_string(c) + " has no merge state");
    uint64_t n = s.samples[c];
    if (is_float(type_)) {
      if (!in.value_counts.empty()) unfit("float samples with value counts");
      if (in.moments.n != in.count || in.moments.nan != in.nan_count || in.moments.posinf != in.posinf_count ||
          in.moments.neginf != in.neginf_count)
        unfit("a channel's moments and counts disagree");
      if (request_.histogram) {
        const Histogram& h = in.histogram;
        if (h.counts.size() != request_.hist.bins) unfit("a histogram of " + std::to_string(h.counts.size()) + " bins");
        uint64_t binned = h.underflow;
        add_checked(binned, h.overflow, "counts");
        for (uint64_t k : h.counts) add_checked(binned, k, "counts");
        if (binned != in.count) unfit("a histogram that does not count every finite sample");
      }
      for (uint64_t k : {in.moments.n, in.moments.nan, in.moments.posinf, in.moments.neginf}) add_checked(n, k, "samples");
    } else {
      if (in.value_counts.size() != s.counts[c].size())
        unfit(std::to_string(in.value_counts.size()) + " value counts for " + to_string(type_) + " samples");
      uint64_t counted = 0;
      for (uint64_t k : in.value_counts) add_checked(counted, k, "samples");
      if (counted != in.count) unfit("value counts that do not add up to the channel's count");
      add_checked(n, counted, "samples");
    }
  }
  for (uint32_t c = 0; c < channels_; ++c) {
    const ChannelStats& in = channels[c];
    if (is_float(type_)) {
      merge(s.moments[c], in.moments);
      Histogram& h = s.histograms[c];
      if (request_.histogram) {
        for (size_t i = 0; i < h.counts.size(); ++i) h.counts[i] += in.histogram.counts[i];
        h.underflow += in.histogram.underflow;
        h.overflow += in.histogram.overflow;
      }
      s.samples[c] += in.moments.n + in.moments.nan + in.moments.posinf + in.moments.neginf;
    } else {
      std::vector<uint64_t>& into = s.counts[c];
      for (size_t i = 0; i < into.size(); ++i) into[i] += in.value_counts[i];
      s.samples[c] += in.count;
    }
  }
  images_ += images;  // checked above
}

std::vector<ChannelStats> Merger::state() const {
  const State& s = *state_;
  std::vector<ChannelStats> out(channels_);
  for (uint32_t c = 0; c < channels_; ++c) {
    ChannelStats& x = out[c];
    x.has_merge_state = true;
    if (is_float(type_)) {
      x.moments = s.moments[c];
      x.count = x.moments.n;
      x.nan_count = x.moments.nan;
      x.posinf_count = x.moments.posinf;
      x.neginf_count = x.moments.neginf;
      if (request_.histogram) {
        x.histogram = s.histograms[c];
        x.histogram.lo = request_.hist.lo;
        x.histogram.hi = request_.hist.hi;
      }
    } else {
      x.value_counts = s.counts[c];
      for (uint64_t k : x.value_counts) x.count += k;
    }
  }
  return out;
}

Result Merger::result() const {
  const State& s = *state_;
  Partial p = empty_partial(type_, channels_, request_);
  for (uint32_t c = 0; c < channels_; ++c) {
    if (is_float(type_)) {
      p.channels[c].floats = s.moments[c];
      if (request_.histogram) p.channels[c].histogram = s.histograms[c];
    } else {
      p.channels[c] = partial_of_values(s.counts[c].data(), type_, request_, static_cast<uint32_t>(c));
    }
  }
  return result_of(p, request_, "merge");
}

std::string Merger::exact_sum(size_t channel) const {
  if (is_float(type_) || channel >= channels_) return "";
  const std::vector<uint64_t>& counts = state_->counts[channel];
  return decimal(moments_of_values(counts.data(), counts.size(), type_lo(type_)).sum);
}

std::string Merger::exact_summary_sum() const {
  if (is_float(type_)) return "";
  int128 sum = 0;
  for (const std::vector<uint64_t>& counts : state_->counts)
    sum += moments_of_values(counts.data(), counts.size(), type_lo(type_)).sum;
  return decimal(sum);
}

}  // namespace imgstat
