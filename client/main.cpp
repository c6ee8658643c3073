// imgstat-client: statistics of image files, from an imgstat server or
// in-process (--local). The command line is options.cpp's; here the
// connection, the server's health and info, and the pass over the files
// (pass.hpp), each answer shown as it comes in (a table, JSON, CSV or a plot).
#include <google/protobuf/util/json_util.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>
#include <unistd.h>
#include <unordered_set>
#include <vector>

#include "aggregate.hpp"
#include "duplicates.hpp"
#include "report.hpp"
#include "quality_summary.hpp"
#include "calls.hpp"
#include "core/abseil_tuning.hpp"
#include "core/address.hpp"
#include "core/malloc_tuning.hpp"
#include "decode/library_messages.hpp"
#include "on_server.hpp"
#include "options.hpp"
#include "pass.hpp"
#include "background_map.hpp"
#include "plot.hpp"
#include "render.hpp"
#include "shards.hpp"

namespace {

using namespace imgstat;
using client::CliOptions;

// --resume: the first SIGINT or SIGTERM ends the pass where it is, its state
// saved (a second one ends the program at once).
std::atomic<bool> g_stop{false};
void stop_pass(int) { g_stop = true; }

// The token to send: --token-file's first line, else $IMGSTAT_TOKEN. False
// when the file cannot be read.
bool load_token(const CliOptions& o, client::Connection& c) {
  if (!o.token_file.empty()) {
    std::ifstream in(o.token_file);
    if (!in || !std::getline(in, c.token)) return false;
  } else if (const char* t = std::getenv("IMGSTAT_TOKEN")) {
    c.token = t;
  }
  while (!c.token.empty() && std::isspace(static_cast<unsigned char>(c.token.back()))) c.token.pop_back();
  return true;
}

// --health and --info: the exit status.
int ask_server(client::Remote& remote, const CliOptions& o, std::ostream& err) {
  if (o.health) {
    std::string status;
    const bool ok = remote.health(&status);
    std::cout << (ok ? status : "unreachable: " + status) << "\n";
    return ok && status == "SERVING" ? 0 : 1;
  }
  v1::ServerInfo i;
  std::string error;
  if (!remote.info(&i, &error)) {
    err << "imgstat-client: " << o.server << ": " << error << "\n";
    return 1;
  }
  if (o.json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions p;
    p.preserve_proto_field_names = true;
    p.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(i, &text, p);
    std::cout << text << "\n";
  } else {
    std::cout << i.DebugString();
  }
  return 0;
}

// One pass over the inputs: each analyzed (or merged, with --aggregate) and
// shown as it comes in, with a progress bar on a terminal.
class Run {
 public:
  // asked: the options given (request's are what each file's analysis is asked instead, with --aggregate).
  Run(const CliOptions& o, client::Request request, v1::Options asked, const client::LabelFolder& labels,
      std::optional<Aggregation> aggregation, std::ostream& err)
      : o_(o), request_(std::move(request)), asked_(std::move(asked)), labels_(labels),
        aggregation_(std::move(aggregation)), err_(err), duplicates_(o.duplicates_distance) {}

