// Every CUDA call is checked; a failure becomes the one imgstat::Error type
// here, at the boundary: out of memory is kResourceExhausted, anything else
// (launch failure, lost device) kUnavailable, which the engine answers by
// falling back to the CPU.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "imgstat/error.hpp"

namespace imgstat::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line);

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(e, what, file, line);
}

// Where an error cannot be thrown (destructors, cleanup after a failure):
// the error is recorded (a sticky one marks the device lost) and told to the
// reporter set below, never swallowed.
void report(cudaError_t e, const char* what, const char* file, int line);
void set_error_reporter(std::function<void(const std::string&)> reporter);

// True for errors after which the CUDA context cannot be used again.
bool is_sticky(cudaError_t e);
// True once any call on this device (CUDA ordinal) has failed with such an error.
bool device_lost(int device);

}  // namespace imgstat::cuda

#define IMGSTAT_CUDA(call) ::imgstat::cuda::check((call), #call, __FILE__, __LINE__)
#define IMGSTAT_CUDA_REPORT(call) ::imgstat::cuda::report((call), #call, __FILE__, __LINE__)
#define IMGSTAT_CUDA_LAUNCHED(kernel) ::imgstat::cuda::check(cudaGetLastError(), "launch " kernel, __FILE__, __LINE__)
