#include "decode/jpeg/nvjpeg/api.hpp"

#include <dlfcn.h>

#include <mutex>

namespace imgstat::nvjpeg {
namespace {

struct Loaded {
  Api api{};
  bool ok = false;
  std::string why_not;
  std::string soname;
};

template <class Fn>
bool resolve(void* lib, const char* name, Fn* out, std::string* why_not) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*out) *why_not = std::string(name) + " is missing from the library";
  return *out != nullptr;
}

Loaded load_once() {
  Loaded l;
  void* lib = nullptr;
  for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      l.soname = name;
      break;
    }
  }
  if (!lib) {
    l.why_not = "libnvjpeg (soname 13, 12 or 11) is not installed";
    return l;
  }
  Api& a = l.api;
  l.ok = resolve(lib, "nvjpegCreateEx", &a.create_ex, &l.why_not) &&
         resolve(lib, "nvjpegDestroy", &a.destroy, &l.why_not) &&
         resolve(lib, "nvjpegJpegStateCreate", &a.state_create, &l.why_not) &&
         resolve(lib, "nvjpegJpegStateDestroy", &a.state_destroy, &l.why_not) &&
         resolve(lib, "nvjpegDecode", &a.decode, &l.why_not) &&
         resolve(lib, "nvjpegDecodeBatchedInitialize", &a.batched_initialize, &l.why_not) &&
         resolve(lib, "nvjpegDecodeBatched", &a.decode_batched, &l.why_not) &&
         resolve(lib, "nvjpegJpegStreamCreate", &a.stream_create, &l.why_not) &&
         resolve(lib, "nvjpegJpegStreamDestroy", &a.stream_destroy, &l.why_not) &&
         resolve(lib, "nvjpegJpegStreamParse", &a.stream_parse, &l.why_not) &&
         resolve(lib, "nvjpegDecodeBatchedSupported", &a.batched_supported, &l.why_not) &&
         resolve(lib, "nvjpegGetProperty", &a.get_property, &l.why_not);
  if (!l.ok) l.why_not = l.soname + ": " + l.why_not;
  a.stream_parse_header = reinterpret_cast<decltype(a.stream_parse_header)>(dlsym(lib, "nvjpegJpegStreamParseHeader"));
  return l;  // the library stays loaded for the life of the process
}

}  // namespace

const Api* load(std::string* why_not, std::string* soname) {
  static const Loaded loaded = load_once();
  if (!loaded.ok) {
    if (why_not) *why_not = loaded.why_not;
    return nullptr;
  }
  if (soname) *soname = loaded.soname;
  return &loaded.api;
}

const char* status_name(Status s) {
  switch (s) {
    case kSuccess: return "success";
    case kNotInitialized: return "not initialized";
    case kInvalidParameter: return "invalid parameter";
    case kBadJpeg: return "bad JPEG";
    case kJpegNotSupported: return "JPEG not supported";
    case kAllocatorFailure: return "allocator failure";
    case kExecutionFailed: return "execution failed";
    case kArchMismatch: return "architecture mismatch";
    case kInternalError: return "internal error";
    case kImplementationNotSupported: return "implementation not supported";
    case kIncompleteBitstream: return "incomplete bitstream";
  }
  return "unknown status";
}

}  // namespace imgstat::nvjpeg