  int run(client::Remote& remote) {
    if (o_.merge) return merge_partials();
    client::InputOptions input_options;
    input_options.dicom_series = o_.dicom_series;
    input_options.every_file = o_.bytes;
    input_options.extensions = o_.extensions;
    if (!labels_.extension.empty()) input_options.beside = {labels_.extension};  // maps, not inputs
    // A prefix that a server may fetch is listed there, with its credentials.
    if (!o_.local) input_options.list_on_server = [&remote](const std::string& prefix) { return remote.list_on_server(prefix); };
    // --resume: an earlier pass's state first, so that the shards it did
    // whole are not listed again.
    if (!o_.resume.empty() && !load_resume()) return 1;
    if (!done_shards_.empty())
      input_options.skip_shard = [this](const std::string& shard) { return done_shards_.count(shard) > 0; };
    std::vector<std::string> notes;
    inputs_ = client::expand_inputs(o_.files, &missing_, input_options, &dicom_files_, &notes);
    for (const std::string& n : notes) err_ << "imgstat-client: note: " << n << "\n";
    if (!dicom_files_.empty()) dicom_list_ = client::dicom_list_name(dicom_files_);
    for (const std::string& m : missing_) {
      // A reason given (a folder without images, a damaged archive) is said as it is.
      err_ << "imgstat-client: " << m << (m.back() == ')' ? "\n" : ": nothing matches\n");
      ++failures_;
    }
    if (!o_.resume.empty() && !resume()) return 1;
    std::unique_ptr<client::Local> in_process;
    if (o_.local) {
      try {
        in_process = std::make_unique<client::Local>(o_.local_engine == "cuda"   ? EngineKind::kCuda
                                                     : o_.local_engine == "auto" ? EngineKind::kAuto
                                                                                 : EngineKind::kCpu);
      } catch (const std::exception& e) {
        err_ << "imgstat-client: " << e.what() << "\n";
        return 1;
      }
    }
    color_ = !o_.json && !o_.csv && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
    // A progress bar on a terminal, for many files or a large upload; none
    // when stderr is piped. Streamed uploads count their bytes as they go.
    sizes_ = client::plain_file_sizes(inputs_);
    for (uint64_t n : sizes_)
      if (n != client::kNotPlainFile) total_bytes_ += n;
    progress_ = isatty(STDERR_FILENO) && (inputs_.size() > 1 || total_bytes_ >= (uint64_t{64} << 20));
    if (o_.csv) std::cout << client::render_csv_header();
    if (progress_)
      request_.on_sent = [this](uint64_t n) {
        if (sent_.fetch_add(n) == 0)
          if (client::Pass* p = running_.load()) p->poke();  // the bar shows the upload at once, not 200 ms later
      };
    if (merges_on_server() && on_server(remote)) {
      bar(0, true);
      return finish(inputs_.size() + missing_.size(), "files");
    }
    if (const int stopped = per_file(remote, in_process.get(), 0, inputs_.size())) return stopped;
    if (!o_.resume.empty()) save_resume();
    return finish(inputs_.size() + missing_.size() + resumed_, "files");
  }

 private:
  // Inputs [first, first + count) a call a file (or analyzed here, with
  // local), each answer merged or shown in input order. 130 where a signal
  // stopped a --resume pass (its state saved), else 0.
  int per_file(client::Remote& remote, client::Local* local, size_t first, size_t count) {
    std::vector<std::string> some;
    if (first > 0 || count < inputs_.size()) some.assign(inputs_.begin() + first, inputs_.begin() + first + count);
    // Each file's request: the label image of its own, with a label folder.
    auto make_request = [this, first](size_t k) {
      const size_t i = first + k;
      client::Request mine = request_;
      if (labels_.used) mine.map_file = labels_.file_for(inputs_[i]);
      // The DICOM files named together: one input.
      if (!dicom_files_.empty() && inputs_[i] == dicom_list_) mine.dicom_files = dicom_files_;
      return mine;
    };
    pass_.emplace(local ? nullptr : &remote, local, some.empty() ? inputs_ : some, make_request, pass_options(remote));
    running_ = &*pass_;
    for (size_t i = first; i < first + count; ++i) {
      client::Outcome o =
          pass_->next(progress_ ? std::function<void(size_t)>([&](size_t done) { bar(first + done, false); })
                                : std::function<void(size_t)>());
      bar(0, true);
      if (aggregation_) {
        bool transient = false;
        const bool merged = merge(std::move(o), &transient);
        if (!o_.resume.empty()) mark_done(inputs_[i], merged, transient);
        if (!o_.resume.empty() && std::chrono::steady_clock::now() >= next_save_) save_resume();
        if (g_stop) {
          bar(0, true);
          save_resume();
          err_ << "imgstat-client: stopped after " << done_count_ << " inputs; their state is in " << o_.resume
               << ": the same command goes on where this one stopped\n";
          return 130;
        }
      } else
        show(std::move(o), i, inputs_.size());
      bar(i + 1, i + 1 == inputs_.size());
    }
    running_ = nullptr;
    pass_.reset();
    return 0;
  }

