// How --aggregate cuts a run of files into the slices its Aggregate calls
// carry (on_server.cpp): contiguous, in input order, shrinking as the pass
// goes (OpenMP's schedule(guided)), so that the calls, each taking the next
// slice when its last one is answered, end about together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace imgstat::client {

struct FileSlice {
  size_t first = 0, count = 0;
};

struct SliceBounds {
  size_t share = 1;        // each slice about 1/share of the files left
  size_t least_files = 1;  // files of a slice, at least (where that many are left)
  size_t most_files = 1;   // and at most
  uint64_t bytes = 0;      // bytes of a slice, at most (one file at least, whatever its size)
};

std::vector<FileSlice> guided_slices(std::span<const uint64_t> sizes, const SliceBounds& bounds);

}  // namespace imgstat::client
