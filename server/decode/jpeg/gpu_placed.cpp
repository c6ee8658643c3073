// One GPU JPEG decoder per GPU slot as one (make_placed_gpu_jpeg_decoder):
// the slot is chosen when a JPEG is announced, so that the batch it joins
// is that GPU's, and held until the decode returns; the decoded pixels name
// their GPU, where the engine then computes them.
#include "decode/jpeg/gpu.hpp"

namespace imgstat {
namespace {

class PlacedTicket final : public GpuJpegDecoder::Ticket {
 public:
  Placement::Hold hold;
  std::unique_ptr<GpuJpegDecoder::Ticket> inner;
};

class PlacedGpuJpeg final : public GpuJpegDecoder {
 public:
  PlacedGpuJpeg(std::vector<std::unique_ptr<GpuJpegDecoder>> decoders, std::shared_ptr<Placement> placement)
      : decoders_(std::move(decoders)), placement_(std::move(placement)) {
    if (decoders_.size() != placement_->size()) fail(ErrorCode::kInternal, "a placed decoder needs one decoder per slot");
  }

  std::unique_ptr<Ticket> announce() override {
    auto t = std::make_unique<PlacedTicket>();
    t->hold = placement_->take([this](size_t s) { return decoders_[s] != nullptr; });
    if (t->hold) t->inner = decoders_[t->hold.slot()]->announce();
    return t;
  }

  GpuDecodedImage decode(Ticket& ticket, const uint8_t* data, size_t size) override {
    auto& t = static_cast<PlacedTicket&>(ticket);
    if (!t.hold) fail(ErrorCode::kUnavailable, "no GPU is in service to decode JPEG");
    GpuDecodedImage image = decoders_[t.hold.slot()]->decode(*t.inner, data, size);
    image.view.device = placement_->device(t.hold.slot());
    return image;
  }

  std::string description() const override {
    const std::string first = decoders_.front() ? decoders_.front()->description() : "none";
    size_t open = 0;
    for (const auto& d : decoders_) open += d != nullptr;
    return decoders_.size() == 1 ? first : first + ", on " + std::to_string(open) + " GPUs";
  }

 private:
  std::vector<std::unique_ptr<GpuJpegDecoder>> decoders_;
  std::shared_ptr<Placement> placement_;
};

}  // namespace

std::unique_ptr<GpuJpegDecoder> make_placed_gpu_jpeg_decoder(std::vector<std::unique_ptr<GpuJpegDecoder>> decoders,
                                                             std::shared_ptr<Placement> placement) {
  return std::make_unique<PlacedGpuJpeg>(std::move(decoders), std::move(placement));
}

}  // namespace imgstat
