// imgstat-client: statistics of image files, from an imgstat server or
// in-process (--local).
#include <CLI/CLI.hpp>
#include <google/protobuf/util/json_util.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>
#include <regex>
#include <cstring>
#include <unistd.h>

#include "core/abseil_tuning.hpp"
#include "core/malloc_tuning.hpp"
#include "aggregate.hpp"
#include "calls.hpp"
#include "pass.hpp"
#include "plot.hpp"
#include "imgstat/colour.hpp"
#include "imgstat/types.hpp"
#include "render.hpp"
#include "core/address.hpp"
#include "core/validate.hpp"
#include "decode/library_messages.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

namespace {

using namespace imgstat;

// "WxHxC:TYPE", e.g. 512x512x3:uint8.
bool parse_raw(const std::string& spec, v1::RawLayout* raw, std::string* error) {
  static const std::regex re(R"((\d+)x(\d+)x(\d+):(\w+))");
  std::smatch m;
  SampleType t;
  if (!std::regex_match(spec, m, re)) {
    *error = "--raw wants WxHxC:TYPE, e.g. 512x512x3:uint8; got \"" + spec + "\"";
    return false;
  }
  if (!parse_sample_type(m[4].str().c_str(), &t)) {
    *error = "--raw: unknown sample type \"" + m[4].str() + "\" (uint8, uint16, int8, int16, float32, float64)";
    return false;
  }
  raw->set_width(static_cast<uint32_t>(std::stoul(m[1].str())));
  raw->set_height(static_cast<uint32_t>(std::stoul(m[2].str())));
  raw->set_channels(static_cast<uint32_t>(std::stoul(m[3].str())));
  raw->set_sample_type(proto_sample_type(t));
  return true;
}

}  // namespace

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next - at));
    if (next == std::string::npos) return out;
    at = next + 1;
  }
}

