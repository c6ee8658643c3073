#include "options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "core/validate.hpp"
#include "imgstat/colour.hpp"
#include "imgstat/types.hpp"
#include "shards.hpp"
#include "sources.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

namespace imgstat::client {
namespace {

// "WxHxC:TYPE", e.g. 512x512x3:uint8, or a stack "WxHxCxD:TYPE" of D planes.
bool parse_raw(const std::string& spec, v1::RawLayout* raw, std::string* error) {
  static const std::regex re(R"((\d+)x(\d+)x(\d+)(?:x(\d+))?:(\w+))");
  std::smatch m;
  SampleType t;
  if (!std::regex_match(spec, m, re) || m[1].length() > 10 || m[2].length() > 10 || m[3].length() > 10 ||
      m[4].length() > 10) {
    *error = "--raw wants WxHxC:TYPE or WxHxCxD:TYPE (D planes), e.g. 512x512x3:uint8; got \"" + spec + "\"";
    return false;
  }
  if (!parse_sample_type(m[5].str().c_str(), &t)) {
    *error = "--raw: unknown sample type \"" + m[5].str() + "\" (uint8, uint16, int8, int16, float32, float64)";
    return false;
  }
  for (int i = 1; i <= 4; ++i)
    if (m[i].matched && std::stoull(m[i].str()) > UINT32_MAX) {
      *error = "--raw: " + m[i].str() + " is over 2^32 - 1";
      return false;
    }
  raw->set_width(static_cast<uint32_t>(std::stoul(m[1].str())));
  raw->set_height(static_cast<uint32_t>(std::stoul(m[2].str())));
  raw->set_channels(static_cast<uint32_t>(std::stoul(m[3].str())));
  if (m[4].matched) raw->set_depth(static_cast<uint32_t>(std::stoul(m[4].str())));
  raw->set_sample_type(proto_sample_type(t));
  return true;
}

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

// Where the calls go and how: the inputs, jobs, server, TLS and token.
CLI::Option* add_call_options(CLI::App& app, CliOptions& o) {
  app.add_option("files", o.files,
                 "image files, folders (their images, recursively), quoted patterns ('shots/**/*.png') and "
                 "brace ranges ('shard-{000..099}.tar'), archives (.tar, .tar.gz, .tar.zst, .zip...: each image "
                 "member an input, ARCHIVE:MEMBER); - reads standard input");
  app.add_option("--extensions", o.extensions,
                 "of folders and archives, read the files and members with these extensions only "
                 "(comma-separated, e.g. .jpg,.seg.png; default: images by their extensions; --bytes: every member)")
      ->delimiter(',')->allow_extra_args(false);
  auto* jobs = app.add_option("--jobs,-j", o.jobs,
                                     "calls in flight (default: four for each of the server's engine threads, "
                                     "within its limit; with --local, one analysis per core)")
                          ->check(CLI::Range(1u, 256u));
  app.add_option("--server", o.server, "server address (default: $IMGSTAT_SERVER, else localhost:50051)");
  auto* tls = app.add_option_group("Security", "TLS is used unless the server is on loopback or --insecure is given");
  tls->add_option("--tls-ca", o.connection.tls_ca, "PEM CA certificates that signed the server's (default: gRPC's roots)");
  tls->add_option("--tls-cert", o.connection.tls_cert, "PEM certificate for mutual TLS (with --tls-key)");
  tls->add_option("--tls-key", o.connection.tls_key, "private key of --tls-cert");
  tls->add_option("--tls-server-name", o.connection.tls_server_name,
                  "name the server's certificate must carry, when it is not the host of --server");
  tls->add_flag("--insecure", o.connection.insecure, "plaintext even to an address that is not loopback");
  tls->add_option("--token-file", o.token_file, "file holding the bearer token to send (default: $IMGSTAT_TOKEN)");
  return jobs;
}

// What comes out (table, JSON, CSV, a plot) and what goes in (encoded, raw,
// bytes; how it travels).
void add_output_and_input_options(CLI::App& app, CliOptions& o) {
  auto* json_option = app.add_flag("--json", o.json, "one JSON object per input per line");
  app.add_option("--plot", o.plot,
                 "draw each channel's histogram into this PNG (several files: NAME-1.png, NAME-2.png, ...)");
  app.add_flag("--normalize", o.normalized,
               "values as fractions of the sample type's maximum (255, 65535, ...), as ImageMagick prints them");
  app.add_flag("--csv", o.csv, "CSV: a header, then a row per channel (one per failed input)")->excludes(json_option);
  auto* raw_option = app.add_option("--raw", o.raw_spec, "raw pixels: WxHxC:TYPE (TYPE uint8, uint16, int8, int16, float32, float64), or WxHxCxD:TYPE for D planes "
                                   "one after another (a volume, a stack: answered as a file of several planes)");
  app.add_option("--stride", o.stride, "with --raw: bytes from one row to the next (default packed)");
  auto* bytes_option = app.add_flag("--bytes", o.bytes, "histogram of the bytes of any file (a 1xN uint8 image)");
  app.add_flag("--stream", o.stream, "upload in chunks (automatic above the server's message limit)");
  app.add_flag("--no-batch", o.no_batch,
               "send each small file in an Analyze call of its own, not on AnalyzeBatch streams (a few files "
               "in flight on each: less gRPC work a file on both sides)");
  app.add_flag("--no-shm", o.no_shm,
               "send files over the socket even to a server on this host (by default files of 1 MiB and more go "
               "to it in shared memory)");
  app.add_flag("--local", o.local, "compute in-process with the same engine, no server");
  app.add_flag("--aggregate", o.aggregate,
               "one answer for all the files together (each kind of image, by sample type and channels, apart): "
               "the statistics of all their pixels at once, integers exact");
  auto* partial_out = app.add_option(
      "--partial-out", o.partial_out,
      "with --aggregate or --merge: also write the merged state to FILE, a partial that --merge (here or on "
      "another machine) and Python's imgstat.Partial merge exactly with others");
  auto* merge = app.add_flag("--merge", o.merge,
                             "the files named are partials (--partial-out): merge them and answer as --aggregate "
                             "would over all their images (only --stats and --percentiles may be given)");
  auto* resume = app.add_option("--resume", o.resume,
                                "with --aggregate: keep the merged state and the inputs done in FILE as the pass "
                                "goes; the same command again goes on where it stopped, each input counted once");
  app.add_flag("--per-file", o.per_file,
               "with --aggregate: a call for each file and its answer merged here, as a pass with --duplicates, "
               "--report, --resume, parts or --stats quality goes, rather than the files merged by the servers "
               "themselves on a few Aggregate calls");
  app.add_flag("--duplicates", o.duplicates,
               "with --aggregate: the groups of exact duplicates (equal decoded pixels, whatever the format) and near "
               "duplicates (imagehash's phash within --duplicates-distance bits) across the files");
  app.add_option("--report", o.report,
                 "with --aggregate: write one self-contained HTML file: the dataset's statistics and histograms, "
                 "with --stats quality the measures' distributions and the images flagged, with --duplicates the groups");
  app.add_option("--duplicates-distance", o.duplicates_distance,
                 "with --duplicates: the most bits two near duplicates' phashes differ by (0: equal, as cleanvision)")
      ->check(CLI::Range(0, 16))->capture_default_str();
  merge->excludes(resume);
  (void)partial_out;
  bytes_option->excludes(raw_option);
}

// Parts of each image, one kind at a time.
void add_parts_options(CLI::App& app, CliOptions& o) {
  auto* parts_group = app.add_option_group("Parts", "statistics of parts of each image instead of the whole");
  auto* roi_option = parts_group->add_option("--roi", o.rois, "a rectangle X,Y,W,H (repeatable; one answer each)")
                         ->allow_extra_args(false);
  auto* mask_option = parts_group->add_option(
      "--mask", o.mask_spec,
      "only the pixels where this image's first channel is nonzero; 'alpha': the image's own alpha; an extension "
      "(.mask.png): each input's file or archive member of the same WebDataset key with it");
  auto* labels_option = parts_group->add_option(
      "--labels", o.labels_spec,
      "a label image (uint8/uint16 PNG or TIFF, or --map-raw): one answer per label; a folder: each input's label "
      "file of the same name stem there; an extension (.seg.png): each input's file or archive member of the same "
      "WebDataset key with it");
  auto* tiles_option = parts_group->add_option("--tiles", o.tiles_spec, "a grid of CxR tiles, one answer each; of a stack CxRxS boxes, its planes cut into S slabs (CxR: one)");
  parts_group->add_option("--ignore-label", o.ignore_label, "with --labels: leave this label's pixels out (e.g. 0)");
  parts_group->add_option("--max-labels", o.max_labels, "with --labels: refuse label images with more labels (0: the server's --max-parts)");
  parts_group->add_option("--map-raw", o.map_raw_spec,
                          "the --mask or --labels file is raw: WxHxC:TYPE (TYPE as --raw, or uint32, int32)");
  app.add_option("--level", o.level,
                 "a TIFF pyramid's level: 0 the full-resolution pages (the default), N each page's N-th reduced copy "
                 "(its SubIFDs, or the reduced pages after it)");
  app.add_option("--series", o.series,
                 "files of several series (a TIFF's pages of different sizes or samples, an OME-TIFF's images): answer "
                 "series N alone (from 0); by default each series is answered apart, as FILE [series N]");
  app.add_option("--planes", o.planes_spec,
                 "files of several planes (multi-page TIFF, animated GIF, APNG, WebP): answer each plane apart too, after the planes together; "
                 "with N, A-B or A- (from 0) only those planes, in both answers")
      ->expected(0, 1);
  app.add_option("--plot-part", o.plot_part, "with --plot and parts: draw this part (0 = the first answered)");
  roi_option->excludes(mask_option)->excludes(labels_option)->excludes(tiles_option);
  mask_option->excludes(labels_option)->excludes(tiles_option);
  labels_option->excludes(tiles_option);
}

// What is measured, where JPEG decodes, how long a file may take; the
// server's health and information.
void add_measure_options(CLI::App& app, CliOptions& o) {
  app.add_option("--engine", o.local_engine,
                 "with --local: cpu (starts at once), cuda (pays about 0.4 s to start CUDA, then JPEG on the GPU), "
                 "auto (cuda where a GPU is usable)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--bins", o.bins, "histogram bins, 1 to 65536")->check(CLI::Range(1, 65536));
  app.add_option("--colour-space", o.colour_space,
                 "measure in a colour space: hsv, hsv-full, hls, lab, ycrcb or gray (RGB(A) images; OpenCV's cvtColor)")
      ->check(CLI::IsMember({"hsv", "hsv-full", "hls", "lab", "ycrcb", "gray"}));
  app.add_option("--joint", o.joint_spec,
                 "joint histogram CHANNELS:BINS of 2 or 3 channels, names or indices: 0,1,2:32 or H,S:30,32");
  app.add_option("--joint-range", o.joint_range_spec, "with --joint: LO:HI per channel, comma-separated (default each channel's range)");
  app.add_option("--range", o.range_spec, "explicit histogram range LO:HI (default automatic)");
  app.add_option("--stats", o.stats,
                 "statistics to report (default: min_max,sum,stddev,histogram,distribution,shape,summary); also "
                 "positions, unique_colors, luminance, robust (sigma-clipped, as astropy's sigma_clipped_stats), quality "
                 "(sharpness, contrast, colourfulness, exposure, cleanvision's issues), hashes (of the pixels; "
                 "imagehash's phash), or all")
      ->delimiter(',')->allow_extra_args(false)
      ->check(CLI::IsMember({"min_max", "sum", "stddev", "histogram", "distribution", "shape", "positions",
                             "unique_colors", "luminance", "summary", "robust", "quality", "hashes", "all"}));
  app.add_option("--sigma", o.sigma, "with --stats robust: clip at this many spreads from the centre (default 3)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--sigma-lower", o.sigma_lower, "with --stats robust: below the centre (default --sigma)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--sigma-upper", o.sigma_upper, "with --stats robust: above the centre (default --sigma)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--maxiters", o.maxiters, "with --stats robust: rounds of clipping at most (default 5; -1: until none is left out)")
      ->check(CLI::Range(-1, 1 << 30));
  app.add_option("--cenfunc", o.cenfunc, "with --stats robust: the centre, median or mean")
      ->check(CLI::IsMember({"median", "mean"}))->capture_default_str();
  app.add_option("--stdfunc", o.stdfunc, "with --stats robust: the spread, std or mad_std")
      ->check(CLI::IsMember({"std", "mad_std"}))->capture_default_str();
  app.add_option("--background", o.background_spec,
                 "background and background RMS meshes as photutils' Background2D makes them, boxes of N or WxH pixels");
  app.add_option("--background-filter", o.background_filter,
                 "with --background: the median filter over the mesh, N or WxH boxes, odd (1: none)")
      ->capture_default_str();
  app.add_option("--background-estimator", o.background_estimator,
                 "with --background: sextractor (2.5 median - 1.5 mean, or the median), median or mean")
      ->check(CLI::IsMember({"sextractor", "median", "mean"}))->capture_default_str();
  app.add_option("--background-exclude", o.background_exclude,
                 "with --background: leave out boxes with more than this percentage of their pixels masked or clipped")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_option("--background-map", o.background_map,
                 "with --background: write the background and RMS maps at the image's size (photutils' interpolation) "
                 "to FILE.fits or FILE.tif, float32");
  app.add_option("--background-mesh", o.background_mesh,
                 "with --background: write the meshes, one pixel a box, to FILE.fits or FILE.tif, float32");
  app.add_option("--percentiles", o.percentiles, "percentiles to report with the distribution, 0 to 100")
      ->delimiter(',')->allow_extra_args(false)->check(CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_flag("--allow-truncated", o.allow_truncated, "analyze truncated JPEGs (libjpeg fills the rest with gray)");
  app.add_flag("--stored-values", o.stored_values,
               "DICOM: the stored values, not the modality values (RescaleSlope/Intercept applied, MONOCHROME1 "
               "inverted, padding left out)");
  app.add_flag("--dicom-series", o.dicom_series,
               "DICOM: each folder named is one input, and so are the DICOM files named, together: their series "
               "are its volumes (--series N picks one), slices ordered along the slice normal");
  app.add_option("--decoder", o.decoder,
                 "where JPEG decodes, the answer being the same: auto: the server's GPU when it has one; cpu: libjpeg-turbo; gpu: the GPU or an error")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))->capture_default_str();
  app.add_option("--timeout", o.timeout, "seconds each file (or --info, --health) may take; 0: no limit")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--health", o.health, "ask the server's grpc.health.v1 service; exit 0 when SERVING");
  app.add_flag("--info", o.info, "print the server's version, engine and limits (with --json: as JSON)");
}

}  // namespace

