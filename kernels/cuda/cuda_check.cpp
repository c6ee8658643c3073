#include "cuda/cuda_check.hpp"

#include <atomic>
#include <mutex>
#include <string>

namespace imgstat::cuda {
namespace {
// Per device: a sticky error ruins the context of the device it struck,
// not the others a server computes on.
constexpr int kMaxDevices = 64;
std::atomic<bool> g_lost[kMaxDevices] = {};

void mark_lost() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) device = 0;
  g_lost[device] = true;
}
std::mutex g_reporter_mu;
std::function<void(const std::string&)> g_reporter;
}  // namespace

void set_error_reporter(std::function<void(const std::string&)> reporter) {
  std::lock_guard<std::mutex> lock(g_reporter_mu);
  g_reporter = std::move(reporter);
}

void report(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  if (is_sticky(e)) mark_lost();
  const std::string message = std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                              ") in " + what + " (" + file + ":" + std::to_string(line) + "), during cleanup";
  std::lock_guard<std::mutex> lock(g_reporter_mu);
  if (g_reporter) g_reporter(message);
}

bool device_lost(int device) { return device >= 0 && device < kMaxDevices && g_lost[device].load(); }

void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  if (is_sticky(e)) mark_lost();
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
