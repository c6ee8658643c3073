// The CLI's renderers: what JSON and CSV say is what the answer holds, to
// the last digit, however large an aggregate's exact sums grow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>

#include "render.hpp"

namespace imgstat::client {
namespace {

void fill_channel(v1::ChannelStats* c, const std::string& name, std::mt19937_64& rng, bool flt) {
  std::uniform_real_distribution<double> value(-1e6, 1e6);
  c->set_name(name);
  c->set_count(rng() % 1000000 + 1);
  c->set_min(flt ? value(rng) : static_cast<double>(rng() % 100));
  c->set_max(flt ? value(rng) : static_cast<double>(rng() % 65536));
  if (flt) c->set_sum(value(rng) * 1e3);
  else c->set_sum_int(static_cast<int64_t>(rng() >> 2));
  c->set_mean(value(rng) / 7);
  c->set_stddev(value(rng) / 3 + 1e6);
  c->set_median(flt ? value(rng) : static_cast<double>(rng() % 256));
  c->set_mode(flt ? value(rng) : static_cast<double>(rng() % 256));
  c->set_entropy(value(rng) / 1e5);
  c->set_bin_error(0);
  for (double p : {5.0, 50.0, 99.9}) {
    v1::Percentile* q = c->add_percentiles();
    q->set_p(p);
    q->set_value(flt ? value(rng) : static_cast<double>(rng() % 256));
  }
  v1::Histogram* h = c->mutable_histogram();
  for (int i = 0; i < 17; ++i) h->add_counts(rng() >> (i % 40));  // up to 64-bit counts
  h->set_lo(0);
  h->set_hi(17);
  h->set_underflow(rng() % 9);
  h->set_overflow(rng() % 9);
  if (flt) {
    c->set_nan_count(rng() % 5);
    c->set_posinf_count(rng() % 5);
    c->set_neginf_count(rng() % 5);
  }
}

Outcome answer(bool flt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Outcome o;
  o.file = "dir, with \"quotes\"/shot.tif";
  o.ok = true;
  v1::AnalyzeResponse& r = o.response;
  r.set_format("TIFF");
  r.set_width(rng() % 70000 + 1);
  r.set_height(rng() % 70000 + 1);
  r.set_channel_count(3);
  r.set_sample_type(flt ? v1::SAMPLE_TYPE_FLOAT32 : v1::SAMPLE_TYPE_UINT16);
  r.set_engine("cpu");
  for (const char* name : {"R", "G", "B"}) fill_channel(r.add_channels(), name, rng, flt);
  fill_channel(r.mutable_summary(), "all", rng, flt);
  return o;
}

void expect_channel(const nlohmann::json& j, const v1::ChannelStats& c, bool flt) {
  EXPECT_EQ(j["name"], c.name());
  EXPECT_EQ(j["count"].get<uint64_t>(), c.count());
  EXPECT_EQ(j["min"].get<double>(), c.min());
  EXPECT_EQ(j["max"].get<double>(), c.max());
  if (flt) EXPECT_EQ(j["sum"].get<double>(), c.sum());
  else EXPECT_EQ(j["sum"].get<int64_t>(), c.sum_int());
  EXPECT_EQ(j["mean"].get<double>(), c.mean());  // doubles round-trip: every bit
  EXPECT_EQ(j["stddev"].get<double>(), c.stddev());
  EXPECT_EQ(j["median"].get<double>(), c.median());
  ASSERT_EQ(j["percentiles"].size(), static_cast<size_t>(c.percentiles_size()));
  for (int i = 0; i < c.percentiles_size(); ++i) {
    EXPECT_EQ(j["percentiles"][i]["p"].get<double>(), c.percentiles(i).p());
    EXPECT_EQ(j["percentiles"][i]["value"].get<double>(), c.percentiles(i).value());
  }
  ASSERT_EQ(j["histogram"]["counts"].size(), static_cast<size_t>(c.histogram().counts_size()));
  for (int i = 0; i < c.histogram().counts_size(); ++i)
    EXPECT_EQ(j["histogram"]["counts"][i].get<uint64_t>(), c.histogram().counts(i));
  EXPECT_EQ(j["histogram"]["underflow"].get<uint64_t>(), c.histogram().underflow());
  EXPECT_EQ(j.contains("nan_count"), flt);
  if (flt) EXPECT_EQ(j["inf_count"].get<uint64_t>(), c.posinf_count() + c.neginf_count());
}

TEST(Render, JsonHoldsEveryValueOfTheAnswerToTheLastBit) {
  for (bool flt : {false, true})
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const Outcome o = answer(flt, seed);
      const nlohmann::json j = nlohmann::json::parse(render_json(o));
      EXPECT_EQ(j["file"], o.file);
      EXPECT_EQ(j["width"].get<uint64_t>(), o.response.width());
      ASSERT_EQ(j["channels"].size(), 3u);
      for (int c = 0; c < 3; ++c) expect_channel(j["channels"][c], o.response.channels(c), flt);
      expect_channel(j["summary"], o.response.summary(), flt);
    }
}

TEST(Render, AggregateSumsPastSixtyFourBitsAreWrittenAsTheirDigits) {
  Outcome o = answer(false, 7);
  o.images = 3;
  o.exact_sums = {"36893488147419103232", "-9223372036854775809", "", "123"};  // 2^65, -2^63 - 1
  const std::string text = render_json(o);
  EXPECT_NE(text.find("\"sum\":36893488147419103232"), std::string::npos) << text;
  EXPECT_NE(text.find("\"sum\":-9223372036854775809"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(text);  // still JSON
  EXPECT_EQ(j["images"], 3);
  EXPECT_EQ(j["channels"][2]["sum"].get<int64_t>(), o.response.channels(2).sum_int());  // none given: its own
  EXPECT_EQ(j["summary"]["sum"].get<int64_t>(), 123);
  const std::string csv = render_csv(o);
  EXPECT_NE(csv.find(",36893488147419103232,"), std::string::npos) << csv;
}

TEST(Render, CsvHasARowOfEveryColumnForEachChannelAndPart) {
  Outcome o = answer(true, 3);
  for (uint32_t t = 0; t < 2; ++t) {
    v1::PartStats* p = o.response.add_parts();
    p->mutable_tile()->set_column(t);
    p->mutable_roi()->set_width(5);
    std::mt19937_64 rng(t);
    fill_channel(p->add_channels(), "R", rng, true);
  }
  const std::string header = render_csv_header();
  const auto columns = std::count(header.begin(), header.end(), ',') + 1;
  const std::string csv = render_csv(o);
  // The file's name is quoted (a comma, quotes): count the fields outside quotes.
  int rows = 0;
  long fields = 1;
  bool quoted = false;
  for (char ch : csv) {
    if (ch == '"') quoted = !quoted;
    else if (!quoted && ch == ',') ++fields;
    else if (!quoted && ch == '\n') {
      EXPECT_EQ(fields, columns) << "row " << rows;
      ++rows;
      fields = 1;
    }
  }
  EXPECT_EQ(rows, 3 + 1 + 2);  // channels, the summary, the parts' channels
  const nlohmann::json j = nlohmann::json::parse(render_json(o));
  ASSERT_EQ(j["parts"].size(), 2u);
  EXPECT_EQ(j["parts"][1]["tile"], nlohmann::json({1, 0}));
  EXPECT_EQ(j["parts"][1]["roi"], nlohmann::json({0, 0, 5, 0}));
}

TEST(Render, TheTableNamesEveryChannelAndItsCount) {
  const Outcome o = answer(false, 11);
  const std::string table = render_table(o, false);
  for (const v1::ChannelStats& c : o.response.channels())
    EXPECT_NE(table.find("  " + c.name() + " "), std::string::npos) << table;
  EXPECT_NE(table.find(std::to_string(o.response.channels(1).count())), std::string::npos);
  EXPECT_EQ(table.find("\033["), std::string::npos);  // no colour asked for
  EXPECT_NE(render_table(o, true).find("\033[1m"), std::string::npos);
}

}  // namespace
}  // namespace imgstat::client