  // The merged answers (and --partial-out's file), then the count line.
  int finish(size_t all, const char* what) {
    if (aggregation_) {
      for (const std::string& note : client::notes_of(*aggregation_)) err_ << "imgstat-client: note: " << note << "\n";
      const std::vector<client::Outcome> merged = client::outcomes_of(*aggregation_);
      for (size_t i = 0; i < merged.size(); ++i) show(merged[i], i, merged.size());
      if (!quality_.empty() && o_.json)
        std::cout << quality_.json() << "\n";
      else if (!quality_.empty() && !o_.csv)
        std::cout << quality_.table();
      if (o_.duplicates && o_.json)
        std::cout << duplicates_.json() << "\n";
      else if (o_.duplicates && !o_.csv)
        std::cout << duplicates_.table();
      if (!o_.report.empty()) {
        std::string why;
        if (!report_.write(o_.report, merged, quality_, o_.duplicates ? &duplicates_ : nullptr, &why)) {
          err_ << "imgstat-client: --report: " << why << "\n";
          ++failures_;
        }
      }
      std::cout.flush();
      std::string why;
      if (!o_.partial_out.empty() && !client::write_partial(o_.partial_out, aggregation_->partial(), &why)) {
        err_ << "imgstat-client: --partial-out " << why << "\n";
        ++failures_;
      }
    }
    if (!o_.json && !o_.csv && (aggregation_ || all > 1))
      std::printf("%zu %s: %zu %s, %d failed%s, %.2f s\n", all, what, all - std::min<size_t>(all, failures_),
                  aggregation_ ? "merged" : "analyzed", failures_,
                  resumed_ ? (", " + std::to_string(resumed_) + " done before (--resume)").c_str() : "", seconds());
    return failures_ == 0 ? 0 : 1;
  }

  // --merge: the partials named, merged; answered with the options they
  // were made with and the statistics asked for here.
  int merge_partials() {
    for (const std::string& f : o_.files) {
      v1::Partial p;
      std::string why;
      if (!client::read_partial(f, &p, &why)) {
        err_ << "imgstat-client: " << f << ": " << why << "\n";
        ++failures_;
        continue;
      }
      try {
        if (!aggregation_) aggregation_.emplace(reporting(p.made_with()));
        aggregation_->merge(p);
      } catch (const std::exception& e) {
        err_ << "imgstat-client: " << f << ": INVALID_ARGUMENT: " << e.what() << "\n";
        ++failures_;
      }
    }
    return finish(o_.files.size(), "partials");
  }

  // The options a partial was made with, reporting what this command asks.
  v1::Options reporting(const v1::Options& made_with) const {
    v1::Options o = made_with;
    o.clear_statistics();
    o.clear_percentiles();
    for (int s : request_.options.statistics()) o.add_statistics(static_cast<v1::Statistic>(s));
    for (double p : request_.options.percentiles()) o.add_percentiles(p);
    return o;
  }

  // --resume FILE: an earlier pass's state merged in (before the inputs are
  // listed: the shards it did whole are left out unlisted). False (said)
  // where the file is not such a state.
  bool load_resume() {
    std::error_code ec;
    if (!std::filesystem::exists(o_.resume, ec)) return true;  // a first run
    v1::Partial p;
    std::string why;
    try {
      if (!client::read_partial(o_.resume, &p, &why)) throw std::runtime_error(why);
      aggregation_->merge(p);
    } catch (const std::exception& e) {
      err_ << "imgstat-client: --resume " << o_.resume << ": " << e.what() << "\n";
      return false;
    }
    loaded_done_.assign(p.done().begin(), p.done().end());
    for (const v1::DoneShard& d : p.done_shards()) {
      if (done_shards_.emplace(d.name(), d.inputs()).second) {
        resumed_ += d.inputs();
        done_count_ += d.inputs();
      }
    }
    return true;
  }

