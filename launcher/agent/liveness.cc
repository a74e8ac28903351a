#include "launcher/agent/liveness.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/strings.h"

namespace elastrun::launcher {
namespace {

// Enough for a median that follows the current phase of training.
constexpr size_t kMaxStepTimes = 101;
// Descendants summed per worker (dataloader workers and the like).
constexpr size_t kMaxProcesses = 256;

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// State and utime + stime from /proc/PID/stat; false when unreadable.
bool ReadStat(pid_t pid, char* state, int64_t* ticks) {
  const std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  // The command name (in parentheses) may hold spaces: fields follow the
  // last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || f[0].empty() || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime)) {
    return false;
  }
  *state = f[0][0];
  *ticks = utime + stime;
  return true;
}

bool CatchesSigusr1(pid_t pid) {
  const std::string status = ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "SigCgt:")) continue;
    uint64_t mask = 0;
    return absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &mask) &&
           (mask & (uint64_t{1} << (SIGUSR1 - 1))) != 0;
  }
  return false;
}

// The children of every thread of `pid`.
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* d = opendir(tasks.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string list =
        ReadSmallFile(absl::StrCat(tasks, "/", e->d_name, "/children"));
    for (absl::string_view c : absl::StrSplit(list, ' ', absl::SkipEmpty())) {
      pid_t child = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(c), &child)) out.push_back(child);
    }
  }
  closedir(d);
  return out;
}

class RealReader : public ProcReader {
 public:
  ProcSample Read(pid_t pid) override {
    ProcSample s;
    if (!ReadStat(pid, &s.state, &s.cpu_ticks) || s.state == 'Z' || s.state == 'X')
      return s;
    s.exists = true;
    s.catches_sigusr1 = CatchesSigusr1(pid);
    std::vector<pid_t> todo = ChildrenOf(pid);
    for (size_t seen = 1; !todo.empty() && seen < kMaxProcesses; ++seen) {
      const pid_t p = todo.back();
      todo.pop_back();
      char state;
      int64_t ticks = 0;
      if (!ReadStat(p, &state, &ticks)) continue;
      s.cpu_ticks += ticks;
      for (pid_t c : ChildrenOf(p)) todo.push_back(c);
    }
    return s;
  }
};

bool IsStopped(char state) { return state == 'T' || state == 't'; }

}  // namespace

ProcReader& RealProcReader() {
  static RealReader* reader = new RealReader();
  return *reader;
}

absl::StatusOr<HangTimeout> HangTimeout::Parse(absl::string_view text,
                                               absl::string_view what) {
  if (absl::EqualsIgnoreCase(text, "off")) return Off();
  if (absl::EqualsIgnoreCase(text, "derived")) return Derived();
  absl::StatusOr<absl::Duration> d = ParseDuration(text, what);  // never negative
  if (!d.ok()) return d.status();
  return After(*d);
}

std::string HangTimeout::ToString() const {
  switch (kind_) {
    case Kind::kOff:
      return "off";
    case Kind::kDerived:
      return "derived";
    case Kind::kFixed:
      break;
  }
  return absl::FormatDuration(fixed_);
}

std::string DescribeHang(int rank, int64_t step, absl::Duration idle) {
  const std::string where =
      step >= 0 ? absl::StrCat("at step ", step) : std::string("before reporting a step");
  return absl::StrCat("rank ", rank, " hung ", where, " (no progress for ",
                      absl::FormatDuration(absl::Trunc(idle, absl::Milliseconds(100))),
                      ")");
}

Liveness::Liveness(HangPolicy policy, std::vector<int> ranks, absl::Time start)
    : policy_(policy) {
  for (int rank : ranks) {
    Worker w;
    w.rank = rank;
    w.progress_at = start;
    workers_.push_back(w);
  }
}