int parse_options(int argc, char** argv, CliOptions& o) {
  const char* env_server = std::getenv("IMGSTAT_SERVER");
  o.server = env_server && *env_server ? env_server : "localhost:50051";
  CLI::App app{"imgstat-client " IMGSTAT_VERSION ": per-channel statistics and histograms of images"};
  app.set_version_flag("--version", IMGSTAT_VERSION);
  CLI::Option* jobs = add_call_options(app, o);
  add_output_and_input_options(app, o);
  add_parts_options(app, o);
  add_measure_options(app, o);
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
  // --planes takes a range only when one follows (N, A-B, A-): else it is
  // a flag, and what follows is a file.
  std::vector<std::string> args(argv, argv + argc);
  static const std::regex range(R"(\d+(-\d*)?)");
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i] == "--planes" && (i + 1 == args.size() || !std::regex_match(args[i + 1], range))) args[i] = "--planes=all";
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes them last first, no program
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version are not errors
  }
  if (jobs->count() == 0) o.jobs = 0;
  o.planes = app.count("--planes") > 0;
  o.help = app.help();
  return -1;
}

std::string LabelFolder::file_for(const std::string& path) const {
  if (!extension.empty()) {
    const std::string beside = dataset_key(path) + extension;
    std::error_code ec;
    if (is_shard_member(beside) || std::filesystem::is_regular_file(beside, ec)) return beside;
    throw std::runtime_error("no " + beside + " beside it (its key's " + extension + ")");
  }
  const std::string stem = std::filesystem::path(path).stem().string();
  const auto at = by_stem.find(stem);
  if (at == by_stem.end()) throw std::runtime_error("no label file named " + stem + ".* in " + dir);
  if (at->second.size() > 1) throw std::runtime_error("several label files named " + stem + ".* in " + dir + ": keep one");
  return at->second.front();
}