// --joint CHANNELS:BINS and --joint-range LO:HI,...: channel names are the
// colour space's (H, S, V, ...) or the image's (R, G, B, A, Gray), else
// indices as reported.
bool parse_joint(const std::string& spec, const std::string& ranges, const std::string& space,
                 v1::JointHistogramOptions* out, std::string* why) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) {
    *why = "--joint wants CHANNELS:BINS, e.g. 0,1,2:32 or H,S:30,32; got \"" + spec + "\"";
    return false;
  }
  std::vector<std::string> names = {"R", "G", "B", "A"};
  imgstat::ColourSpace cs = imgstat::ColourSpace::kNone;
  if (!space.empty() && imgstat::parse_colour_space(space, &cs)) names = imgstat::colour_channel_names(cs, true);
  try {
    for (const std::string& c : split(spec.substr(0, colon), ',')) {
      const auto named = std::find(names.begin(), names.end(), c);
      if (named != names.end())
        out->add_channels(static_cast<uint32_t>(named - names.begin()));
      else if (c == "Gray" && space.empty())
        out->add_channels(0);
      else
        out->add_channels(static_cast<uint32_t>(std::stoul(c)));
    }
    for (const std::string& b : split(spec.substr(colon + 1), ',')) out->add_bins(static_cast<uint32_t>(std::stoul(b)));
    if (!ranges.empty())
      for (const std::string& r : split(ranges, ',')) {
        const size_t c = r.find(':');
        if (c == std::string::npos) throw std::invalid_argument("no colon");
        v1::HistogramRange* range = out->add_ranges();
        range->set_lo(std::stod(r.substr(0, c)));
        range->set_hi(std::stod(r.substr(c + 1)));
      }
  } catch (const std::exception&) {
    *why = "--joint wants CHANNELS:BINS (names of the channels or indices, bins per channel) and --joint-range "
           "LO:HI per channel; got \"" + spec + "\"" + (ranges.empty() ? "" : " and \"" + ranges + "\"");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  imgstat::tune_malloc_for_large_messages();
  imgstat::tune_abseil_for_release();
  CLI::App app{"imgstat-client " IMGSTAT_VERSION ": per-channel statistics and histograms of images"};
  app.set_version_flag("--version", IMGSTAT_VERSION);
  std::vector<std::string> files;
  const char* env_server = std::getenv("IMGSTAT_SERVER");
  std::string server = env_server && *env_server ? env_server : "localhost:50051";
  bool json = false, bytes = false, stream = false, local = false, health = false, info = false, allow_truncated = false;
  std::string raw_spec, range_spec;
  uint64_t stride = 0;
  uint32_t bins = 256;
  std::vector<std::string> stats;
  // A hung server must not hang the caller; a 2 GiB upload at 1 Gb/s fits.
  double timeout = 120;
  app.add_option("files", files,
                 "image files, folders (their images, recursively) and quoted patterns ('shots/**/*.png'); - reads standard input");
  unsigned jobs = 0;
  auto* jobs_option = app.add_option("--jobs,-j", jobs,
                                     "calls in flight (default: four for each of the server's engine threads, "
                                     "within its limit; with --local, one analysis per core)")
                          ->check(CLI::Range(1u, 256u));
  app.add_option("--server", server, "server address (default: $IMGSTAT_SERVER, else localhost:50051)");
  client::Connection connection;
  std::string token_file;
  auto* tls = app.add_option_group("Security", "TLS is used unless the server is on loopback or --insecure is given");
  tls->add_option("--tls-ca", connection.tls_ca, "PEM CA certificates that signed the server's (default: gRPC's roots)");
  tls->add_option("--tls-cert", connection.tls_cert, "PEM certificate for mutual TLS (with --tls-key)");
  tls->add_option("--tls-key", connection.tls_key, "private key of --tls-cert");
  tls->add_option("--tls-server-name", connection.tls_server_name,
                  "name the server's certificate must carry, when it is not the host of --server");
  tls->add_flag("--insecure", connection.insecure, "plaintext even to an address that is not loopback");
  tls->add_option("--token-file", token_file, "file holding the bearer token to send (default: $IMGSTAT_TOKEN)");
  auto* json_option = app.add_flag("--json", json, "one JSON object per input per line");
  bool csv = false, normalized = false;
  std::string plot;
  app.add_option("--plot", plot,
                 "draw each channel's histogram into this PNG (several files: NAME-1.png, NAME-2.png, ...)");
  app.add_flag("--normalize", normalized,
               "values as fractions of the sample type's maximum (255, 65535, ...), as ImageMagick prints them");
  app.add_flag("--csv", csv, "CSV: a header, then a row per channel (one per failed input)")->excludes(json_option);
  auto* raw_option = app.add_option("--raw", raw_spec, "raw pixels: WxHxC:TYPE (TYPE uint8, uint16, int8, int16, float32, float64)");
  app.add_option("--stride", stride, "with --raw: bytes from one row to the next (default packed)");
  auto* bytes_option = app.add_flag("--bytes", bytes, "histogram of the bytes of any file (a 1xN uint8 image)");
  app.add_flag("--stream", stream, "upload in chunks (automatic above the server's message limit)");
  bool no_batch = false;
  app.add_flag("--no-batch", no_batch,
               "send each small file in an Analyze call of its own, not on AnalyzeBatch streams (a few files "
               "in flight on each: less gRPC work a file on both sides)");
  bool no_shm = false;
  app.add_flag("--no-shm", no_shm,
               "send files over the socket even to a server on this host (by default files of 1 MiB and more go "
               "to it in shared memory)");
  app.add_flag("--local", local, "compute in-process with the same engine, no server");
  bool aggregate = false;
  app.add_flag("--aggregate", aggregate,
               "one answer for all the files together (each kind of image, by sample type and channels, apart): "
               "the statistics of all their pixels at once, integers exact");
  // Parts of each image (one kind at a time).
  auto* parts_group = app.add_option_group("Parts", "statistics of parts of each image instead of the whole");
  std::vector<std::string> rois;
  std::string mask_spec, labels_spec, tiles_spec, map_raw_spec;
  std::optional<int64_t> ignore_label;
  uint32_t max_labels = 0;
  int plot_part = -1;
  auto* roi_option = parts_group->add_option("--roi", rois, "a rectangle X,Y,W,H (repeatable; one answer each)")
                         ->allow_extra_args(false);
  auto* mask_option = parts_group->add_option(
      "--mask", mask_spec, "only the pixels where this image's first channel is nonzero; 'alpha': the image's own alpha");
  auto* labels_option = parts_group->add_option(
      "--labels", labels_spec,
      "a label image (uint8/uint16 PNG or TIFF, or --map-raw): one answer per label; a folder: each input's label "
      "file of the same name stem there");
  auto* tiles_option = parts_group->add_option("--tiles", tiles_spec, "a grid of CxR tiles, one answer each");
  parts_group->add_option("--ignore-label", ignore_label, "with --labels: leave this label's pixels out (e.g. 0)");
  parts_group->add_option("--max-labels", max_labels, "with --labels: refuse label images with more labels (0: the server's --max-parts)");
  parts_group->add_option("--map-raw", map_raw_spec,
                          "the --mask or --labels file is raw: WxHxC:TYPE (TYPE as --raw, or uint32, int32)");
  app.add_option("--plot-part", plot_part, "with --plot and parts: draw this part (0 = the first answered)");
  roi_option->excludes(mask_option)->excludes(labels_option)->excludes(tiles_option);
  mask_option->excludes(labels_option)->excludes(tiles_option);
  labels_option->excludes(tiles_option);
  std::string local_engine = "cpu";
  app.add_option("--engine", local_engine,
                 "with --local: cpu (starts at once), cuda (pays about 0.4 s to start CUDA, then JPEG on the GPU), "
                 "auto (cuda where a GPU is usable)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--bins", bins, "histogram bins, 1 to 65536")->check(CLI::Range(1, 65536));
  std::string colour_space, joint_spec, joint_range_spec;
  app.add_option("--colour-space", colour_space,
                 "measure in a colour space: hsv, hsv-full, hls, lab, ycrcb or gray (RGB(A) images; OpenCV's cvtColor)")
      ->check(CLI::IsMember({"hsv", "hsv-full", "hls", "lab", "ycrcb", "gray"}));
  app.add_option("--joint", joint_spec,
                 "joint histogram CHANNELS:BINS of 2 or 3 channels, names or indices: 0,1,2:32 or H,S:30,32");
  app.add_option("--joint-range", joint_range_spec, "with --joint: LO:HI per channel, comma-separated (default each channel's range)");
  app.add_option("--range", range_spec, "explicit histogram range LO:HI (default automatic)");
  app.add_option("--stats", stats,
                 "statistics to report (default: min_max,sum,stddev,histogram,distribution,shape,summary); also "
                 "positions, unique_colors, luminance, or all")
      ->delimiter(',')->allow_extra_args(false)
      ->check(CLI::IsMember({"min_max", "sum", "stddev", "histogram", "distribution", "shape", "positions",
                             "unique_colors", "luminance", "summary", "all"}));
  std::vector<double> percentiles{5, 25, 75, 95};
  app.add_option("--percentiles", percentiles, "percentiles to report with the distribution, 0 to 100")
      ->delimiter(',')->allow_extra_args(false)->check(CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_flag("--allow-truncated", allow_truncated, "analyze truncated JPEGs (libjpeg fills the rest with gray)");
  std::string decoder = "auto";
  app.add_option("--decoder", decoder,
                 "where JPEG decodes, the answer being the same: auto: the server's GPU when it has one; cpu: libjpeg-turbo; gpu: the GPU or an error")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))->capture_default_str();
  app.add_option("--timeout", timeout, "seconds each file (or --info, --health) may take; 0: no limit")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--health", health, "ask the server's grpc.health.v1 service; exit 0 when SERVING");
  app.add_flag("--info", info, "print the server's version, engine and limits (with --json: as JSON)");
  bytes_option->excludes(raw_option);
  app.footer(R"(Examples:
  imgstat-client photo.jpg                      table and histograms, from the server at $IMGSTAT_SERVER
  imgstat-client --local *.png                  no server: decode and compute in this process
  imgstat-client --json --stats min_max,sum a.tif b.tif
  imgstat-client --csv -j 8 shots/ 'more/**/*.tif' > stats.csv   folders and patterns, 8 at once
  imgstat-client --raw 4096x3072x1:uint16 frame.raw
  cat photo.png | imgstat-client -
  imgstat-client --decoder cpu photo.jpg        decode with libjpeg-turbo, even where the server has a GPU

Exit status: 0 when every input was analyzed, 1 when any failed (each named on stderr),
2 for a usage error.
)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version are not errors
  }

  // From here on libpng's and OpenCV's own prints are caught: each file's
  // become part of its error or warnings, the rest are said once, cleanly.
  std::ostream& err = program_stderr();
  catch_library_messages([&err](const std::string& line) { err << "imgstat-client: library: " << line << "\n"; });
  connection.target = server;
  connection.shm = !no_shm;
  connection.batch = !no_batch;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in || !std::getline(in, connection.token)) {
      err << "imgstat-client: --token-file " << token_file << ": cannot be read\n";
      return 2;
    }
  } else if (const char* t = std::getenv("IMGSTAT_TOKEN")) {
    connection.token = t;
  }
  while (!connection.token.empty() && std::isspace(static_cast<unsigned char>(connection.token.back())))
    connection.token.pop_back();
  if (!local && !connection.uses_tls() && !is_loopback(server))
    err << "imgstat-client: warning: plaintext to " << server
        << " (--insecure): images, results and the token cross the network unencrypted\n";
  std::unique_ptr<client::Remote> remote_ptr;
  try {
    remote_ptr = std::make_unique<client::Remote>(connection, timeout);
  } catch (const std::exception& e) {
    err << "imgstat-client: " << e.what() << "\n";
    return 2;
  }
  client::Remote& remote = *remote_ptr;
  if (health) {
    std::string status;
    const bool ok = remote.health(&status);
    std::cout << (ok ? status : "unreachable: " + status) << "\n";
    return ok && status == "SERVING" ? 0 : 1;
  }
  if (info) {
    v1::ServerInfo i;
    std::string error;
    if (!remote.info(&i, &error)) {
      err << "imgstat-client: " << server << ": " << error << "\n";
      return 1;
    }
    if (json) {
      std::string text;
      google::protobuf::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      o.always_print_primitive_fields = true;
      (void)google::protobuf::util::MessageToJsonString(i, &text, o);
      std::cout << text << "\n";
    } else {
      std::cout << i.DebugString();
    }
    return 0;
  }
  if (files.empty()) {
    err << app.help();
    return 2;
  }

  client::Request request;
  request.force_stream = stream;
  request.input.set_kind(bytes ? v1::INPUT_KIND_BYTES : raw_spec.empty() ? v1::INPUT_KIND_ENCODED : v1::INPUT_KIND_RAW);
  std::string error;
  if (!raw_spec.empty()) {
    if (!parse_raw(raw_spec, request.input.mutable_raw(), &error)) {
      err << "imgstat-client: " << error << "\n";
      return 2;
    }
    request.input.mutable_raw()->set_row_stride(stride);
  }
  request.options.set_bins(bins);
  request.options.set_allow_truncated(allow_truncated);
  request.options.set_decoder(decoder == "cpu"   ? v1::DECODER_CHOICE_CPU
                              : decoder == "gpu" ? v1::DECODER_CHOICE_GPU
                                                 : v1::DECODER_CHOICE_AUTO);
  if (!range_spec.empty()) {
    const auto colon = range_spec.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      request.options.mutable_range()->set_lo(std::stod(range_spec.substr(0, colon)));
      request.options.mutable_range()->set_hi(std::stod(range_spec.substr(colon + 1)));
    } catch (const std::exception&) {
      err << "imgstat-client: --range wants LO:HI, e.g. 0:1000; got \"" << range_spec << "\"\n";
      return 2;
    }
  }
  if (!colour_space.empty()) {
    static const std::map<std::string, v1::ColourSpace> kSpaces = {
        {"hsv", v1::COLOUR_SPACE_HSV}, {"hsv-full", v1::COLOUR_SPACE_HSV_FULL}, {"hls", v1::COLOUR_SPACE_HLS},
        {"lab", v1::COLOUR_SPACE_LAB}, {"ycrcb", v1::COLOUR_SPACE_YCRCB},      {"gray", v1::COLOUR_SPACE_GRAY}};
    request.options.set_colour_space(kSpaces.at(colour_space));
  }
  if (!joint_range_spec.empty() && joint_spec.empty()) {
    err << "imgstat-client: --joint-range needs --joint\n";
    return 2;
  }
  if (!joint_spec.empty()) {
    std::string why;
    if (!parse_joint(joint_spec, joint_range_spec, colour_space, request.options.mutable_joint(), &why)) {
      err << "imgstat-client: " << why << "\n";
      return 2;
    }
  }
  // Parts: the request's Options.parts; a label folder pairs files by name stem below.
  std::map<std::string, std::vector<std::string>> labels_by_stem;
  bool labels_folder = false;
  try {
    v1::Parts& parts = *request.options.mutable_parts();
    auto map_input = [&](const std::string& file, v1::Input* in) {
      client::Source source(file);  // it can be opened: said now, not file by file
      if (!source.is_file()) throw std::runtime_error("a mask or label image is a file, not standard input");
      request.map_file = file;
      if (map_raw_spec.empty()) return;
      in->set_kind(v1::INPUT_KIND_RAW);
      std::string why, spec = map_raw_spec;
      // uint32 and int32 are sample types of label images alone.
      v1::SampleType wide = v1::SAMPLE_TYPE_UNSPECIFIED;
      for (auto [name, t] : {std::pair{":uint32", v1::SAMPLE_TYPE_UINT32}, std::pair{":int32", v1::SAMPLE_TYPE_INT32}})
        if (spec.size() > std::strlen(name) && spec.compare(spec.size() - std::strlen(name), std::string::npos, name) == 0) {
          wide = t;
          spec = spec.substr(0, spec.size() - std::strlen(name)) + ":uint8";
        }
      if (!parse_raw(spec, in->mutable_raw(), &why)) throw std::runtime_error(std::regex_replace(why, std::regex("--raw"), "--map-raw"));
      if (wide != v1::SAMPLE_TYPE_UNSPECIFIED) in->mutable_raw()->set_sample_type(wide);
    };
    if (!rois.empty()) {
      for (const std::string& r : rois) {
        static const std::regex re(R"((\d+),(\d+),(\d+),(\d+))");
        std::smatch m;
        if (!std::regex_match(r, m, re)) throw std::runtime_error("--roi wants X,Y,W,H, e.g. 0,0,64,64; got \"" + r + "\"");
        v1::Rectangle* q = parts.mutable_rectangles()->add_rectangles();
        auto u32 = [&](int i) {
          const unsigned long long v = std::stoull(m[i].str());
          if (v > UINT32_MAX) throw std::runtime_error("--roi " + r + ": " + m[i].str() + " is past 32 bits");
          return static_cast<uint32_t>(v);
        };
        q->set_x(u32(1));
        q->set_y(u32(2));
        q->set_width(u32(3));
        q->set_height(u32(4));
      }
    } else if (!tiles_spec.empty()) {
      static const std::regex re(R"((\d+)x(\d+))");
      std::smatch m;
      if (!std::regex_match(tiles_spec, m, re) || m[1].length() > 9 || m[2].length() > 9)
        throw std::runtime_error("--tiles wants CxR, e.g. 16x16; got \"" + tiles_spec + "\"");
      parts.mutable_tiles()->set_columns(static_cast<uint32_t>(std::stoul(m[1].str())));
      parts.mutable_tiles()->set_rows(static_cast<uint32_t>(std::stoul(m[2].str())));
    } else if (!mask_spec.empty()) {
      if (mask_spec == "alpha")
        parts.mutable_mask()->set_alpha(true);
      else
        map_input(mask_spec, parts.mutable_mask()->mutable_image());
    } else if (!labels_spec.empty()) {
      v1::Labels* labels = parts.mutable_labels();
      if (ignore_label) labels->set_ignore(*ignore_label);
      labels->set_max_labels(max_labels);
      if (std::filesystem::is_directory(labels_spec)) {
        labels_folder = true;
        for (const auto& e : std::filesystem::directory_iterator(labels_spec))
          if (e.is_regular_file()) labels_by_stem[e.path().stem().string()].push_back(e.path().string());
      } else {
        map_input(labels_spec, labels->mutable_image());
      }
    } else {
      request.options.clear_parts();
    }
    if ((ignore_label || max_labels) && labels_spec.empty())
      throw std::runtime_error("--ignore-label and --max-labels go with --labels");
  } catch (const std::exception& e) {
    err << "imgstat-client: " << e.what() << "\n";
    return 2;
  }
  if (stats.empty()) stats = {"min_max", "sum", "stddev", "histogram", "distribution", "shape", "summary"};
  static const std::map<std::string, v1::Statistic> kStatistics{
      {"min_max", v1::STATISTIC_MIN_MAX},       {"sum", v1::STATISTIC_SUM},
      {"stddev", v1::STATISTIC_STDDEV},         {"histogram", v1::STATISTIC_HISTOGRAM},
      {"distribution", v1::STATISTIC_DISTRIBUTION}, {"shape", v1::STATISTIC_SHAPE},
      {"positions", v1::STATISTIC_POSITIONS},   {"unique_colors", v1::STATISTIC_UNIQUE_COLORS},
      {"luminance", v1::STATISTIC_LUMINANCE},   {"summary", v1::STATISTIC_SUMMARY},
      {"all", v1::STATISTIC_ALL}};
  for (const std::string& s : stats) request.options.add_statistics(kStatistics.at(s));
  for (double p : percentiles) request.options.add_percentiles(p);
  std::optional<client::Aggregation> aggregation;
  if (aggregate) {
    try {
      aggregation.emplace(request.options);
    } catch (const std::exception& e) {
      err << "imgstat-client: " << e.what() << "\n";
      return 2;
    }
    request.options = aggregation->part_options();
  }

  const bool jobs_given = jobs_option->count() > 0;
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::string> missing;
  const std::vector<std::string> inputs = client::expand_inputs(files, &missing);
  int failures = 0;
  for (const std::string& m : missing) {
    err << "imgstat-client: " << m << ": nothing matches\n";
    ++failures;
  }
  std::unique_ptr<client::Local> in_process;
  if (local) {
    try {
      in_process = std::make_unique<client::Local>(local_engine == "cuda"   ? EngineKind::kCuda
                                                   : local_engine == "auto" ? EngineKind::kAuto
                                                                            : EngineKind::kCpu);
    } catch (const std::exception& e) {
      err << "imgstat-client: " << e.what() << "\n";
      return 1;
    }
  }
  const bool color = !json && !csv && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
  // A progress bar on a terminal, for many files or a large upload; none
  // when stderr is piped. Streamed uploads count their bytes as they go.
  uint64_t total_bytes = 0;
  for (const std::string& f : inputs) {
    std::error_code ec;
    const uint64_t n = f == "-" ? 0 : std::filesystem::file_size(f, ec);
    if (!ec) total_bytes += n;
  }
  const bool progress = isatty(STDERR_FILENO) && (inputs.size() > 1 || total_bytes >= (uint64_t{64} << 20));
  std::atomic<uint64_t> sent{0};
  if (csv) std::cout << client::render_csv_header();

  // Each file's request: the label image of its own, with a label folder.
  auto make_request = [&](size_t i) {
    client::Request mine = request;
    if (labels_folder) {  // this file's label image: the same name stem in the folder
      const std::string stem = std::filesystem::path(inputs[i]).stem().string();
      const auto at = labels_by_stem.find(stem);
      if (at == labels_by_stem.end()) throw std::runtime_error("no label file named " + stem + ".* in " + labels_spec);
      if (at->second.size() > 1)
        throw std::runtime_error("several label files named " + stem + ".* in " + labels_spec + ": keep one");
      mine.map_file = at->second.front();
    }
    return mine;
  };
  std::optional<client::Pass> pass;
  std::atomic<client::Pass*> running{nullptr};  // set once the pass is whole
  if (progress)
    request.on_sent = [&sent, &running](uint64_t n) {
      if (sent.fetch_add(n) == 0)
        if (client::Pass* p = running.load()) p->poke();  // the bar shows the upload at once, not 200 ms later
    };
  // -j: calls in flight; by default as many as keep the server busy (four
  // for each of its engine threads), or one analysis per core with --local.
  client::PassOptions pass_options;
  // (One file: no question to the server, whose answer would not be used.)
  pass_options.jobs = jobs_given            ? jobs
                      : inputs.size() <= 1 ? 1u
                      : local               ? std::max(1u, std::thread::hardware_concurrency())
                                            : remote.calls_to_fill();
  // JSON and CSV are made where each answer comes in; the loop below prints.
  const bool parts_asked = request.options.has_parts() && !request.options.parts().has_mask();
  if ((json || csv) && plot.empty() && !aggregation)
    pass_options.prepare = [&](client::Outcome& o) {
      if (normalized) client::normalize(o);
      o.parts = parts_asked;
      o.rendered = json ? client::render_json(o) + "\n" : client::render_csv(o);
    };
  // Readers start calls and carry large uploads: eight uploads at once at most.
  pass_options.readers = std::min(pass_options.jobs, 8u);
  pass.emplace(local ? nullptr : &remote, in_process.get(), inputs, make_request, pass_options);
  running = &*pass;
  auto bar = [&](size_t done, bool clear) {
    if (!progress) return;
    const int width = 30, filled = static_cast<int>(width * done / inputs.size());
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // To the terminal itself: C's stderr is the library-message catcher's.
    char line[256];
    int n = std::snprintf(line, sizeof line, "\r\033[K");
    if (!clear) {
      n += std::snprintf(line + n, sizeof line - n, "[%s%s] %zu/%zu files, %d failed, %.1f files/s",
                         std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done,
                         inputs.size(), failures, done / std::max(took, 1e-9));
      if (const uint64_t up = sent.load())
        n += std::snprintf(line + n, sizeof line - n, ", uploaded %.0f of %.0f MiB", up / 1048576.0,
                           total_bytes / 1048576.0);
    }
    err << std::string(line, std::min<size_t>(n, sizeof line - 1)) << std::flush;
  };
  // One answer as asked: a plot, JSON, CSV or the table; `count` answers in all.
  auto show = [&](client::Outcome o, size_t i, size_t count) {
    if (!plot.empty() && o.ok) {
      std::string to = plot, why;
      if (count > 1) {
        const size_t dot = plot.rfind('.');
        to = plot.substr(0, dot) + "-" + std::to_string(i + 1) + (dot == std::string::npos ? ".png" : plot.substr(dot));
      }
      client::Outcome drawn = o;
      if (o.response.parts_size() > 0) {  // a part's histograms, drawn as an image's
        const int k = std::max(plot_part, 0);
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
    if (normalized && !o.normalized) client::normalize(o);
    o.parts = parts_asked;
    if (!o.ok) {
      ++failures;
      err << "imgstat-client: " << o.file << ": " << o.code << ": " << o.error << "\n";
    }
    if (!o.rendered.empty())
      std::cout << o.rendered;
    else if (json)
      std::cout << client::render_json(o) << "\n";
    else if (csv)
      std::cout << client::render_csv(o);
    else if (o.ok)
      std::cout << client::render_table(o, color) << (count > 1 ? "\n" : "");
    // Written out when nothing else is ready to print: a reader of the
    // output sees each answer at once, and a fast pass costs no write per file.
    if (!pass || !pass->next_ready()) std::cout.flush();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    client::Outcome o = pass->next(progress ? std::function<void(size_t)>([&](size_t done) { bar(done, false); })
                                            : std::function<void(size_t)>());
    bar(0, true);
    if (aggregation) {  // nothing printed per file: each answer joins its kind's merge
      std::string why;
      if (o.ok && !aggregation->add(o.response, &why)) {
        o.ok = false;
        o.code = "INTERNAL";
        o.error = "its answer cannot be merged: " + why;
      }
      if (!o.ok) {
        ++failures;
        err << "imgstat-client: " << o.file << ": " << o.code << ": " << o.error << "\n";
      }
    } else {
      show(o, i, inputs.size());
    }
    bar(i + 1, i + 1 == inputs.size());
  }
  running = nullptr;
  pass.reset();
  if (aggregation) {
    for (const std::string& note : aggregation->notes()) err << "imgstat-client: note: " << note << "\n";
    const std::vector<client::Outcome> merged = aggregation->outcomes();
    for (size_t i = 0; i < merged.size(); ++i) show(merged[i], i, merged.size());
  }
  if (!json && !csv && (aggregation || inputs.size() + missing.size() > 1)) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("%zu files: %zu %s, %d failed, %.2f s\n", inputs.size() + missing.size(),
                inputs.size() + missing.size() - failures, aggregation ? "merged" : "analyzed", failures, took);
  }
  return failures == 0 ? 0 : 1;
}
