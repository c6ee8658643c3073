// A GPU engine backed by the CPU engine: an image the GPU cannot take (out
// of its memory, a failed launch, a lost device) is computed on the CPU, the
// Result says "cpu", and the caller is told why. Bad input is not retried:
// the CPU would refuse it the same way.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "imgstat/engine.hpp"

namespace imgstat {

class FallbackEngine final : public Engine {
 public:
  FallbackEngine(std::unique_ptr<Engine> primary, std::unique_ptr<Engine> backup,
                 std::function<void(const std::string&)> on_fallback);

  EngineInfo info() const override;
  Result analyze(const ImageView& image, const StatsRequest& request) override;
  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override;

 private:
  template <class Fn>
  auto either(Fn&& fn);

  std::unique_ptr<Engine> primary_;
  std::unique_ptr<Engine> backup_;
  std::function<void(const std::string&)> on_fallback_;
  std::atomic<bool> lost_{false};
};

}  // namespace imgstat
