#include "imgstat/placement.hpp"

#include <limits>

namespace imgstat {

Placement::Placement(std::vector<GpuStatus> slots, std::function<void(const std::string&)> told)
    : slots_(slots.size()), told_(std::move(told)) {
  for (size_t i = 0; i < slots.size(); ++i) slots_[i].status = std::move(slots[i]);
}

Placement::Hold::Hold(Placement* owner, size_t slot) : owner_(owner), slot_(slot) {}

Placement::Hold::Hold(Hold&& o) noexcept : owner_(o.owner_), slot_(o.slot_) { o.owner_ = nullptr; }

Placement::Hold& Placement::Hold::operator=(Hold&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = o.owner_;
    slot_ = o.slot_;
    o.owner_ = nullptr;
  }
  return *this;
}

Placement::Hold::~Hold() { release(); }

void Placement::Hold::release() {
  if (owner_) --owner_->slots_[slot_].in_flight;
  owner_ = nullptr;
}

Placement::Hold Placement::take(const std::function<bool(size_t)>& allowed) {
  const size_t n = slots_.size();
  if (n == 0) return {};
  // Start at a slot that moves on with every call, so that equal loads
  // alternate instead of piling on the first.
  const size_t first = static_cast<size_t>(turn_++ % n);
  size_t best = n;
  uint32_t least = std::numeric_limits<uint32_t>::max();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    if (slots_[i].out || (allowed && !allowed(i))) continue;
    const uint32_t load = slots_[i].in_flight.load();
    if (load < least) {
      least = load;
      best = i;
    }
  }
  if (best == n) return {};
  ++slots_[best].in_flight;
  return Hold(this, best);
}

Placement::Hold Placement::hold(size_t slot) {
  ++slots_[slot].in_flight;
  return Hold(this, slot);
}

void Placement::take_out(size_t slot, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slots_[slot].out.exchange(true)) return;
    slots_[slot].status.out_of_service_reason = why;
  }
  if (told_)
    told_("GPU " + std::to_string(slots_[slot].status.device) + " (slot " + std::to_string(slot) +
          ") taken out of service: " + why + "; its work goes to the other GPUs, or to the CPU when none is left");
}

std::vector<GpuStatus> Placement::status() const {
  std::vector<GpuStatus> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Slot& s : slots_) {
    GpuStatus g = s.status;
    g.in_service = !s.out;
    g.images = s.images;
    g.in_flight = s.in_flight;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace imgstat
