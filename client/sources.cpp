#include "sources.hpp"

#include <cerrno>
#include <cstring>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace imgstat::client {

Source::Source(const std::string& name) : name_(name) {
  if (name == "-") {
    is_stdin_ = true;
    std::ostringstream all;
    all << std::cin.rdbuf();
    stdin_data_ = all.str();
    size_ = stdin_data_.size();
    return;
  }
  struct stat st;
  if (::stat(name.c_str(), &st) != 0) throw std::runtime_error(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw std::runtime_error("is a directory");
  std::ifstream probe(name, std::ios::binary);
  if (!probe) throw std::runtime_error(std::strerror(errno));
  size_ = static_cast<uint64_t>(st.st_size);
}

std::string Source::read_all() {
  if (is_stdin_) return stdin_data_;
  std::string data;
  for_each_chunk(size_t{64} << 20, [&](const std::string& c) {
    data += c;
    return true;
  });
  return data;
}

void Source::for_each_chunk(size_t chunk, const std::function<bool(const std::string&)>& fn) {
  if (is_stdin_) {
    for (size_t off = 0; off < stdin_data_.size(); off += chunk)
      if (!fn(stdin_data_.substr(off, chunk))) return;
    return;
  }
  std::ifstream in(name_, std::ios::binary);
  if (!in) throw std::runtime_error(std::strerror(errno));
  std::string buf;
  uint64_t left = size_;
  while (left > 0) {
    buf.resize(static_cast<size_t>(std::min<uint64_t>(left, chunk)));
    if (!in.read(buf.data(), static_cast<std::streamsize>(buf.size())))
      throw std::runtime_error("read failed after " + std::to_string(size_ - left) + " bytes");
    left -= buf.size();
    if (!fn(buf)) return;
  }
}

}  // namespace imgstat::client