  // The inputs the earlier pass did left out of this one; its state written
  // at once (a stop from now on is a clean one).
  bool resume() {
    next_save_ = std::chrono::steady_clock::now() + kResumeSaveEvery;
    struct sigaction on_stop {};
    on_stop.sa_handler = stop_pass;
    on_stop.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &on_stop, nullptr);
    sigaction(SIGTERM, &on_stop, nullptr);
    const std::unordered_set<std::string> done(loaded_done_.begin(), loaded_done_.end());
    for (const std::string& name : loaded_done_) mark_done(name);  // the shards now listed know their members
    loaded_done_.clear();
    std::vector<std::string> left;
    for (std::string& name : inputs_)
      if (!done.count(name)) left.push_back(std::move(name));
    resumed_ += inputs_.size() - left.size();
    inputs_ = std::move(left);
    save_resume();
    return true;
  }

  // An input answered: merged, its name kept; or, once every input of its
  // shard is merged or failed for good (damaged, not found: another try
  // would fail again), the shard's name alone (a pass over 10,000 shards
  // keeps 10,000 names, not every member's). An input that failed is
  // otherwise tried again by the pass that goes on.
  void mark_done(const std::string& name, bool merged = true, bool transient = false) {
    if (!merged && transient) return;
    uint64_t inputs = 0;
    const std::string shard = client::shard_of(name, &inputs);
    if (shard.empty()) {
      if (merged) {
        ++done_count_;
        done_.push_back(name);
      }
      return;
    }
    ShardProgress& s = in_shards_[shard];
    if (merged) {
      ++done_count_;
      s.merged.push_back(name);
    } else {
      ++s.failed;
    }
    if (s.merged.size() + s.failed < inputs) return;
    done_shards_[shard] = s.merged.size();
    in_shards_.erase(shard);
  }

