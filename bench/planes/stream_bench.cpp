// imgstat-stream-bench: where a stack's time goes once it is decoded. A
// stack's pixels reach an engine as a stream fed a band at a time (4 MiB,
// as the banded decoders hand them); this feeds 1 GiB of uint16 pixels from
// host memory that way to each engine and to the pieces of the served CUDA
// engine (the bare CUDA stream, the CPU-backed one that keeps and
// checkpoints, with its checkpoint far apart), against copying the same
// bytes on every core (what reading them costs: the ceiling) and the CUDA
// engine's whole-image call. Medians of --repeat runs; the table comes last.
//
//   imgstat-stream-bench [--megabytes N] [--band-kib K] [--repeat R]
#include <tbb/parallel_for.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/fallback_engine.hpp"
#include "imgstat/engine.hpp"
#include "table.hpp"

namespace {

using namespace imgstat;

bench::Table g_table(44, 40);

std::string rate(uint64_t bytes, double ms, double ceiling_ms) {
  char s[96];
  std::snprintf(s, sizeof s, "%.1f GB/s, %.2fx the ceiling", bytes / ms / 1e6, ceiling_ms / ms);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t megabytes = 1024, band_kib = 4096;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--megabytes") megabytes = std::stoull(v);
    if (k == "--band-kib") band_kib = std::stoull(v);
    if (k == "--repeat") repeat = std::stoi(v);
  }
  const uint64_t bytes = megabytes << 20, band = band_kib << 10;
  const Layout layout{4096, bytes / (4096 * 2), 1, SampleType::kUint16, 0};
  std::vector<uint8_t> pixels(layout.pixels() * 2);
  tbb::parallel_for(uint64_t{0}, uint64_t{pixels.size() >> 20}, [&](uint64_t m) {
    std::mt19937_64 rng(m);
    for (uint64_t i = m << 20; i < std::min<uint64_t>(pixels.size(), (m + 1) << 20); i += 8) {
      const uint64_t v = rng() & 0x0fff0fff0fff0fffull;  // 12-bit samples, a camera's
      std::memcpy(&pixels[i], &v, 8);
    }
  });
  StatsRequest request;  // the default statistics of a stack: min, max, sum, stddev, histogram
  request.histogram = true;
  std::printf("%llu MiB of uint16 in %llu KiB bands\n", static_cast<unsigned long long>(megabytes),
              static_cast<unsigned long long>(band_kib));

  // The ceiling: every band copied on every core into a buffer, as a decoder
  // reading them from the page cache writes them.
  std::vector<uint8_t> out(band);
  const double ceiling = bench::median_ms(repeat, [&] {
    for (uint64_t at = 0; at < bytes; at += band) {
      const uint64_t n = std::min(band, bytes - at);
      tbb::parallel_for(uint64_t{0}, (n + (256 << 10) - 1) >> 18, [&](uint64_t k) {
        const uint64_t from = k << 18;
        std::memcpy(out.data() + from, pixels.data() + at + from, std::min<uint64_t>(256 << 10, n - from));
      });
    }
  });
  g_table.row("1 GiB of bands copied on every core", "the ceiling", ceiling, rate(bytes, ceiling, ceiling));

  auto stream = [&](Engine& e) {
    return bench::median_ms(repeat, [&] {
      auto s = e.open_stream(layout, request);
      for (uint64_t at = 0; at < bytes; at += band) s->feed(pixels.data() + at, std::min(band, bytes - at));
      s->finish();
    });
  };
  auto cpu = make_cpu_engine();
  const double cpu_ms = stream(*cpu);
  g_table.row("stream, bands from host memory", "CPU engine", cpu_ms, rate(bytes, cpu_ms, ceiling));

  EngineOptions o;
  std::string why;
  auto bare = make_cuda_engine(o, &why);
  if (!bare) {
    std::printf("no CUDA engine: %s\n", why.c_str());
    g_table.print();
    return 0;
  }
  const double bare_ms = stream(*bare);
  g_table.row("stream, bands from host memory", "CUDA engine alone", bare_ms, rate(bytes, bare_ms, ceiling));
  const double whole = bench::median_ms(repeat, [&] { bare->analyze(ImageView{pixels.data(), layout}, request); });
  g_table.row("whole image from host memory", "CUDA engine alone", whole, rate(bytes, whole, ceiling));

  for (uint64_t checkpoint : {uint64_t{32} << 20, uint64_t{256} << 20}) {
    FallbackTuning t;
    t.checkpoint_bytes = checkpoint;
    FallbackEngine served(make_cuda_engine(o, &why), make_cpu_engine(), {}, t);
    const double ms = stream(served);
    g_table.row("stream, bands from host memory",
                "CUDA backed by CPU, checkpoint " + std::to_string(checkpoint >> 20) + " MiB", ms, rate(bytes, ms, ceiling));
  }
  auto made = make_engine([] {
    EngineOptions e;
    e.kind = EngineKind::kCuda;
    return e;
  }());
  const double made_ms = stream(*made);
  g_table.row("stream, bands from host memory", "make_engine(kCuda), as served", made_ms, rate(bytes, made_ms, ceiling));
  g_table.print();
}
