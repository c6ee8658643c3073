// Abseil as release builds have it. Debian's Abseil is built without NDEBUG,
// so every absl::Mutex that gRPC locks records its lock order for deadlock
// detection (absl's GraphCycles): a share of each call's CPU in the server
// and the client, for a check meant for debug builds.
#pragma once

namespace imgstat {

// Call once at the start of main, before threads.
void tune_abseil_for_release();

}  // namespace imgstat
