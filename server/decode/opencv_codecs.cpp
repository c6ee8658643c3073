#include "decode/opencv_codecs.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>
#include <mutex>

#include "imgstat/error.hpp"

namespace imgstat::opencv_codecs {
namespace {

using ImdecodeFn = void (*)(const cv::Mat&, int, cv::Mat&);
using ImwriteFn = bool (*)(const std::string&, const cv::Mat&);

struct Module {
  ImdecodeFn imdecode = nullptr;
  ImwriteFn imwrite = nullptr;
  std::string why_not;
};

std::atomic<bool> g_loaded{false};

std::vector<std::string> candidates() {
  const char* named = std::getenv("IMGSTAT_OPENCV_CODECS");
  if (named && *named) return {named};
  std::vector<std::string> out;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path lib = exe.parent_path().parent_path() / "lib";
    out.push_back((lib / "imgstat" / kModuleName).string());
    out.push_back((lib / kModuleName).string());
  }
  out.push_back(kModuleName);
  return out;
}

const Module& module() {
  static const Module m = [] {
    Module m;
    // Kept for the life of the process: OpenCV's codecs hold global state.
    void* lib = nullptr;
    for (const std::string& path : candidates()) {
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      const char* e = dlerror();
      m.why_not += std::string(m.why_not.empty() ? "" : "; ") + (e ? e : path + ": not found");
    }
    if (!lib) return m;
    m.why_not.clear();
    m.imdecode = reinterpret_cast<ImdecodeFn>(dlsym(lib, "imgstat_opencv_imdecode"));
    m.imwrite = reinterpret_cast<ImwriteFn>(dlsym(lib, "imgstat_opencv_imwrite"));
    if (!m.imdecode || !m.imwrite) m.why_not = std::string(kModuleName) + " lacks its entry points";
    g_loaded = m.why_not.empty();
    return m;
  }();
  if (!m.why_not.empty())
    fail(ErrorCode::kInternal, "OpenCV's image codecs could not be loaded (" + m.why_not +
                                   "): install " + kModuleName + " beside the program's libraries");
  return m;
}

}  // namespace

cv::Mat imdecode(const cv::Mat& buf, int flags) {
  cv::Mat out;
  module().imdecode(buf, flags, out);
  return out;
}

bool imwrite(const std::string& path, const cv::Mat& img) { return module().imwrite(path, img); }

bool loaded() { return g_loaded.load(); }

}  // namespace imgstat::opencv_codecs
