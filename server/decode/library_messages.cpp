#include "decode/library_messages.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <regex>
#include <streambuf>

namespace imgstat {

void deliver_library_line(std::string line);

namespace {

constexpr size_t kMaxLine = 500;
constexpr size_t kMaxLines = 8;

thread_local LibraryMessages* t_scope = nullptr;
thread_local std::string t_partial;  // a line printed in pieces (libpng prints its newline apart)

std::mutex g_mu;
std::function<void(const std::string&)> g_handler;  // guarded by g_mu
std::streambuf* g_original_cerr = nullptr;

void feed(const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (data[i] == '\n') {
      deliver_library_line(std::move(t_partial));
      t_partial.clear();
    } else if (t_partial.size() < 2 * kMaxLine) {
      t_partial += data[i];
    }
  }
}

ssize_t cookie_write(void*, const char* buf, size_t size) {
  feed(buf, size);
  return static_cast<ssize_t>(size);
}

class CatchingBuffer final : public std::streambuf {
 protected:
  int_type overflow(int_type ch) override {
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      const char c = traits_type::to_char_type(ch);
      feed(&c, 1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    feed(s, static_cast<size_t>(n));
    return n;
  }
};

std::string cleaned(std::string line) {
  // OpenCV's exceptions carry its version, source path and assertion text:
  // "imdecode_(''): can't read header: OpenCV(4.6.0) ./modules/...cpp:149:
  // error: (-215:Assertion failed) clrused >= 0 in function 'readHeader'".
  static const std::regex opencv(R"(^(?:imdecode_\('[^']*'\): )?(.*?)OpenCV\([^)]*\) \S+:\d+: error: \([^)]*\) (.*?)(?: in function '[^']*')?$)");
  std::smatch m;
  // Its log lines: "[ WARN:0@0.062] global ./modules/...cpp (275) readHeader ...".
  static const std::regex opencv_log(R"(^\[ ?[A-Z]+:[^\]]*\] global \S+ \(\d+\) \S+ (.*)$)");
  if (std::regex_match(line, m, opencv))
    line = "OpenCV: " + m[1].str() + m[2].str();
  else if (std::regex_match(line, m, opencv_log))
    line = "OpenCV: " + m[1].str();
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  while (!line.empty() && line.back() == ' ') line.pop_back();
  if (line.size() > kMaxLine) line = line.substr(0, kMaxLine) + "...";
  return line;
}

}  // namespace

void deliver_library_line(std::string line) {
  line = cleaned(std::move(line));
  if (line.empty()) return;
  if (LibraryMessages* scope = t_scope) {
    auto& lines = scope->lines_;
    if (lines.size() < kMaxLines && std::find(lines.begin(), lines.end(), line) == lines.end())
      lines.push_back(std::move(line));
    return;
  }
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    handler = g_handler;
  }
  if (handler) handler(line);
}

void catch_library_messages(std::function<void(const std::string& line)> handler) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_handler = std::move(handler);
  }
  static std::once_flag once;
  std::call_once(once, [] {
    static CatchingBuffer buffer;
    g_original_cerr = std::cerr.rdbuf(&buffer);
    // Unbuffered: every fprintf reaches the catcher at once, so nothing
    // waits in a buffer if the process then dies.
    cookie_io_functions_t io{nullptr, cookie_write, nullptr, nullptr};
    if (FILE* caught = fopencookie(nullptr, "w", io)) {
      setvbuf(caught, nullptr, _IONBF, 0);
      stderr = caught;
    }
  });
}

std::ostream& program_stderr() {
  static std::ostream out(g_original_cerr ? g_original_cerr : std::cerr.rdbuf());
  return out;
}

LibraryMessages::LibraryMessages() : outer_(t_scope) { t_scope = this; }
LibraryMessages::~LibraryMessages() { t_scope = outer_; }

}  // namespace imgstat
