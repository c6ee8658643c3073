#include "slices.hpp"

#include <algorithm>

namespace imgstat::client {

std::vector<FileSlice> guided_slices(std::span<const uint64_t> sizes, const SliceBounds& bounds) {
  const size_t most = std::max<size_t>(1, bounds.most_files);
  const size_t least = std::clamp<size_t>(bounds.least_files, 1, most);
  const size_t share = std::max<size_t>(1, bounds.share);
  std::vector<FileSlice> out;
  size_t i = 0;
  while (i < sizes.size()) {
    const size_t want = std::clamp<size_t>((sizes.size() - i) / share, least, most);
    FileSlice at{i, 0};
    uint64_t held = 0;
    while (i < sizes.size() &&
           (at.count == 0 || (at.count < want && held <= bounds.bytes && sizes[i] <= bounds.bytes - held))) {
      held += sizes[i++];
      ++at.count;
    }
    out.push_back(at);
  }
  return out;
}

}  // namespace imgstat::client
