// Compiled only where NVIDIA's nvjpeg.h exists (the GPU machine:
// scripts/gpu-session builds it with nvcc's headers): the declarations in
// api.hpp against the real ones. Building it is the test.
#include <nvjpeg.h>

#include <cstddef>
#include <type_traits>

#include "decode/jpeg/nvjpeg/api.hpp"

namespace n = imgstat::nvjpeg;

static_assert(int(n::kSuccess) == int(NVJPEG_STATUS_SUCCESS) && int(n::kBadJpeg) == int(NVJPEG_STATUS_BAD_JPEG) &&
              int(n::kJpegNotSupported) == int(NVJPEG_STATUS_JPEG_NOT_SUPPORTED) &&
              int(n::kExecutionFailed) == int(NVJPEG_STATUS_EXECUTION_FAILED) &&
              int(n::kImplementationNotSupported) == int(NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED) &&
              int(n::kIncompleteBitstream) == int(NVJPEG_STATUS_INCOMPLETE_BITSTREAM));
static_assert(int(n::kOutputYuv) == int(NVJPEG_OUTPUT_YUV) && int(n::kOutputY) == int(NVJPEG_OUTPUT_Y) && int(n::kOutputRgbi) == int(NVJPEG_OUTPUT_RGBI));
static_assert(int(n::kBackendDefault) == int(NVJPEG_BACKEND_DEFAULT) && int(n::kBackendGpuHybrid) == int(NVJPEG_BACKEND_GPU_HYBRID) &&
              int(n::kBackendHardware) == int(NVJPEG_BACKEND_HARDWARE));
static_assert(int(n::kMaxComponents) == int(NVJPEG_MAX_COMPONENT));
static_assert(sizeof(n::Planes) == sizeof(nvjpegImage_t) && offsetof(n::Planes, pitch) == offsetof(nvjpegImage_t, pitch));
static_assert(std::is_same_v<std::remove_all_extents_t<decltype(nvjpegImage_t::pitch)>, size_t>);

int main() { return 0; }

// Each entry point of Api, written with the real types: same parameters in
// the same order as api.hpp's (Handle/State/JpegStream are the opaque handles).
static_assert(std::is_same_v<decltype(&nvjpegCreateEx),
                             nvjpegStatus_t (*)(nvjpegBackend_t, nvjpegDevAllocator_t*, nvjpegPinnedAllocator_t*,
                                                unsigned int, nvjpegHandle_t*)>);
static_assert(std::is_same_v<decltype(&nvjpegDecode),
                             nvjpegStatus_t (*)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char*, size_t,
                                                nvjpegOutputFormat_t, nvjpegImage_t*, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&nvjpegDecodeBatchedInitialize),
                             nvjpegStatus_t (*)(nvjpegHandle_t, nvjpegJpegState_t, int, int, nvjpegOutputFormat_t)>);
static_assert(std::is_same_v<decltype(&nvjpegDecodeBatched),
                             nvjpegStatus_t (*)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char* const*,
                                                const size_t*, nvjpegImage_t*, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&nvjpegJpegStreamParse),
                             nvjpegStatus_t (*)(nvjpegHandle_t, const unsigned char*, size_t, int, int,
                                                nvjpegJpegStream_t)>);
static_assert(std::is_same_v<decltype(&nvjpegDecodeBatchedSupported),
                             nvjpegStatus_t (*)(nvjpegHandle_t, nvjpegJpegStream_t, int*)>);
static_assert(std::is_same_v<decltype(&nvjpegGetProperty), nvjpegStatus_t (*)(libraryPropertyType, int*)>);
static_assert(std::is_same_v<decltype(&nvjpegJpegStreamParseHeader),
                             nvjpegStatus_t (*)(nvjpegHandle_t, const unsigned char*, size_t, nvjpegJpegStream_t)>);