  void save_resume() {
    v1::Partial p = aggregation_->partial();
    for (const std::string& name : done_) p.add_done(name);
    for (const auto& [shard, progress] : in_shards_)
      for (const std::string& name : progress.merged) p.add_done(name);
    for (const auto& [shard, inputs] : done_shards_) {
      v1::DoneShard* d = p.add_done_shards();
      d->set_name(shard);
      d->set_inputs(inputs);
    }
    std::string why;
    if (!client::write_partial(o_.resume, p, &why)) err_ << "imgstat-client: --resume " << why << "\n";
    next_save_ = std::chrono::steady_clock::now() + kResumeSaveEvery;
  }

  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(); }

  client::PassOptions pass_options(client::Remote& remote) {
    client::PassOptions p;
    // -j: calls in flight; by default as many as keep the server busy (four
    // for each of its engine threads), or one analysis per core with
    // --local. (One file: no question to the server, whose answer would not be used.)
    p.jobs = o_.jobs                ? o_.jobs
             : inputs_.size() <= 1 ? 1u
             : o_.local            ? std::max(1u, std::thread::hardware_concurrency())
                                   : remote.calls_to_fill();
    // JSON and CSV are made where each answer comes in; the loop prints.
    if ((o_.json || o_.csv) && o_.plot.empty() && !aggregation_)
      p.prepare = [this](client::Outcome& out) {
        std::string rendered;
        for (client::Outcome& one : client::each_series(out)) {
          if (o_.normalized) client::normalize(one);
          one.parts = parts_asked();
          rendered += o_.json ? client::render_json(one) + "\n" : client::render_csv(one);
        }
        out.response.clear_other_series();
        out.rendered = std::move(rendered);
      };
    // Readers start calls and carry large uploads: eight uploads at once at most.
    p.readers = std::min(p.jobs, 8u);
    return p;
  }

  // --aggregate where nothing here needs each file's answer: the servers
  // merge the files themselves (client/on_server.hpp).
  bool merges_on_server() const {
    if (!aggregation_ || o_.local || o_.per_file || o_.no_batch || !o_.resume.empty() || o_.duplicates ||
        !o_.report.empty() || labels_.used || !request_.map_file.empty() || request_.force_stream ||
        asked_.has_parts() || o_.dicom_series || !dicom_files_.empty() || inputs_.size() < 2)
      return false;
    for (int s : asked_.statistics())
      if (s == v1::STATISTIC_QUALITY || s == v1::STATISTIC_HASHES) return false;
    return true;
  }

  // False, nothing merged, where no run of the inputs may go on the
  // servers' Aggregate calls; else the whole pass, in runs: those on the
  // calls, the rest a call a file, merged in input order.
  bool on_server(client::Remote& remote) {
    const std::vector<client::OnServerRun> runs = client::on_server_runs(sizes_, remote.aggregate_file_limit());
    if (std::none_of(runs.begin(), runs.end(), [](const client::OnServerRun& r) { return r.on_server; })) return false;
    client::OnServerOptions tuning;
    tuning.jobs = o_.jobs ? o_.jobs : remote.calls_to_fill();
    bool refused = false;  // by the server on a run's first slice: the rest a call a file too
    for (const client::OnServerRun& run : runs) {
      if (!run.on_server || refused) {
        per_file(remote, nullptr, run.first, run.count);
        continue;
      }
      auto merge = [&](client::OnServerSlice& slice) {
        const size_t first = run.first + slice.first;
        if (slice.refused) {  // by one server of several: these files a call a file
          per_file(remote, nullptr, first, slice.count);
          return;
        }
        try {
          aggregation_->merge(slice.partial);
        } catch (const std::exception& e) {  // counts that do not add up: none of the slice's files is merged
          std::unordered_set<std::string> failed;
          for (const client::Outcome& o : slice.failed) failed.insert(o.file);
          for (size_t i = first; i < first + slice.count; ++i)
            if (!failed.count(inputs_[i])) {
              client::Outcome o;
              o.file = inputs_[i];
              o.code = "INTERNAL";
              o.error = std::string("its server's partial cannot be merged: ") + e.what();
              slice.failed.push_back(std::move(o));
            }
        }
        for (const client::Outcome& o : slice.failed) fail(o);
      };
      refused = !client::aggregate_on_server(remote, std::span(inputs_).subspan(run.first, run.count),
                                             std::span(sizes_).subspan(run.first, run.count), request_.input, asked_, tuning, merge,
                                             [&](size_t done) { bar(run.first + done, false); });
      if (refused) per_file(remote, nullptr, run.first, run.count);
    }
    return true;
  }

  bool parts_asked() const { return request_.options.has_parts() && !request_.options.parts().has_mask(); }

  void fail(const client::Outcome& o) {
    ++failures_;
    err_ << "imgstat-client: " << o.file << ": " << o.code << ": " << o.error << "\n";
  }

  // True when every series of the input joined its kind's merge.
  // *transient: a failure that another try may not repeat (the server
  // unreachable, busy, out of time).
  bool merge(client::Outcome whole, bool* transient = nullptr) {
    bool all = true;
    for (client::Outcome& o : client::each_series(std::move(whole))) {  // each series joins its kind
      std::string why;
      if (o.ok && !aggregation_->add(o.response, &why)) {
        o.ok = false;
        o.code = "INTERNAL";
        o.error = "its answer cannot be merged: " + why;
      }
      if (o.ok) quality_.add(o.file, o.response);
      if (o.ok && o_.duplicates) duplicates_.add(o.file, o.response);
      if (o.ok && !o_.report.empty()) report_.add(o.file, o.response);
      if (!o.ok) fail(o);
      if (!o.ok && transient)
        for (const char* c : {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "CANCELLED", "ABORTED", "INTERNAL", "UNKNOWN"})
          *transient |= o.code == c;
      all &= o.ok;
    }
    return all;
  }

  void bar(size_t done, bool clear) {
    if (!progress_) return;
    const int width = 30, filled = static_cast<int>(width * done / inputs_.size());
    // To the terminal itself: C's stderr is the library-message catcher's.
    char line[256];
    int n = std::snprintf(line, sizeof line, "\r\033[K");
    if (!clear) {
      n += std::snprintf(line + n, sizeof line - n, "[%s%s] %zu/%zu files, %d failed, %.1f files/s",
                         std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done,
                         inputs_.size(), failures_, done / std::max(seconds(), 1e-9));
      if (const uint64_t up = sent_.load())
        n += std::snprintf(line + n, sizeof line - n, ", uploaded %.0f of %.0f MiB", up / 1048576.0,
                           total_bytes_ / 1048576.0);
    }
    err_ << std::string(line, std::min<size_t>(n, sizeof line - 1)) << std::flush;
  }

  // A part's histograms drawn as an image's, into --plot's file (NAME-i.png of several).
  void draw(client::Outcome& o, size_t i, size_t count) {
    std::string to = o_.plot, why;
    if (count > 1) {
      const size_t dot = o_.plot.rfind('.');
      to = o_.plot.substr(0, dot) + "-" + std::to_string(i + 1) + (dot == std::string::npos ? ".png" : o_.plot.substr(dot));
    }
    client::Outcome drawn = o;
    if (o.response.parts_size() > 0) {
      const int k = std::max(o_.plot_part, 0);
      if (k < o.response.parts_size()) {
        *drawn.response.mutable_channels() = o.response.parts(k).channels();
        drawn.file = o.file + " " + client::part_name(o.response.parts(k));
      }
    }
    if (!client::write_plot(drawn, to, &why)) {
      o.ok = false;
      o.code = "INVALID_ARGUMENT";
      o.error = "--plot: " + why;
    }
  }

  // --background-map and --background-mesh's files (NAME-i.ext of several).
  void write_maps(client::Outcome& o, size_t i, size_t count) {
    for (const bool at_image_size : {true, false}) {
      const std::string& path = at_image_size ? o_.background_map : o_.background_mesh;
      if (path.empty() || !o.ok) continue;
      std::string to = path, why;
      if (count > 1) {
        const size_t dot = path.rfind('.');
        to = path.substr(0, dot) + "-" + std::to_string(i + 1) + (dot == std::string::npos ? "" : path.substr(dot));
      }
      if (!client::write_background_map(o.response, to, at_image_size, &why)) {
        o.ok = false;
        o.code = "INVALID_ARGUMENT";
        o.error = (at_image_size ? "--background-map: " : "--background-mesh: ") + why;
      }
    }
  }

  // One answer as asked: a plot, JSON, CSV or the table; `count` answers in
  // all. A file's series are shown one after another.
  void show(client::Outcome whole, size_t i, size_t count) {
    if (!whole.rendered.empty()) return show_one(std::move(whole), i, count);  // its series rendered already
    std::vector<client::Outcome> each = client::each_series(std::move(whole));
    for (client::Outcome& o : each) show_one(std::move(o), i, count + each.size() - 1);
  }

  void show_one(client::Outcome o, size_t i, size_t count) {
    if (!o_.plot.empty() && o.ok) draw(o, i, count);
    write_maps(o, i, count);
    if (o_.normalized && !o.normalized) client::normalize(o);
    o.parts = parts_asked();
    if (!o.ok) fail(o);
    if (!o.rendered.empty())
      std::cout << o.rendered;
    else if (o_.json)
      std::cout << client::render_json(o) << "\n";
    else if (o_.csv)
      std::cout << client::render_csv(o);
    else if (o.ok)
      std::cout << client::render_table(o, color_) << (count > 1 ? "\n" : "");
    // Written out when nothing else is ready to print: a reader of the
    // output sees each answer at once, and a fast pass costs no write per file.
    if (!pass_ || !pass_->next_ready()) std::cout.flush();
  }

  const CliOptions& o_;
  client::Request request_;
  const v1::Options asked_;
  std::vector<std::string> dicom_files_;  // --dicom-series: the DICOM files named, one input
  std::string dicom_list_;                // and its name
  const client::LabelFolder& labels_;
  std::optional<Aggregation> aggregation_;
  client::QualitySummary quality_;  // --aggregate --stats quality: the dataset's verdicts
  std::ostream& err_;
  client::DuplicateFinder duplicates_;  // --aggregate --duplicates
  client::Report report_;               // --aggregate --report
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::vector<std::string> inputs_, missing_;
  // --resume: the inputs merged (before and now), how many of them an
  // earlier pass did, and when the state is next written.
  static constexpr std::chrono::seconds kResumeSaveEvery{2};
  std::vector<std::string> done_;  // inputs that are no shard's members
  struct ShardProgress {
    std::vector<std::string> merged;
    uint64_t failed = 0;  // for good
  };
  std::map<std::string, ShardProgress> in_shards_;  // shards not yet done whole
  std::map<std::string, uint64_t> done_shards_;                // shards done whole, and their inputs
  std::vector<std::string> loaded_done_;                       // the earlier pass's done, until the inputs are listed
  size_t done_count_ = 0;
  size_t resumed_ = 0;
  std::chrono::steady_clock::time_point next_save_;
  int failures_ = 0;
  bool color_ = false, progress_ = false;
  std::vector<uint64_t> sizes_;  // each input's where a plain file (client::plain_file_sizes)
  uint64_t total_bytes_ = 0;
  std::atomic<uint64_t> sent_{0};
  std::optional<client::Pass> pass_;
  std::atomic<client::Pass*> running_{nullptr};  // set once the pass is whole
};

}  // namespace

