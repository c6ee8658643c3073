// JPEG decoded on the GPU (nvJPEG), into device memory that the CUDA engine
// reads in place: no copy back, no second upload. Concurrent requests are
// gathered into one batched decode on the GPU's JPEG engines, as Triton's
// dynamic batcher gathers inference requests: a batch waits at most
// batch_window for more, and only while more are on their way.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "decode/jpeg/check.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

struct GpuJpegOptions {
  int device = 0;
  std::chrono::microseconds batch_window{1000};
  uint32_t batch_max = 32;
  // Threads that each gather and decode batches with their own nvJPEG state
  // and CUDA stream: while one parses its batch on the CPU, another's runs
  // on the JPEG engines.
  uint32_t lanes = 2;
};

struct GpuDecodedImage {
  std::string decoder;           // "nvjpeg-hardware" or "nvjpeg-cuda"
  DeviceImageView view;          // packed R,G,B or Gray, uint8
  std::shared_ptr<void> memory;  // frees the device pixels when the last holder lets go
  JpegCheck check;               // the GPU's integrity check: libjpeg's verdict
  // Copies the pixels (view.layout, packed) to host memory; throws
  // kUnavailable when the GPU fails.
  std::function<void(void* host)> to_host;
};

class GpuJpegDecoder {
 public:
  virtual ~GpuJpegDecoder() = default;

  // Says a JPEG is on its way to decode() (its checks are running), so that
  // a batch waits for it; the ticket withdraws that when destroyed unused.
  class Ticket {
   public:
    virtual ~Ticket() = default;
  };
  virtual std::unique_ptr<Ticket> announce() = 0;

  // Decodes one baseline Huffman 8-bit JPEG, gray or YCbCr in one scan, to
  // libjpeg-turbo's exact pixels, and checks its data as libjpeg does
  // (image.check: corrupt or truncated files come back with their verdict).
  // Throws imgstat::Error: kUnimplemented for what it leaves to the CPU
  // (progressive, CMYK, 12-bit, arithmetic coding, odd samplings, data the
  // check cannot vouch for), kUnavailable when the GPU fails.
  virtual GpuDecodedImage decode(Ticket& ticket, const uint8_t* data, size_t size) = 0;

  // e.g. "nvJPEG 13.0.1 (libnvjpeg.so.13), hardware backend"
  virtual std::string description() const = 0;
};

// Null, with *why_not saying why, when this build has no CUDA, libnvjpeg is
// not installed, or no device is usable.
std::unique_ptr<GpuJpegDecoder> open_gpu_jpeg_decoder(const GpuJpegOptions& options, std::string* why_not);

// The same decoder, opened by the first JPEG that asks for it: creating
// nvJPEG's state costs a process about 0.3 s (H200 machine), which one that
// may never meet a JPEG (the CLI's --local on raw frames) should not pay.
// Where it cannot be opened, decode() throws kUnavailable saying why.
std::unique_ptr<GpuJpegDecoder> open_gpu_jpeg_decoder_on_first_use(const GpuJpegOptions& options);

// One decoder per slot of `placement` (decoders[i] on slot i's GPU, null
// where none opened) as one: each JPEG goes to the least loaded slot in
// service that has one, and its pixels come back naming that GPU
// (view.device), for the engine to compute there.
std::unique_ptr<GpuJpegDecoder> make_placed_gpu_jpeg_decoder(std::vector<std::unique_ptr<GpuJpegDecoder>> decoders,
                                                             std::shared_ptr<Placement> placement);

}  // namespace imgstat
