// --aggregate --duplicates: exact and near duplicates across a dataset from
// each image's hashes (STATISTIC_HASHES), grouped here as the answers come
// in from any number of servers.
//
// - exact: images whose decoded pixels hash equal (XXH3-128 over the
//   pixels, their size, channels and type: the same image in other files or
//   formats).
// - near: images whose perceptual hashes (imagehash's phash, 8-bit images)
//   are within `distance` bits of each other, joined transitively; each
//   exact group counts once, and a near group holds at least two different
//   images (pixels): re-encodings, resizes, small edits. distance 0: equal
//   phashes, cleanvision's near_duplicates.
//
// Pairs are found without comparing every pair: equal phashes first, then a
// multi-index over the distinct ones (split into distance + 1 blocks, two
// hashes within `distance` bits agree on at least one block), each
// candidate checked by popcount. Memory: a file name and 24 bytes an image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat::client {

class DuplicateFinder {
 public:
  static constexpr uint32_t kMaxDistance = 16;
  explicit DuplicateFinder(uint32_t distance) : distance_(distance) {}
  // One image's answer (its hashes, where it has them).
  void add(const std::string& file, const v1::AnalyzeResponse& r);
  bool empty() const { return images_.empty(); }
  struct Groups {
    std::vector<std::vector<std::string>> exact, near;  // each group's files, in the order they came
    uint64_t images = 0, with_phash = 0;
  };
  Groups groups() const;
  // {"dataset_duplicates": {...}} and the table's lines.
  std::string json() const;
  std::string table() const;

 private:
  struct Image {
    std::string file;
    std::string pixels;  // 16 bytes
    bool has_phash = false;
    uint64_t phash = 0;
  };
  uint32_t distance_;
  std::vector<Image> images_;
};

}  // namespace imgstat::client
