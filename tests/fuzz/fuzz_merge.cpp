// libFuzzer: answers of servers as imgstat-client --aggregate merges them.
// The bytes are two AnalyzeResponse messages (the first byte says where the
// second starts) merged under options the next byte picks; a server's
// answer is untrusted input to the client: any merge state, counts that do
// not add up or pass 2^64, floats of any value, must end in a refusal of
// that answer (add() false) or in merged answers, never a crash. What
// merged goes through a Partial into another aggregation (always taken), and
// the second message's bytes, read as a Partial, merge or are refused.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "aggregate.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  google::protobuf::SetLogHandler(nullptr);
  if (size < 2) return 0;
  const size_t cut = 2 + std::min<size_t>(data[0] * 8u, size - 2);
  imgstat::v1::Options options;
  options.add_statistics(imgstat::v1::STATISTIC_ALL);
  options.set_bins(1 + data[1] % 300);
  if (data[1] & 0x80) {
    options.mutable_range()->set_lo(-1000);
    options.mutable_range()->set_hi(70000);
  }
  options.add_percentiles(0);
  options.add_percentiles(50);
  options.add_percentiles(99.9);
  imgstat::fuzz::expect_clean([&] {
    imgstat::Aggregation merged(options);
    for (auto [from, to] : {std::pair<size_t, size_t>{2, cut}, {cut, size}, {2, cut}}) {
      imgstat::v1::AnalyzeResponse r;
      if (!r.ParseFromArray(data + from, static_cast<int>(to - from))) continue;
      std::string why;
      merged.add(r, &why);
    }
    for (const auto& o : imgstat::client::outcomes_of(merged)) (void)o.response.ByteSizeLong();
    (void)imgstat::client::notes_of(merged);
    // What merged, as a partial, merges into another aggregation whatever
    // it holds; the second message's bytes read as a partial (a file's: as
    // untrusted) merge or are refused.
    imgstat::Aggregation other(options);
    try {
      other.merge(merged.partial());
    } catch (const imgstat::Error& e) {
      std::fprintf(stderr, "a partial of merged answers was refused: %s\n", e.what());
      std::abort();
    }
    imgstat::v1::Partial p;
    if (p.ParseFromArray(data + cut, static_cast<int>(size - cut))) {
      try {
        other.merge(p);
      } catch (const imgstat::Error&) {
      }
    }
    for (const auto& o : imgstat::client::outcomes_of(other)) (void)o.response.ByteSizeLong();
  });
  return 0;
}
