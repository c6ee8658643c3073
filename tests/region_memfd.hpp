// Test memory for regions: a memfd holding given bytes, sealed or not.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace imgstat::testing {

inline int memfd_with(const std::vector<uint8_t>& bytes, int seals) {
  const int fd = memfd_create("imgstat-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::runtime_error("memfd_create");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) throw std::runtime_error("write to memfd");
    done += static_cast<size_t>(n);
  }
  if (seals && fcntl(fd, F_ADD_SEALS, seals) != 0) throw std::runtime_error("F_ADD_SEALS");
  return fd;
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

}  // namespace imgstat::testing
