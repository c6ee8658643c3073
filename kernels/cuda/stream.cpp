#include <memory>

#include "common/pieces.hpp"
#include "cuda/analysis.hpp"
#include "cuda/stream.hpp"
#include "cuda/tuning/host.hpp"

namespace imgstat::cuda {
namespace {

// A stream computes in sessions: one takes a workspace when bytes arrive
// and gives it back when the caller pauses, what it counted merged into the
// stream's partial on the host. A stream waiting on its client holds no
// workspace, pinned slot or device buffer, so stalled callers neither make
// the server commit memory nor keep other calls off the GPU. Floats binned
// over their own range keep their pixels on the device, as they arrive,
// for the last session to count.
class CudaStream final : public CheckpointStream {
 public:
  CudaStream(const GpuContext& gpu, const Layout& layout, const StatsRequest& request)
      : gpu_(gpu),
        layout_(layout),
        request_(request),
        destrider_(layout),
        keeps_(keeps_pixels(measured_layout(layout, request), measured_request(request, layout))),
        kept_(*gpu.budget, measured_layout(layout, request).pixel_bytes(), gpu.device),
        counted_(empty_partial(layout.type, measured_layout(layout, request).channels, measured_request(request, layout))) {}

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    gpu_.use();  // feeds come on whichever thread the caller has
    destrider_.feed(static_cast<const uint8_t*>(data), bytes, [&](const uint8_t* p, uint64_t pixels, bool) {
      session().add(p, pixels);
      fed_ += pixels;
    });
  }

  void pause() override {
    if (!session_) return;
    gpu_.use();
    if (keeps_)
      session_->flush();
    else
      merge(counted_, *session_->partial());
    session_.reset();
  }

  Result finish() override {
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(destrider_.consumed()) +
                                            " bytes; the layout needs " + std::to_string(layout_.min_bytes()));
    gpu_.use();
    if (keeps_) {  // the last session counts every piece
      const Result r = session().finish();
      session_.reset();  // a finished stream holds no workspace
      return r;
    }
    if (session_) {
      merge(counted_, session_->finish_partial());
      session_.reset();
    }
    return result_of(counted_, measured_request(request_, layout_), "cuda");
  }

  std::optional<Partial> partial() override {
    if (keeps_) return std::nullopt;
    gpu_.use();
    Partial p = counted_;
    if (session_) merge(p, *session_->partial());
    return p;
  }

 private:
  GpuAnalysis& session() {
    if (!session_) {
      const Session at{fed_, keeps_ ? &kept_ : nullptr};
      session_ = std::make_unique<GpuAnalysis>(gpu_, layout_, request_, kStreamWait, &at);
    }
    return *session_;
  }

  const GpuContext& gpu_;
  Layout layout_;
  StatsRequest request_;
  Destrider destrider_;
  bool keeps_;
  KeptPixels kept_;   // keeps_: every pixel so far, on the device
  Partial counted_;   // what ended sessions counted
  uint64_t fed_ = 0;  // pixels given to sessions
  std::unique_ptr<GpuAnalysis> session_;
};

}  // namespace

std::unique_ptr<StreamAnalysis> open_cuda_stream(const GpuContext& gpu, const Layout& layout,
                                                 const StatsRequest& request) {
  return std::make_unique<CudaStream>(gpu, layout, request);
}

}  // namespace imgstat::cuda