void Liveness::OnReport(size_t i, int64_t step, absl::Time now) {
  if (i >= workers_.size()) return;
  Worker& w = workers_[i];
  if (w.reported && step == w.step) return;
  if (w.stopped) {
    // Sent before the stop and read after it: the newest step, but not
    // progress.
    w.reported = true;
    w.step = step;
    return;
  }
  if (w.step_at && step > w.step) {
    step_times_.push_back((now - *w.step_at) / static_cast<double>(step - w.step));
    if (step_times_.size() > kMaxStepTimes) step_times_.pop_front();
  }
  w.reported = true;
  w.step = step;
  w.step_at = now;
  w.progress_at = now;
}

void Liveness::OnBeat(size_t i, int64_t beat, absl::Time now) {
  if (i >= workers_.size() || beat <= 0) return;
  Worker& w = workers_[i];
  if (beat == w.beat) return;
  w.beat = beat;
  // Sent before a stop and read after it: not progress.
  if (!w.stopped) w.progress_at = now;
}

void Liveness::OnSample(size_t i, const ProcSample& sample, absl::Time now) {
  if (i >= workers_.size()) return;
  Worker& w = workers_[i];
  w.gone = !sample.exists;
  if (w.gone) return;
  if (IsStopped(sample.state)) {
    if (!w.stopped) w.stopped_since = now;
    w.stopped = true;
  } else {
    w.stopped = false;
    if (!w.reported && w.cpu_ticks >= 0 && sample.cpu_ticks > w.cpu_ticks)
      w.progress_at = now;
  }
  w.cpu_ticks = sample.cpu_ticks;
}

absl::Duration Liveness::Timeout() const {
  if (!enabled()) return absl::InfiniteDuration();
  if (!policy_.timeout.derived()) return policy_.timeout.fixed();
  if (step_times_.empty()) return policy_.floor;
  std::vector<absl::Duration> sorted(step_times_.begin(), step_times_.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  return std::max(policy_.floor, sorted[sorted.size() / 2] * policy_.step_multiple);
}

absl::Duration Liveness::SampleInterval() const {
  return std::clamp(Timeout() / 10, absl::Milliseconds(100), absl::Seconds(5));
}

absl::Duration Liveness::SettleTime() const {
  if (!policy_.other_nodes || !enabled()) return absl::ZeroDuration();
  return 2 * SampleInterval() + absl::Seconds(3);
}

std::optional<Hang> Liveness::Check(absl::Time now) const {
  if (!enabled()) return std::nullopt;
  bool stopped_here = false;
  for (const Worker& w : workers_) stopped_here = stopped_here || (!w.gone && w.stopped);
  const absl::Duration timeout = Timeout() + (stopped_here ? absl::ZeroDuration() : SettleTime());
  const Worker* cause = nullptr;
  size_t cause_index = 0;
  // Whether `a` stopped making progress before `b` (see the class comment).
  auto earlier = [](const Worker& a, const Worker& b) {
    if (a.stopped != b.stopped) return a.stopped;
    if (a.stopped && a.stopped_since != b.stopped_since)
      return a.stopped_since < b.stopped_since;
    return a.progress_at < b.progress_at;
  };
  bool any_hung = false;
  for (const Worker& w : workers_)
    any_hung = any_hung || (!w.gone && now - w.progress_at >= timeout);
  if (!any_hung) return std::nullopt;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    // A stopped worker is a candidate even before its own timeout: the
    // others, waiting on it, may have made their last progress just before
    // it stopped, and so time out first.
    if (w.gone || (now - w.progress_at < timeout && !w.stopped)) continue;
    if (cause == nullptr || earlier(w, *cause) ||
        (!earlier(*cause, w) && w.rank < cause->rank)) {
      cause = &w;
      cause_index = i;
    }
  }
  if (cause == nullptr) return std::nullopt;
  Hang h;
  h.worker = cause_index;
  h.rank = cause->rank;
  h.reported = cause->reported;
  h.step = cause->step;
  h.stopped = cause->stopped;
  h.idle = now - cause->progress_at;
  return h;
}

}  // namespace elastrun::launcher
