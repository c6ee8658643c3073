// libFuzzer: any bytes as a dataset archive the CLI reads (client/shards.hpp),
// written to a file named as a tar or a zip (by the first byte): listed,
// then every member opened and read where it lies, or decompressed and
// held, in the order the CLI's readers take them and then backwards. A
// clean listing (its damage said) and each member its bytes or an
// InputError; nothing read outside the file, nothing held past the limit.
// Seeded with tests/fuzz/seeds' tars and zips.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "shards.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat::client;
  static int calls = 0;
  const std::string path = "/tmp/fuzz-shard-" + std::to_string(getpid()) + "-" + std::to_string(calls++ % 4) +
                           (size > 0 && data[0] == 'P' ? ".zip" : ".tar");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    ShardOptions options;
    options.max_held_member_bytes = uint64_t{16} << 20;  // within the fuzz run's -malloc_limit_mb
    const ShardListing listing =
        list_shard(path, [](const std::string& m) {
          return m.empty() || m.back() == 'x' ? MemberUse::kLeftOut : m.back() == 'b' ? MemberUse::kBeside : MemberUse::kInput;
        }, options);
    std::vector<std::string> order = listing.inputs;
    order.insert(order.end(), listing.inputs.rbegin(), listing.inputs.rend());
    for (const std::string& name : order) {
      try {
        MemberBytes m = open_member(name);
        if (m.held) {
          if (m.data.size() != m.size) __builtin_trap();
          continue;
        }
        if (m.offset > size || m.size > size - m.offset) __builtin_trap();  // listed past the file's end
        std::string bytes(static_cast<size_t>(m.size), '\0');
        const ssize_t got = pread(m.fd, bytes.data(), bytes.size(), static_cast<off_t>(m.offset));
        close(m.fd);
        if (got != static_cast<ssize_t>(bytes.size())) __builtin_trap();
      } catch (const InputError&) {
      }
    }
  } catch (const std::runtime_error&) {
  }
  std::remove(path.c_str());
  return 0;
}
