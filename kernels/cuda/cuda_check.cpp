#include "cuda/cuda_check.hpp"

#include <atomic>
#include <string>

namespace imgstat::cuda {
namespace {
std::atomic<bool> g_lost{false};
}

bool device_lost() { return g_lost.load(); }

void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  if (is_sticky(e)) g_lost = true;
  const std::string where = std::string(what) + " (" + file + ":" + std::to_string(line) + ")";
  if (e == cudaErrorMemoryAllocation)
    fail(ErrorCode::kResourceExhausted, "GPU out of memory in " + where);
  fail(ErrorCode::kUnavailable, std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                                    ") in " + where);
}

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorUnknown:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

}  // namespace imgstat::cuda
