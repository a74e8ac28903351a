#include "launcher/cli/run_local_runner.h"

#include <stdlib.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/worker_env.h"
#include "launcher/agent/attempt.h"

namespace elastrun::launcher {
namespace {

std::string Python() {
  const char* py = getenv("ELASTRUN_PYTHON");
  return py && *py ? py : "python3";
}

}  // namespace

LocalAttemptRunner::LocalAttemptRunner(const RunOptions& o, AttemptRunner* inner)
    : o_(o), inner_(inner), argv_(WorkerArgv(o, Python())) {}

void LocalAttemptRunner::Start(uint64_t id, AttemptSpec spec,
                               std::function<void(const AttemptOutcome&)> done) {
  for (size_t i = 0; i < spec.workers.size(); ++i) {
    WorkerSpec& w = spec.workers[i];
    w.process.argv = WorkerArgvFor(argv_, w.local_rank);
    for (std::string& e : w.process.env) {
      if (absl::StartsWith(e, absl::StrCat(env::kRunId, "="))) {
        e = absl::StrCat(env::kRunId, "=", o_.run_id);
      }
    }
    WorkerOutput& out = spec.outputs[i];
    const int redirected = o_.redirects.For(w.local_rank);
    const int teed = o_.tee.For(w.local_rank);
    const bool shown =
        !o_.local_ranks_filter || o_.local_ranks_filter->count(w.local_rank) > 0;
    out.stdout_to_console = shown && (!(redirected & kStdOut) || (teed & kStdOut));
    out.stderr_to_console = shown && (!(redirected & kStdErr) || (teed & kStdErr));
  }
  if (!spec.standby_argv.empty()) spec.standby_argv = argv_;
  if (HasLocalRankMacro(argv_)) spec.standby_argv.clear();
  if (!spec.workers.empty()) {
    WriteAll(STDERR_FILENO,
             absl::StrCat("elastrun: ",
                          Describe(spec.workers[0].process.env, o_.max_restarts), "\n"));
  }
  inner_->Start(id, std::move(spec), std::move(done));
}

std::string LocalAttemptRunner::Describe(const std::vector<std::string>& env,
                                         int max_restarts) {
  auto get = [&env](const char* name) {
    const std::string prefix = absl::StrCat(name, "=");
    for (const std::string& e : env) {
      if (absl::StartsWith(e, prefix)) return e.substr(prefix.size());
    }
    return std::string("?");
  };
  int first = 0, local = 0;
  const bool counted = absl::SimpleAtoi(get(env::kRank), &first) &&
                       absl::SimpleAtoi(get(env::kLocalWorldSize), &local);
  return absl::StrCat("round ", get(env::kRound), ": group rank ", get(env::kGroupRank),
                      " of ", get(env::kGroupWorldSize), " node(s), ranks ",
                      counted ? absl::StrCat(first, "..", first + local - 1) : "?",
                      " of world size ", get(env::kWorldSize), ", restart ",
                      get(env::kRestartCount), " of ", max_restarts);
}

}  // namespace elastrun::launcher
