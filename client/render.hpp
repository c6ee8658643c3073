// How the CLI shows a result: a table and a histogram drawing per channel,
// one JSON object per line, or CSV rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat::client {

struct Outcome {
  std::string file;
  bool ok = false;
  v1::AnalyzeResponse response;
  std::string code;  // gRPC status name on failure
  std::string error;
  bool normalized = false;  // normalize() ran: sample values are fractions of the type's maximum
  // Rectangles, labels or tiles were asked for: JSON has "parts" even when
  // there are none (every label ignored).
  bool parts = false;
  // --aggregate: the images merged into this answer, and the exact sums of
  // its channels then its summary, in decimal ("" where none), which may
  // pass sum_int's 64 bits.
  uint64_t images = 0;
  std::vector<std::string> exact_sums;
  // --json or --csv: the text, made where the answer came in (off the
  // thread that prints, which would otherwise bound a large pass).
  std::string rendered;
};

// ImageMagick's convention (--normalize): every value of the samples' scale
// (min, max, sums, mean, stddev, median, mode, percentiles, histogram range)
// divided by the sample type's largest value (255, 65535, 127, 32767);
// floats, already on their own scale, are left as they are.
void normalize(Outcome& o);

// A file of several series (AnalyzeResponse.other_series): one outcome a
// series answered, "FILE [series N]", each shown and merged as a file of
// its own; any other outcome as it is.
std::vector<Outcome> each_series(Outcome o);

std::string render_table(const Outcome& o, bool color);
// A part as the table and CSV name it: "roi X,Y,W,H", "label N", "tile C,R (X,Y,W,H)".
std::string part_name(const v1::PartStats& part);
// "plane 3": a plane of a stack in the table and the CSV's part column; with axes, "plane 3 (z 1, c 1, t 0)".
std::string plane_name(const v1::PlaneStats& plane, const v1::StackAxes* axes);
std::string render_json(const Outcome& o);  // one line, no newline

// Bytes as lower-case hex (a hash's).
inline std::string hex_of(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) out += kDigits[b >> 4], out += kDigits[b & 15];
  return out;
}
// RFC 4180 CSV: the header, then a row per channel (one row for a failed
// input), each line ending in a newline.
std::string render_csv_header();
std::string render_csv(const Outcome& o);

}  // namespace imgstat::client
