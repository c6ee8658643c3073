#include "aggregate.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/response.hpp"
#include "core/status_name.hpp"
#include "core/validate.hpp"

namespace imgstat::client {

namespace {
void group_outcomes(const Aggregation::Group& g, std::vector<Outcome>& out);
}  // namespace

std::vector<Outcome> outcomes_of(const Aggregation& aggregation) {
  std::vector<Outcome> out;
  for (const Aggregation::Group& g : aggregation.groups()) {
    // A kind whose statistics cannot be merged (float samples' robust
    // statistics) fails alone, named; the other kinds answer.
    try {
      group_outcomes(g, out);
    } catch (const Error& e) {
      Outcome o;
      o.ok = false;
      o.code = status_code_name(static_cast<int>(e.code()));
      o.error = e.what();
      o.file = "all " + std::string(to_string(sample_type_of(g.type))) + " images of " +
               std::to_string(g.names.size()) + " channel" + (g.names.size() == 1 ? "" : "s");
      out.push_back(std::move(o));
    }
  }
  return out;
}

std::vector<std::string> notes_of(const Aggregation& aggregation) {
  const uint64_t files_without_parts_ = aggregation.files_without_parts();
  const StatsRequest& request_ = aggregation.request();
  std::vector<std::string> notes;
  if (files_without_parts_)
    notes.push_back(std::to_string(files_without_parts_) + " file" + (files_without_parts_ == 1 ? " has" : "s have") +
                    " no label but the ignored one: nothing of " + (files_without_parts_ == 1 ? "it" : "them") +
                    " is merged");
  bool floats = false;
  for (const Aggregation::Group& g : aggregation.groups()) floats |= is_float(sample_type_of(g.type)) && g.merger.images() > 0;
  if (!floats) return notes;
  if (request_.histogram && !request_.hist.explicit_range)
    notes.push_back("float images: a histogram of many images needs one range for all of them: give --range LO:HI");
  if (request_.distribution)
    notes.push_back("float images: the median, percentiles, mode and entropy of many images are not merged "
                    "(each image bins its own [min, max])");
  return notes;
}

bool write_partial(const std::string& path, const v1::Partial& partial, std::string* why) {
  std::string bytes;
  if (!partial.SerializeToString(&bytes)) {
    *why = "the partial cannot be serialized (over 2 GiB)";
    return false;
  }
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = temporary + ": " + std::strerror(errno);
    return false;
  }
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  const bool written = at == bytes.size() && ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    *why = temporary + ": " + std::strerror(written ? errno : error);
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

bool read_partial(const std::string& path, v1::Partial* partial, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = std::string("cannot be read: ") + std::strerror(errno);
    return false;
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!partial->ParseFromString(bytes.str())) {
    *why = "not a partial (imgstat.v1.Partial, as --partial-out writes it)";
    return false;
  }
  return true;
}

namespace {

void group_outcomes(const Aggregation::Group& g, std::vector<Outcome>& out) {
  {
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
    if (g.merger.images() == 0) return;
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
}

}  // namespace

}  // namespace imgstat::client
