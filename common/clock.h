// Time as an injected dependency: state machines read time only through a
// Clock, so tests drive them with a FakeClock and never sleep.
#ifndef ELASTRUN_COMMON_CLOCK_H_
#define ELASTRUN_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace elastrun {

// A source of the current time. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The real clock (absl::Now). A process-wide singleton; never destroyed.
Clock& RealClock();

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : now_(start) {}
  absl::Time Now() const override;
  void Advance(absl::Duration d);
  void Set(absl::Time t);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_CLOCK_H_
