// Whether the workers of one attempt still make progress: the rule that
// declares a rank hung. A pure state machine fed the workers' progress
// reports and samples of their processes (/proc), with time as arguments,
// so tests drive it with a fake clock and fake samples.
//
// The rule, per worker:
//  - Progress is a report of a NEW step (a repeated step is not progress),
//    or a NEW beat: a worker busy between steps (reading a checkpoint,
//    evaluating) says it is alive. A beat is not a step: it neither counts
//    as reporting one nor enters the step times.
//  - A worker that has never reported a step is judged by its processes
//    only: its CPU time (utime + stime of the worker and its descendants)
//    growing between two samples is progress. Once it reported a step, CPU
//    time no longer counts (a rank spinning in a collective burns CPU).
//  - A stopped or traced process (state T or t) makes no progress whatever
//    it reports or spends.
//  - A worker is hung once it made no progress for the timeout, counted
//    from its last progress, or from the attempt's start when it made none;
//    with ranks on other nodes and no stopped worker here, for the timeout
//    and a settle time (HangPolicy::other_nodes).
//  - The timeout: the one given (> 0); 0 derives it as max(floor, k x the
//    median step time measured in this attempt; the floor alone before two
//    steps were seen); < 0 (`off`) never declares a hang.
// Once a worker is hung, the root cause is chosen among the hung workers
// and every stopped one (state T or t), hung yet or not: the others, waiting
// in a collective on the culprit, may have reported last just before it
// stopped, and so time out first. A stopped worker wins (the earliest seen
// stopped); without one, the worker whose last progress is oldest; ties go
// to the lowest rank.
//
// Not thread-safe; owned by an AttemptRun on the agent's loop.
#ifndef ELASTRUN_LAUNCHER_AGENT_LIVENESS_H_
#define ELASTRUN_LAUNCHER_AGENT_LIVENESS_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace elastrun::launcher {

// The timeout settings of an attempt.
// Hang detection's timeout, one type from the flag or job file to the
// attempt: off, derived from the measured step time (HangPolicy), or a
// fixed duration.
class HangTimeout {
 public:
  static HangTimeout Off() { return HangTimeout(Kind::kOff, absl::ZeroDuration()); }
  static HangTimeout Derived() {
    return HangTimeout(Kind::kDerived, absl::ZeroDuration());
  }
  // `after` > 0; anything else is Derived.
  static HangTimeout After(absl::Duration after) {
    return after > absl::ZeroDuration() ? HangTimeout(Kind::kFixed, after) : Derived();
  }
  // A --hang-timeout value or job file field: "off" (any case), "0" or
  // "derived", or a duration ("90s", "5m", "120"). The error names `what`
  // (the flag or field).
  static absl::StatusOr<HangTimeout> Parse(absl::string_view text,
                                           absl::string_view what);
  // JobSpec.hang_timeout's wire form: negative off, 0 (or unset) derived,
  // positive that timeout.
  static HangTimeout FromWire(absl::Duration wire) {
    return wire < absl::ZeroDuration() ? Off() : After(wire);
  }
  absl::Duration ToWire() const {
    return kind_ == Kind::kOff ? absl::Seconds(-1) : fixed_;
  }

  bool off() const { return kind_ == Kind::kOff; }
  bool derived() const { return kind_ == Kind::kDerived; }
  // The fixed timeout; zero unless neither off nor derived.
  absl::Duration fixed() const { return fixed_; }
  // "off", "derived", or the duration ("1m30s").
  std::string ToString() const;

  friend bool operator==(const HangTimeout& a, const HangTimeout& b) {
    return a.kind_ == b.kind_ && a.fixed_ == b.fixed_;
  }
  friend bool operator!=(const HangTimeout& a, const HangTimeout& b) { return !(a == b); }

 private:
  enum class Kind { kOff, kDerived, kFixed };
  HangTimeout(Kind kind, absl::Duration fixed) : kind_(kind), fixed_(fixed) {}
  Kind kind_;
  absl::Duration fixed_;
};

