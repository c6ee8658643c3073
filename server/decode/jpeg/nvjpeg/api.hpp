// The part of nvJPEG's C API imgstat calls, declared here and loaded at run
// time (dlopen by soname), so that imgstat builds where nvjpeg.h is absent
// (Debian's CUDA, CI) and runs where libnvjpeg is missing (JPEG then decodes
// on the CPU). Values and layouts follow NVIDIA's nvjpeg.h; abi_check.cpp
// compares them with the real header wherever one exists.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace imgstat::nvjpeg {

enum Status : int {
  kSuccess = 0,
  kNotInitialized = 1,
  kInvalidParameter = 2,
  kBadJpeg = 3,
  kJpegNotSupported = 4,
  kAllocatorFailure = 5,
  kExecutionFailed = 6,
  kArchMismatch = 7,
  kInternalError = 8,
  kImplementationNotSupported = 9,
  kIncompleteBitstream = 10,
};

enum OutputFormat : int {
  kOutputYuv = 1,   // planar Y, Cb, Cr, chroma at its stored resolution
  kOutputY = 2,     // luma only: gray images
  kOutputRgbi = 5,  // interleaved R,G,B
};

enum Backend : int {
  kBackendDefault = 0,
  kBackendGpuHybrid = 2,
  kBackendHardware = 3,
};

constexpr int kMaxComponents = 4;

struct Planes {  // nvjpegImage_t
  unsigned char* channel[kMaxComponents];
  size_t pitch[kMaxComponents];
};

struct HandleTag;
struct StateTag;
struct StreamTag;
using Handle = HandleTag*;
using State = StateTag*;
using JpegStream = StreamTag*;

// The entry points, resolved from the library; all set or the API is absent.
struct Api {
  Status (*create_ex)(Backend, void* dev_allocator, void* pinned_allocator, unsigned flags, Handle*);
  Status (*destroy)(Handle);
  Status (*state_create)(Handle, State*);
  Status (*state_destroy)(State);
  Status (*decode)(Handle, State, const unsigned char*, size_t, OutputFormat, Planes*, cudaStream_t);
  Status (*batched_initialize)(Handle, State, int batch_size, int max_cpu_threads, OutputFormat);
  Status (*decode_batched)(Handle, State, const unsigned char* const* data, const size_t* lengths, Planes*,
                           cudaStream_t);
  Status (*stream_create)(Handle, JpegStream*);
  Status (*stream_destroy)(JpegStream);
  Status (*stream_parse)(Handle, const unsigned char*, size_t, int save_metadata, int save_stream, JpegStream);
  Status (*batched_supported)(Handle, JpegStream, int* is_supported);  // 0: supported
  Status (*get_property)(int type, int* value);                         // 0 major, 1 minor, 2 patch
  // Optional (null where the library lacks it): reads the headers only, not
  // the whole entropy-coded stream as stream_parse does.
  Status (*stream_parse_header)(Handle, const unsigned char*, size_t, JpegStream);
};

// Loads libnvjpeg.so.13, .12 or .11, once. Null when none loads or a symbol
// is missing, with *why_not saying which; *soname names the one loaded.
const Api* load(std::string* why_not, std::string* soname = nullptr);

const char* status_name(Status s);

}  // namespace imgstat::nvjpeg
