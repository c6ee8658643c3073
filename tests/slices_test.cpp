// --aggregate's slices of a run of files (client/slices.hpp): every file in
// exactly one, in order, within the bounds, and shrinking so the calls end
// together.
#include "slices.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace imgstat::client {
namespace {

// Every file once, in order; the bounds kept; no slice larger than one before it
// where the bytes do not bind.
void expect_sound(const std::vector<uint64_t>& sizes, const SliceBounds& b, const std::vector<FileSlice>& slices) {
  size_t next = 0;
  for (size_t k = 0; k < slices.size(); ++k) {
    const FileSlice& s = slices[k];
    ASSERT_EQ(s.first, next) << "slice " << k;
    ASSERT_GE(s.count, 1u) << "slice " << k;
    uint64_t bytes = 0;
    for (size_t i = s.first; i < s.first + s.count; ++i) bytes += sizes[i];
    EXPECT_LE(s.count, std::max<size_t>(1, b.most_files)) << "slice " << k;
    if (s.count > 1) EXPECT_LE(bytes, b.bytes) << "slice " << k;
    const bool last = k + 1 == slices.size();
    const bool bytes_bound = s.first + s.count < sizes.size() && bytes + sizes[s.first + s.count] > b.bytes;
    if (!last && !bytes_bound) EXPECT_GE(s.count, std::min(b.least_files, b.most_files)) << "slice " << k;
    next += s.count;
  }
  EXPECT_EQ(next, sizes.size());
}

TEST(GuidedSlices, ShrinkToTheLeastSoTheCallsEndTogether) {
  const std::vector<uint64_t> sizes(16000, 60000);
  const size_t calls = 16;
  const SliceBounds b{2 * calls, 16, 1024, uint64_t{64} << 20};
  const std::vector<FileSlice> slices = guided_slices(sizes, b);
  expect_sound(sizes, b, slices);
  EXPECT_EQ(slices.front().count, 16000u / 32);
  for (size_t k = 1; k < slices.size(); ++k) EXPECT_LE(slices[k].count, slices[k - 1].count) << "slice " << k;
  // The last slice each call takes holds the least: the calls end within one short slice of each other.
  // (the very last the few left over).
  for (size_t k = slices.size() - calls; k + 1 < slices.size(); ++k) EXPECT_EQ(slices[k].count, 16u) << "slice " << k;
  EXPECT_LE(slices.back().count, 16u);
  // And the pass is not cut finer than it needs: about share x ln(n / (share x least)) + the tail's.
  EXPECT_LT(slices.size(), 200u);
}

TEST(GuidedSlices, BytesAndFileBoundsHold) {
  // A file larger than the bound goes alone; files of no bytes count as files.
  std::vector<uint64_t> sizes = {10, 0, 0, 500, 10, 10, 10, 10, 0, 10, 10, 10, 10, 10};
  const SliceBounds b{1, 2, 4, 35};
  const std::vector<FileSlice> slices = guided_slices(sizes, b);
  expect_sound(sizes, b, slices);
  ASSERT_GE(slices.size(), 2u);
  EXPECT_EQ(slices[0].first, 0u);
  EXPECT_EQ(slices[0].count, 3u);  // 10, 0, 0: the 500 would pass the bytes
  EXPECT_EQ(slices[1].first, 3u);
  EXPECT_EQ(slices[1].count, 1u);  // the 500 alone
  EXPECT_TRUE(guided_slices(std::vector<uint64_t>{}, b).empty());
  // No byte room: one file a slice.
  const std::vector<FileSlice> ones = guided_slices(std::vector<uint64_t>{7, 7, 7}, SliceBounds{1, 4, 8, 0});
  ASSERT_EQ(ones.size(), 3u);
  for (const FileSlice& s : ones) EXPECT_EQ(s.count, 1u);
}

TEST(GuidedSlices, RandomSizesAndBounds) {
  std::mt19937_64 rng(52);
  for (int round = 0; round < 500; ++round) {
    std::vector<uint64_t> sizes(rng() % 3000);
    for (uint64_t& s : sizes) s = rng() % 4 == 0 ? rng() % 5000000 : rng() % 200000;
    const uint64_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
    SliceBounds b{1 + rng() % 130, 1 + rng() % 40, 1 + rng() % 1100, largest + rng() % (uint64_t{64} << 20)};
    SCOPED_TRACE(::testing::Message() << "round " << round << ", " << sizes.size() << " files, share " << b.share
                                      << ", least " << b.least_files << ", most " << b.most_files << ", bytes "
                                      << b.bytes);
    expect_sound(sizes, b, guided_slices(sizes, b));
  }
}

}  // namespace
}  // namespace imgstat::client
