// Positions, unique colours and joint histograms, counted beside an
// analysis's main pass (analysis.hpp), per thread, merged at the end.
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <atomic>

#include "cpu/analysis.hpp"
#include "cpu/extras.hpp"
#include "cpu/joint_counter.hpp"

namespace imgstat::cpu {
namespace {

template <class T, uint32_t C>
class ExtrasOf final : public Extras {
 public:
  explicit ExtrasOf(const StatsRequest& request)
      : counters_([request] { return ExtrasCounter<T, C>(request.positions, request.unique_colors && sizeof(T) == 1); }) {}

  void add(const std::vector<Piece>& pieces) override {
    auto body = [&](size_t i) { counters_.local().add(pieces[i]); };
    if (pieces.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, pieces.size(), body);
  }

  void add_to(Partial& partial) override {
    for (ExtrasCounter<T, C>& counter : counters_) {
      for (uint32_t c = 0; c < C; ++c) merge(partial.channels[c].extremes, counter.extremes(c));
      const std::vector<uint64_t>& colors = counter.colors();
      if (colors.empty()) continue;
      if (partial.colors.empty()) partial.colors.assign(colors.size(), 0);
      for (size_t i = 0; i < colors.size(); ++i) partial.colors[i] |= colors[i];
    }
  }

 private:
  tbb::enumerable_thread_specific<ExtrasCounter<T, C>> counters_;
};

template <uint32_t C>
std::unique_ptr<Extras> make_extras_c(SampleType type, const StatsRequest& request) {
  switch (type) {
    case SampleType::kUint8: return std::make_unique<ExtrasOf<uint8_t, C>>(request);
    case SampleType::kInt8: return std::make_unique<ExtrasOf<int8_t, C>>(request);
    case SampleType::kUint16: return std::make_unique<ExtrasOf<uint16_t, C>>(request);
    case SampleType::kInt16: return std::make_unique<ExtrasOf<int16_t, C>>(request);
    case SampleType::kFloat32: return std::make_unique<ExtrasOf<float, C>>(request);
    case SampleType::kFloat64: return std::make_unique<ExtrasOf<double, C>>(request);
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<Extras> make_extras(const Layout& layout, const StatsRequest& request) {
  if (!request.positions && !(request.unique_colors && sample_size(layout.type) == 1)) return nullptr;
  switch (layout.channels) {
    case 1: return make_extras_c<1>(layout.type, request);
    case 2: return make_extras_c<2>(layout.type, request);
    case 3: return make_extras_c<3>(layout.type, request);
    case 4: return make_extras_c<4>(layout.type, request);
  }
  return nullptr;
}

template <class T, uint32_t C>
class JointExtras final : public Extras {
 public:
  JointExtras(const JointSpec& spec, SampleType type) : plan_(spec, type) {
    if (plan_.bins() > kJointPrivateBins) {
      shared_ = std::make_unique<std::atomic<uint64_t>[]>(plan_.bins());
      for (uint64_t i = 0; i < plan_.bins(); ++i) shared_[i].store(0, std::memory_order_relaxed);
    }
    counters_ = std::make_unique<tbb::enumerable_thread_specific<JointCounter<T, C>>>(
        [this] { return JointCounter<T, C>(plan_, shared_.get()); });
  }

  void add(const std::vector<Piece>& pieces) override {
    auto body = [&](size_t i) { counters_->local().add(pieces[i]); };
    if (pieces.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, pieces.size(), body);
  }

  void add_to(Partial& partial) override {
    partial.joint.assign(plan_.bins(), 0);
    for (JointCounter<T, C>& counter : *counters_) counter.add_to(partial);
    if (shared_)
      for (uint64_t i = 0; i < plan_.bins(); ++i) partial.joint[i] += shared_[i].load(std::memory_order_relaxed);
  }

 private:
  JointPlan plan_;
  std::unique_ptr<std::atomic<uint64_t>[]> shared_;
  std::unique_ptr<tbb::enumerable_thread_specific<JointCounter<T, C>>> counters_;
};

template <uint32_t C>
std::unique_ptr<Extras> make_joint_c(SampleType type, const JointSpec& spec) {
  switch (type) {
    case SampleType::kUint8: return std::make_unique<JointExtras<uint8_t, C>>(spec, type);
    case SampleType::kInt8: return std::make_unique<JointExtras<int8_t, C>>(spec, type);
    case SampleType::kUint16: return std::make_unique<JointExtras<uint16_t, C>>(spec, type);
    case SampleType::kInt16: return std::make_unique<JointExtras<int16_t, C>>(spec, type);
    case SampleType::kFloat32: return std::make_unique<JointExtras<float, C>>(spec, type);
    case SampleType::kFloat64: return std::make_unique<JointExtras<double, C>>(spec, type);
  }
  return nullptr;
}

// request: measured_request()'s, its ranges filled in.
std::unique_ptr<Extras> make_joint(const Layout& layout, const StatsRequest& request) {
  if (!request.joint.axes) return nullptr;
  switch (layout.channels) {
    case 1: return make_joint_c<1>(layout.type, request.joint);
    case 2: return make_joint_c<2>(layout.type, request.joint);
    case 3: return make_joint_c<3>(layout.type, request.joint);
    default: return make_joint_c<4>(layout.type, request.joint);
  }
}

}  // namespace imgstat::cpu