struct HangPolicy {
  HangTimeout timeout = HangTimeout::Derived();
  // The derived timeout's lower bound, and the timeout before any step time
  // is known: long enough for start-up, data loading and a checkpoint.
  absl::Duration floor = absl::Minutes(5);
  // The derived timeout is at least this many median step times.
  int step_multiple = 10;
  // Other nodes run ranks of the same round. Each node judges only its own
  // workers and the service keeps the first node's verdict, so a node with
  // no stopped worker waits SettleTime() past the timeout before it
  // declares a hang: a node holding a stopped worker (the likely culprit,
  // which the others wait for in a collective) is heard first.
  bool other_nodes = false;
};

// What /proc says about one worker.
struct ProcSample {
  bool exists = false;  // false: gone (or unreadable); then nothing else counts
  // The worker process's state letter: 'R', 'S', 'D', 'T' (stopped), 't'
  // (traced), 'Z', ...
  char state = '?';
  // utime + stime of the worker and its descendants, in clock ticks.
  int64_t cpu_ticks = 0;
  // The worker catches SIGUSR1 (e.g. Python's faulthandler.register): it
  // can be asked for its stacks with that signal.
  bool catches_sigusr1 = false;
};

// Reads ProcSamples; behind an interface so tests pass a fake.
class ProcReader {
 public:
  virtual ~ProcReader() = default;
  virtual ProcSample Read(pid_t pid) = 0;
};
// The real one: /proc/PID/stat and /proc/PID/status, descendants through
// /proc/PID/task/*/children (at most 256 processes per worker).
ProcReader& RealProcReader();

// A worker declared hung.
struct Hang {
  size_t worker = 0;  // index into the attempt's workers
  int rank = 0;
  bool reported = false;  // it reported a step; `step` is its newest
  int64_t step = -1;      // -1: it never reported one
  bool stopped = false;   // state T or t at the last sample
  absl::Duration idle;    // without progress, until the declaration
};

// "rank R hung at step S (no progress for T)", or, for a worker that never
// reported, "rank R hung before reporting a step (no progress for T)".
std::string DescribeHang(int rank, int64_t step, absl::Duration idle);

class Liveness {
 public:
  // `ranks`: the global rank of each worker, in the attempt's order.
  Liveness(HangPolicy policy, std::vector<int> ranks, absl::Time start);

  bool enabled() const { return !policy_.timeout.off(); }

  // Worker `i` reported `step`.
  void OnReport(size_t i, int64_t step, absl::Time now);
  // Worker `i` sent beat `beat` (> 0; see the rule above).
  void OnBeat(size_t i, int64_t beat, absl::Time now);
  // Worker `i`'s processes as sampled at `now`.
  void OnSample(size_t i, const ProcSample& sample, absl::Time now);

  // The timeout in force now (see the rule above); InfiniteDuration when off.
  absl::Duration Timeout() const;
  // How often to sample: a tenth of the timeout, between 100 ms and 5 s.
  absl::Duration SampleInterval() const;
  // With other_nodes, how much later a hang without a stopped worker here
  // is declared: two samples and 3 s, time for another node to see its
  // stopped worker, collect its stacks (a Python worker gets 2 s for its
  // own dump) and stop it, and for the service's stop to arrive. 0
  // otherwise.
  absl::Duration SettleTime() const;

  // The root cause among the workers hung at `now`, if any.
  std::optional<Hang> Check(absl::Time now) const;

 private:
  struct Worker {
    int rank = 0;
    bool reported = false;
    int64_t step = -1;
    int64_t beat = 0;                   // the newest beat, 0: none
    absl::Time progress_at;             // last progress, or the start
    std::optional<absl::Time> step_at;  // when `step` was first reported
    bool stopped = false;
    absl::Time stopped_since;
    int64_t cpu_ticks = -1;  // -1: no sample yet
    bool gone = false;
  };
  const HangPolicy policy_;
  std::vector<Worker> workers_;
  // Recent step times (time between two new steps of one worker), all
  // workers together; the newest kMaxStepTimes.
  std::deque<absl::Duration> step_times_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_LIVENESS_H_