namespace {

// The raw layout and the measure: bins, range, colour space, joint histogram.
// An error message, or empty.
std::string set_input_and_measure(const CliOptions& o, Request& request) {
  request.force_stream = o.stream;
  request.input.set_kind(o.bytes ? v1::INPUT_KIND_BYTES : o.raw_spec.empty() ? v1::INPUT_KIND_ENCODED : v1::INPUT_KIND_RAW);
  std::string error;
  if (!o.raw_spec.empty()) {
    if (!parse_raw(o.raw_spec, request.input.mutable_raw(), &error)) return error;
    request.input.mutable_raw()->set_row_stride(o.stride);
  }
  request.options.set_bins(o.bins);
  request.options.set_allow_truncated(o.allow_truncated);
  request.options.set_stored_values(o.stored_values);
  request.dicom_series = o.dicom_series;
  request.options.set_decoder(o.decoder == "cpu"   ? v1::DECODER_CHOICE_CPU
                              : o.decoder == "gpu" ? v1::DECODER_CHOICE_GPU
                                                 : v1::DECODER_CHOICE_AUTO);
  if (!o.range_spec.empty()) {
    const auto colon = o.range_spec.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      request.options.mutable_range()->set_lo(std::stod(o.range_spec.substr(0, colon)));
      request.options.mutable_range()->set_hi(std::stod(o.range_spec.substr(colon + 1)));
    } catch (const std::exception&) {
      return "--range wants LO:HI, e.g. 0:1000; got \"" + o.range_spec + "\"";
    }
  }
  if (!o.colour_space.empty()) {
    static const std::map<std::string, v1::ColourSpace> kSpaces = {
        {"hsv", v1::COLOUR_SPACE_HSV}, {"hsv-full", v1::COLOUR_SPACE_HSV_FULL}, {"hls", v1::COLOUR_SPACE_HLS},
        {"lab", v1::COLOUR_SPACE_LAB}, {"ycrcb", v1::COLOUR_SPACE_YCRCB},      {"gray", v1::COLOUR_SPACE_GRAY}};
    request.options.set_colour_space(kSpaces.at(o.colour_space));
  }
  if (!o.joint_range_spec.empty() && o.joint_spec.empty()) return "--joint-range needs --joint";
  if (!o.joint_spec.empty() &&
      !parse_joint(o.joint_spec, o.joint_range_spec, o.colour_space, request.options.mutable_joint(), &error))
    return error;
  return "";
}

