// Compiled only where NVIDIA's nvjpeg.h exists (the GPU machine:
// scripts/gpu-session builds it with nvcc's headers): the declarations in
// api.hpp against the real ones. Building it is the test.
#include <nvjpeg.h>

#include <cstddef>
#include <type_traits>

#include "decode/nvjpeg/api.hpp"

namespace n = imgstat::nvjpeg;

static_assert(n::kSuccess == NVJPEG_STATUS_SUCCESS && n::kBadJpeg == NVJPEG_STATUS_BAD_JPEG &&
              n::kJpegNotSupported == NVJPEG_STATUS_JPEG_NOT_SUPPORTED &&
              n::kExecutionFailed == NVJPEG_STATUS_EXECUTION_FAILED &&
              n::kImplementationNotSupported == NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED &&
              n::kIncompleteBitstream == NVJPEG_STATUS_INCOMPLETE_BITSTREAM);
static_assert(n::kCss444 == NVJPEG_CSS_444 && n::kCss420 == NVJPEG_CSS_420 && n::kCssGray == NVJPEG_CSS_GRAY &&
              n::kCss410V == NVJPEG_CSS_410V && n::kCssUnknown == NVJPEG_CSS_UNKNOWN);
static_assert(n::kOutputY == NVJPEG_OUTPUT_Y && n::kOutputRgbi == NVJPEG_OUTPUT_RGBI);
static_assert(n::kBackendDefault == NVJPEG_BACKEND_DEFAULT && n::kBackendGpuHybrid == NVJPEG_BACKEND_GPU_HYBRID &&
              n::kBackendHardware == NVJPEG_BACKEND_HARDWARE);
static_assert(n::kMaxComponents == NVJPEG_MAX_COMPONENT);
static_assert(sizeof(n::Planes) == sizeof(nvjpegImage_t) && offsetof(n::Planes, pitch) == offsetof(nvjpegImage_t, pitch));
static_assert(std::is_same_v<decltype(nvjpegImage_t{}.pitch[0]), size_t&>);

int main() { return 0; }

// Each entry point of Api, written with the real types: same parameters in
// the same order as api.hpp's (Handle/State/JpegStream are the opaque handles).
static_assert(std::is_same_v<decltype(&nvjpegCreateEx),
                             nvjpegStatus_t (*)(nvjpegBackend_t, nvjpegDevAllocator_t*, nvjpegPinnedAllocator_t*,
                                                unsigned int, nvjpegHandle_t*)>);
static_assert(std::is_same_v<decltype(&nvjpegGetImageInfo),
                             nvjpegStatus_t (*)(nvjpegHandle_t, const unsigned char*, size_t, int*,
                                                nvjpegChromaSubsampling_t*, int*, int*)>);
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
