#include <mutex>

#include "decode/jpeg/gpu.hpp"

namespace imgstat {
namespace {

class OnFirstUse final : public GpuJpegDecoder {
 public:
  explicit OnFirstUse(const GpuJpegOptions& options) : options_(options) {}

  std::unique_ptr<Ticket> announce() override {
    GpuJpegDecoder* d = opened();
    return d ? d->announce() : std::make_unique<Ticket>();
  }

  GpuDecodedImage decode(Ticket& ticket, const uint8_t* data, size_t size) override {
    GpuJpegDecoder* d = opened();
    if (!d) fail(ErrorCode::kUnavailable, "no GPU JPEG decoder: " + why_not_);
    return d->decode(ticket, data, size);
  }

  std::string description() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (decoder_) return decoder_->description();
    return why_not_.empty() ? "nvJPEG, opened by the first JPEG" : "none: " + why_not_;
  }

 private:
  GpuJpegDecoder* opened() {
    std::call_once(once_, [this] {
      std::string why;
      std::unique_ptr<GpuJpegDecoder> d = open_gpu_jpeg_decoder(options_, &why);
      std::lock_guard<std::mutex> lock(mu_);
      decoder_ = std::move(d);
      why_not_ = why.empty() && !decoder_ ? "it could not be opened" : why;
    });
    return decoder_.get();
  }

  GpuJpegOptions options_;
  std::once_flag once_;
  mutable std::mutex mu_;
  std::unique_ptr<GpuJpegDecoder> decoder_;
  std::string why_not_;
};

}  // namespace

std::unique_ptr<GpuJpegDecoder> open_gpu_jpeg_decoder_on_first_use(const GpuJpegOptions& options) {
  return std::make_unique<OnFirstUse>(options);
}

}  // namespace imgstat
