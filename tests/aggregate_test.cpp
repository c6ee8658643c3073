// The client's --aggregate merge of servers' answers: answers made by the
// request core merge as one analysis of all their pixels would give, and an
// answer a server got wrong or a peer forged is refused with nothing of it kept.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "aggregate.hpp"
#include "core/analyzer.hpp"
#include "raw_request.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

v1::Options joint_options() {
  v1::Options o;
  o.add_statistics(v1::STATISTIC_ALL);
  v1::JointHistogramOptions* j = o.mutable_joint();
  j->add_channels(0);
  j->add_channels(2);
  j->add_bins(16);
  return o;
}

class AggregateJoint : public ::testing::Test {
 protected:
  AggregateJoint() : analyzer_(make_cpu_engine(2), Limits{}), options_(joint_options()), merged_(options_) {}
  v1::AnalyzeResponse answer(const TestImage& img) {
    v1::AnalyzeRequest r = raw_request(img);
    *r.mutable_options() = merged_.part_options();
    return analyzer_.analyze(r);
  }
  Analyzer analyzer_;
  v1::Options options_;
  Aggregation merged_;
};

// Two files' joint histograms add bin by bin: equal to the joint histogram
// of both images' pixels in one (stacked) image.
TEST_F(AggregateJoint, JointHistogramsAddAsOneImageOfBothWould) {
  std::mt19937_64 rng(7);
  const TestImage a = random_image(rng, 37, 11, 3, SampleType::kUint8, 0, 0);
  const TestImage b = random_image(rng, 37, 5, 3, SampleType::kUint8, 0, 0);
  TestImage both = random_image(rng, 37, 16, 3, SampleType::kUint8, 0, 0);
  uint8_t* rows = const_cast<uint8_t*>(static_cast<const uint8_t*>(both.view.data));  // its own storage
  std::memcpy(rows, a.view.data, 37 * 11 * 3);
  std::memcpy(rows + 37 * 11 * 3, b.view.data, 37 * 5 * 3);
  std::string why;
  ASSERT_TRUE(merged_.add(answer(a), &why)) << why;
  ASSERT_TRUE(merged_.add(answer(b), &why)) << why;
  v1::AnalyzeRequest one = raw_request(both);
  *one.mutable_options() = options_;
  const v1::AnalyzeResponse want = analyzer_.analyze(one);
  const auto outcomes = client::outcomes_of(merged_);
  ASSERT_EQ(outcomes.size(), 1u);
  const v1::JointHistogram& got = outcomes[0].response.joint();
  ASSERT_EQ(got.bins_size(), 2);
  std::vector<uint64_t> dense(16 * 16, 0), expected(16 * 16, 0);
  for (int i = 0; i < got.counts_size(); ++i) dense[i] += got.counts(i);
  for (int i = 0; i < got.nonzero_index_size(); ++i) dense[got.nonzero_index(i)] += got.nonzero_count(i);
  for (int i = 0; i < want.joint().counts_size(); ++i) expected[i] += want.joint().counts(i);
  for (int i = 0; i < want.joint().nonzero_index_size(); ++i)
    expected[want.joint().nonzero_index(i)] += want.joint().nonzero_count(i);
  EXPECT_EQ(dense, expected);
  EXPECT_EQ(outcomes[0].response.channels(0).sum(), want.channels(0).sum());
}

// Each forged joint histogram is refused naming it, and the merged answer
// stays that of the honest file alone (its channels were not added either).
TEST_F(AggregateJoint, ForgedJointHistogramsAreRefusedWithNothingKept) {
  std::mt19937_64 rng(8);
  const TestImage a = random_image(rng, 29, 7, 3, SampleType::kUint8, 0, 0);
  const v1::AnalyzeResponse honest = answer(a);
  ASSERT_TRUE(honest.has_joint());
  std::vector<std::pair<std::string, std::function<void(v1::JointHistogram&)>>> forgeries = {
      {"more counts than bins", [](v1::JointHistogram& h) { h.add_counts(1); }},
      {"a bin past its bins", [](v1::JointHistogram& h) { h.add_nonzero_index(256); h.add_nonzero_count(1); }},
      {"indices without counts", [](v1::JointHistogram& h) { h.add_nonzero_index(3); }},
      {"2^32 bins an axis", [](v1::JointHistogram& h) { h.set_bins(0, 0xffffffffu); }},
      {"axes whose product wraps", [](v1::JointHistogram& h) { h.set_bins(0, 1u << 31); h.set_bins(1, 1u << 31); h.add_bins(4); }},
      {"no bins", [](v1::JointHistogram& h) { h.set_bins(0, 0); }},
      {"one axis", [](v1::JointHistogram& h) { h.clear_bins(); h.add_bins(256); }},
      {"four axes", [](v1::JointHistogram& h) { h.add_bins(1); h.add_bins(1); }},
      {"another shape", [](v1::JointHistogram& h) { h.set_bins(0, 8); h.set_bins(1, 32); }},
  };
  std::string why;
  ASSERT_TRUE(merged_.add(honest, &why)) << why;
  for (auto& [name, forge] : forgeries) {
    SCOPED_TRACE(name);
    v1::AnalyzeResponse r = honest;
    if (r.joint().counts_size() == 0 && name == "more counts than bins")
      for (int i = 0; i < 256; ++i) r.mutable_joint()->add_counts(0);
    forge(*r.mutable_joint());
    why.clear();
    EXPECT_FALSE(merged_.add(r, &why));
    EXPECT_NE(why.find("joint histogram"), std::string::npos) << why;
  }
  const auto outcomes = client::outcomes_of(merged_);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].images, 1u);
  EXPECT_EQ(outcomes[0].response.channels(0).count(), 29u * 7u);
}

}  // namespace
}  // namespace imgstat::testing