// ".seg.png": the extension of each input's own map, beside it (no file of that name).
bool names_an_extension(const std::string& spec) {
  std::error_code ec;
  return spec.size() > 1 && spec[0] == '.' && spec.find('/') == std::string::npos && !std::filesystem::exists(spec, ec);
}

// The mask or label file: checked that it opens, named for the call to send,
// its raw layout (--map-raw) in `in`.
void set_map_input(const CliOptions& o, const std::string& file, v1::Input* in, Request& request) {
  try {
    client::Source source(file);  // it can be opened: said now, not file by file
    if (!source.is_file() && !source.is_tar())
      throw std::runtime_error("a mask or label image is a file, not standard input");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
  request.map_file = file;
  if (o.map_raw_spec.empty()) return;
  in->set_kind(v1::INPUT_KIND_RAW);
  std::string why, spec = o.map_raw_spec;
  // uint32 and int32 are sample types of label images alone.
  v1::SampleType wide = v1::SAMPLE_TYPE_UNSPECIFIED;
  for (auto [name, t] : {std::pair{":uint32", v1::SAMPLE_TYPE_UINT32}, std::pair{":int32", v1::SAMPLE_TYPE_INT32}})
    if (spec.size() > std::strlen(name) && spec.compare(spec.size() - std::strlen(name), std::string::npos, name) == 0) {
      wide = t;
      spec = spec.substr(0, spec.size() - std::strlen(name)) + ":uint8";
    }
  if (!parse_raw(spec, in->mutable_raw(), &why)) throw std::runtime_error(std::regex_replace(why, std::regex("--raw"), "--map-raw"));
  if (wide != v1::SAMPLE_TYPE_UNSPECIFIED) in->mutable_raw()->set_sample_type(wide);
}

void add_rectangle(const std::string& r, v1::Parts& parts) {
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

// Parts: the request's Options.parts; a label folder pairs files by name
// stem later. Throws std::runtime_error with the usage error.
void set_parts(const CliOptions& o, Request& request, LabelFolder& folder) {
  v1::Parts& parts = *request.options.mutable_parts();
  if (!o.rois.empty()) {
    for (const std::string& r : o.rois) add_rectangle(r, parts);
  } else if (!o.tiles_spec.empty()) {
    static const std::regex re(R"((\d+)x(\d+)(?:x(\d+))?)");
    std::smatch m;
    if (!std::regex_match(o.tiles_spec, m, re) || m[1].length() > 9 || m[2].length() > 9 || m[3].length() > 9)
      throw std::runtime_error("--tiles wants CxR or, for a stack, CxRxS, e.g. 16x16 or 8x8x4; got \"" + o.tiles_spec + "\"");
    parts.mutable_tiles()->set_columns(static_cast<uint32_t>(std::stoul(m[1].str())));
    parts.mutable_tiles()->set_rows(static_cast<uint32_t>(std::stoul(m[2].str())));
    if (m[3].matched) parts.mutable_tiles()->set_slabs(static_cast<uint32_t>(std::stoul(m[3].str())));
  } else if (!o.mask_spec.empty()) {
    if (o.mask_spec == "alpha") {
      parts.mutable_mask()->set_alpha(true);
    } else if (names_an_extension(o.mask_spec)) {
      folder.used = true;
      folder.extension = o.mask_spec;
      parts.mutable_mask()->mutable_image();
    } else {
      set_map_input(o, o.mask_spec, parts.mutable_mask()->mutable_image(), request);
    }
  } else if (!o.labels_spec.empty()) {
    v1::Labels* labels = parts.mutable_labels();
    if (o.ignore_label) labels->set_ignore(*o.ignore_label);
    labels->set_max_labels(o.max_labels);
    if (names_an_extension(o.labels_spec)) {
      folder.used = true;
      folder.extension = o.labels_spec;
    } else if (std::filesystem::is_directory(o.labels_spec) && !client::is_zarr_store(o.labels_spec)) {
      folder.used = true;
      folder.dir = o.labels_spec;
      for (const auto& e : std::filesystem::directory_iterator(o.labels_spec))
        if (e.is_regular_file()) folder.by_stem[e.path().stem().string()].push_back(e.path().string());
    } else {
      set_map_input(o, o.labels_spec, labels->mutable_image(), request);
    }
  } else {
    request.options.clear_parts();
  }
  if ((o.ignore_label || o.max_labels) && o.labels_spec.empty())
    throw std::runtime_error("--ignore-label and --max-labels go with --labels");
  // Labels name the same part in every file; rectangles and tiles do not.
  if (!o.report.empty() && !o.aggregate) throw std::runtime_error("--report goes with --aggregate");
  if (o.duplicates && !o.aggregate)
    throw std::runtime_error("--duplicates goes with --aggregate (for each file's own hashes: --stats hashes)");
  if (o.duplicates && (!o.partial_out.empty() || !o.resume.empty()))
    throw std::runtime_error("--duplicates groups the files of one pass: not with --partial-out or --resume");
  if (o.aggregate && (!o.rois.empty() || !o.tiles_spec.empty()))
    throw std::runtime_error("--aggregate merges whole images, masks and labels across files; --roi and --tiles "
                             "answer each file apart (leave out --aggregate)");
}

// --planes: Options.planes. Throws std::runtime_error with the usage error.
void set_planes(const CliOptions& o, Request& request) {
  if (o.level > 0) request.options.mutable_planes()->set_level(o.level);
  if (o.series) request.options.mutable_planes()->set_series(*o.series);
  if (!o.planes) return;
  v1::Planes& planes = *request.options.mutable_planes();
  planes.set_each(true);
  if (o.planes_spec.empty() || o.planes_spec == "all") return;
  static const std::regex re(R"((\d{1,18})(?:(-)(\d{1,18})?)?)");
  std::smatch m;
  if (!std::regex_match(o.planes_spec, m, re))
    throw std::runtime_error("--planes wants N, A-B or A- (planes numbered from 0); got \"" + o.planes_spec + "\"");
  const uint64_t first = std::stoull(m[1].str());
  planes.set_first(first);
  if (!m[2].matched) return planes.set_count(1);
  if (!m[3].matched) return;
  const uint64_t last = std::stoull(m[3].str());
  if (last < first) throw std::runtime_error("--planes " + o.planes_spec + ": the last plane is before the first");
  planes.set_count(last - first + 1);
}

void set_statistics(const CliOptions& o, Request& request) {
  std::vector<std::string> stats = o.stats;
  if (stats.empty()) stats = {"min_max", "sum", "stddev", "histogram", "distribution", "shape", "summary"};
  static const std::map<std::string, v1::Statistic> kStatistics{
      {"min_max", v1::STATISTIC_MIN_MAX},       {"sum", v1::STATISTIC_SUM},
      {"stddev", v1::STATISTIC_STDDEV},         {"histogram", v1::STATISTIC_HISTOGRAM},
      {"distribution", v1::STATISTIC_DISTRIBUTION}, {"shape", v1::STATISTIC_SHAPE},
      {"positions", v1::STATISTIC_POSITIONS},   {"unique_colors", v1::STATISTIC_UNIQUE_COLORS},
      {"luminance", v1::STATISTIC_LUMINANCE},   {"summary", v1::STATISTIC_SUMMARY},
      {"robust", v1::STATISTIC_ROBUST},         {"quality", v1::STATISTIC_QUALITY},
      {"hashes", v1::STATISTIC_HASHES},
      {"all", v1::STATISTIC_ALL}};
  for (const std::string& s : stats) request.options.add_statistics(kStatistics.at(s));
  if (o.duplicates) request.options.add_statistics(v1::STATISTIC_HASHES);
  if (o.sigma || o.sigma_lower || o.sigma_upper || o.maxiters || o.cenfunc != "median" || o.stdfunc != "std") {
    v1::SigmaClip* c = request.options.mutable_sigma_clip();
    c->set_sigma(o.sigma);
    c->set_sigma_lower(o.sigma_lower);
    c->set_sigma_upper(o.sigma_upper);
    c->set_maxiters(o.maxiters);
    c->set_centre(o.cenfunc == "mean" ? v1::SigmaClip::CENTRE_MEAN : v1::SigmaClip::CENTRE_MEDIAN);
    c->set_spread(o.stdfunc == "mad_std" ? v1::SigmaClip::SPREAD_MAD_STD : v1::SigmaClip::SPREAD_STD);
  }
  for (double p : o.percentiles) request.options.add_percentiles(p);
}

// --background and its companions into Options.background.
void set_background(const CliOptions& o, Request& request) {
  if (o.background_spec.empty()) {
    if (!o.background_map.empty() || !o.background_mesh.empty())
      throw std::runtime_error("--background-map and --background-mesh go with --background BOX");
    return;
  }
  static const std::regex re("([0-9]{1,9})(?:x([0-9]{1,9}))?");
  std::smatch m;
  if (!std::regex_match(o.background_spec, m, re))
    throw std::runtime_error("--background wants the box in pixels, N or WxH, e.g. 64 or 128x64; got \"" +
                             o.background_spec + "\"");
  v1::BackgroundOptions* b = request.options.mutable_background();
  b->set_box_columns(std::stoull(m[1].str()));
  b->set_box_rows(m[2].matched ? std::stoull(m[2].str()) : b->box_columns());
  std::smatch f;
  if (!std::regex_match(o.background_filter, f, re))
    throw std::runtime_error("--background-filter wants N or WxH boxes, odd, e.g. 3 or 5x3; got \"" +
                             o.background_filter + "\"");
  b->set_filter_columns(static_cast<uint32_t>(std::stoul(f[1].str())));
  b->set_filter_rows(f[2].matched ? static_cast<uint32_t>(std::stoul(f[2].str())) : b->filter_columns());
  b->set_exclude_percentile(o.background_exclude);
  b->set_estimator(o.background_estimator == "median" ? v1::BackgroundOptions::ESTIMATOR_MEDIAN
                   : o.background_estimator == "mean" ? v1::BackgroundOptions::ESTIMATOR_MEAN
                                                      : v1::BackgroundOptions::ESTIMATOR_SEXTRACTOR);
  if (request.options.has_sigma_clip()) *b->mutable_sigma_clip() = request.options.sigma_clip();
  if (o.aggregate) throw std::runtime_error("--background meshes are each image's own: not with --aggregate");
}

}  // namespace

std::string build_request(const CliOptions& o, Request& request, LabelFolder& folder) {
  if (std::string error = set_input_and_measure(o, request); !error.empty()) return error;
  try {
    set_parts(o, request, folder);
    set_planes(o, request);
  } catch (const std::exception& e) {
    return e.what();
  }
  set_statistics(o, request);
  try {
    set_background(o, request);
  } catch (const std::exception& e) {
    return e.what();
  }
  if ((!o.partial_out.empty() || !o.resume.empty()) && !o.aggregate && !o.merge)
    return "--partial-out and --resume go with --aggregate (--partial-out also with --merge)";
  if (o.merge && (o.aggregate || !o.range_spec.empty() || o.bins != 256 || !o.colour_space.empty() ||
                  !o.joint_spec.empty() || !o.labels_spec.empty() || !o.mask_spec.empty() || !o.raw_spec.empty()))
    return "--merge answers with the options its partials were made with: give only --stats and --percentiles";
  return "";
}

}  // namespace imgstat::client
