// Untrusted strings made safe to print: a caller's input name reaches the log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace imgstat {

// Control bytes, quotes, backslashes and bytes >= 0x7f escaped (\n, \x1b,
// ...), cut after max_bytes of input with a note of the full length.
std::string printable(std::string_view text, size_t max_bytes);

}  // namespace imgstat
