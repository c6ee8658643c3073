#include "decode/jpeg/gpu.hpp"

namespace imgstat {

std::unique_ptr<GpuJpegDecoder> open_gpu_jpeg_decoder(const GpuJpegOptions&, std::string* why_not) {
  if (why_not) *why_not = "this build has no CUDA";
  return nullptr;
}

}  // namespace imgstat
