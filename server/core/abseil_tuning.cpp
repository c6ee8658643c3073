#include "core/abseil_tuning.hpp"

#include <absl/synchronization/mutex.h>

namespace imgstat {

void tune_abseil_for_release() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace imgstat