int main(int argc, char** argv) {
  imgstat::tune_malloc_for_large_messages();
  imgstat::tune_abseil_for_release();
  CliOptions o;
  if (const int status = client::parse_options(argc, argv, o); status >= 0) return status;

  // From here on libpng's and OpenCV's own prints are caught: each file's
  // become part of its error or warnings, the rest are said once, cleanly.
  std::ostream& err = program_stderr();
  catch_library_messages([&err](const std::string& line) { err << "imgstat-client: library: " << line << "\n"; });
  o.connection.target = o.server;
  o.connection.shm = !o.no_shm;
  o.connection.batch = !o.no_batch;
  if (!load_token(o, o.connection)) {
    err << "imgstat-client: --token-file " << o.token_file << ": cannot be read\n";
    return 2;
  }
  if (!o.local && !o.connection.uses_tls() && !is_loopback(o.server))
    err << "imgstat-client: warning: plaintext to " << o.server
        << " (--insecure): images, results and the token cross the network unencrypted\n";
  std::unique_ptr<client::Remote> remote;
  try {
    remote = std::make_unique<client::Remote>(o.connection, o.timeout);
  } catch (const std::exception& e) {
    err << "imgstat-client: " << e.what() << "\n";
    return 2;
  }
  if (o.health || o.info) return ask_server(*remote, o, err);
  if (o.files.empty()) {
    err << o.help;
    return 2;
  }
  client::Request request;
  client::LabelFolder labels;
  if (const std::string why = client::build_request(o, request, labels); !why.empty()) {
    err << "imgstat-client: " << why << "\n";
    return 2;
  }
  std::optional<Aggregation> aggregation;
  const v1::Options asked = request.options;
  if (o.aggregate) {
    try {
      aggregation.emplace(request.options);
    } catch (const std::exception& e) {
      err << "imgstat-client: " << e.what() << "\n";
      return 2;
    }
    request.options = aggregation->part_options();
  }
  return Run(o, std::move(request), asked, labels, std::move(aggregation), err).run(*remote);
}
