// The CLI's command line: every flag into one struct (parse_options), and
// the request it makes (build_request).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "calls.hpp"

namespace imgstat::client {

struct CliOptions {
  std::vector<std::string> files;
  std::vector<std::string> extensions;  // the files of folders and members of shards read (default: images)
  std::string server;  // default: $IMGSTAT_SERVER, else localhost:50051
  Connection connection;
  std::string token_file;
  bool json = false, csv = false, normalized = false, bytes = false, stream = false, local = false;
  bool dicom_series = false;  // a folder named is one input: its DICOM files' series as volumes
  bool health = false, info = false, allow_truncated = false, stored_values = false, no_batch = false, no_shm = false, aggregate = false;
  std::string plot, raw_spec, range_spec, local_engine = "cpu", decoder = "auto";
  std::string colour_space, joint_spec, joint_range_spec;
  uint64_t stride = 0;
  uint32_t bins = 256;
  std::vector<std::string> stats;
  std::vector<double> percentiles{5, 25, 75, 95};
  // --stats robust: sigma clipping as astropy's (0: its defaults).
  double sigma = 0, sigma_lower = 0, sigma_upper = 0;
  int32_t maxiters = 0;
  std::string cenfunc = "median", stdfunc = "std";
  // --background BOX: photutils' Background2D meshes (the sigma options
  // above clip its boxes too, maxiters 10 by default there); the maps
  // written as images by --background-map (the image's size) and
  // --background-mesh (one pixel a box).
  std::string background_spec, background_filter = "3", background_estimator = "sextractor";
  double background_exclude = 10;
  std::string background_map, background_mesh;
  double timeout = 120;  // a hung server must not hang the caller; a 2 GiB upload at 1 Gb/s fits
  unsigned jobs = 0;     // 0: not given
  // Parts, one kind at a time.
  std::vector<std::string> rois;
  std::string mask_spec, labels_spec, tiles_spec, map_raw_spec;
  std::optional<int64_t> ignore_label;
  uint32_t max_labels = 0;
  int plot_part = -1;
  // --planes [RANGE]: each plane apart too, of those chosen (N, A-B, A-; empty: all).
  bool planes = false;
  std::string planes_spec;
  uint32_t level = 0;  // --level: a TIFF pyramid's
  std::optional<uint32_t> series;  // --series: one series of a file of several
  // Partials (proto Partial): --partial-out FILE writes the pass's merged
  // state, --merge reads the files named as partials, --resume FILE keeps
  // the state and what is done as the pass goes.
  std::string partial_out, resume;
  // --duplicates with --aggregate: exact and near duplicates over the pass
  // (near: phash within duplicates_distance bits).
  bool duplicates = false;
  // --per-file with --aggregate: each file's answer merged here, not on the servers' Aggregate calls.
  bool per_file = false;
  std::string report;  // --report FILE.html with --aggregate
  uint32_t duplicates_distance = 4;
  bool merge = false;
  std::string help;  // the usage text, for a call without files
};

// -1: go on; else the exit status (0 after --help or --version, 2 for a usage error).
int parse_options(int argc, char** argv, CliOptions& o);

// --labels with a folder: each input's label image, by name stem.
// Each input's own label (or mask) image: from a folder, by name stem; or,
// named by an extension (--labels .seg.png), the file or archive member of
// the input's WebDataset key with that extension, beside it.
struct LabelFolder {
  bool used = false;
  std::string dir;
  std::map<std::string, std::vector<std::string>> by_stem;
  std::string extension;  // ".seg.png": by key, beside each input
  // The label file for input `path`; throws std::runtime_error when there is none, or several.
  std::string file_for(const std::string& path) const;
};

// The request the options ask for (its parts' map file named, not read);
// an error message for a usage error, else empty.
std::string build_request(const CliOptions& o, Request& request, LabelFolder& folder);

}  // namespace imgstat::client
