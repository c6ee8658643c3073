#include "common/fallback_engine.hpp"

namespace imgstat {

FallbackEngine::FallbackEngine(std::unique_ptr<Engine> primary, std::unique_ptr<Engine> backup,
                               std::function<void(const std::string&)> on_fallback)
    : primary_(std::move(primary)), backup_(std::move(backup)), on_fallback_(std::move(on_fallback)) {}

EngineInfo FallbackEngine::info() const {
  EngineInfo i = lost_ ? backup_->info() : primary_->info();
  i.threads = backup_->info().threads;
  return i;
}

template <class Fn>
auto FallbackEngine::either(Fn&& fn) {
  if (!lost_) {
    try {
      return fn(*primary_);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInvalidArgument) throw;
      if (!primary_->usable() && !lost_.exchange(true)) {
        if (on_fallback_) on_fallback_(std::string("the GPU is no longer usable (") + e.what() + "): the CPU engine takes every image from now on");
      } else if (on_fallback_) {
        on_fallback_(std::string("GPU could not take this image (") + e.what() + "): computed on the CPU");
      }
    }
  }
  return fn(*backup_);
}

Result FallbackEngine::analyze(const ImageView& image, const StatsRequest& request) {
  return either([&](Engine& e) { return e.analyze(image, request); });
}

std::unique_ptr<StreamAnalysis> FallbackEngine::open_stream(const Layout& layout, const StatsRequest& request) {
  return either([&](Engine& e) { return e.open_stream(layout, request); });
}

}  // namespace imgstat
