#include "launcher/protocol/failure.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "launcher/agent/attempt.h"
#include "launcher/agent/liveness.h"
#include "worker/error_file.h"

namespace elastrun::launcher {
namespace {

std::string Indent(const std::string& text, const std::string& pad) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty()) continue;
    absl::StrAppend(&out, pad, line, "\n");
  }
  return out;
}

}  // namespace

rendezvous::Failure NotStartedFailure(const std::string& node, int64_t round,
                                      std::string message, bool cannot_start) {
  rendezvous::Failure f;
  f.node_id = node;
  f.round = round;
  f.exit_code = 127;
  f.cannot_start = cannot_start;
  f.time = absl::Now();
  f.message = std::move(message);
  return f;
}

rendezvous::Failure MakeFailure(const std::string& node, int64_t round,
                                const WorkerExit& exit, const std::string& attempt_dir) {
  rendezvous::Failure f;
  f.node_id = node;
  f.round = round;
  f.local_rank = exit.local_rank;
  f.rank = exit.rank;
  f.exit_code = exit.exit_code;
  f.signal = exit.signal;
  f.time = exit.time;
  if (exit.hung) {
    // The hang is the cause; an error file it may have written while it
    // was being stopped is not.
    f.hung = true;
    f.hung_step = exit.hung_step;
    f.message = DescribeHang(exit.rank, exit.hung_step, exit.hung_for);
    return f;
  }
  auto record = worker::ReadErrorFile(ErrorFilePath(attempt_dir, exit.local_rank));
  if (record.ok()) {
    f.message = record->message;
    f.traceback = record->traceback;
  } else if (!absl::IsNotFound(record.status())) {
    f.message = absl::StrCat("(unreadable error file: ", record.status().message(), ")");
  }
  return f;
}

std::string FormatRootCause(const rendezvous::Failure& f, const std::string& host,
                            const std::string& attempt_dir) {
  WorkerExit as_exit;
  as_exit.exit_code = f.exit_code;
  as_exit.signal = f.signal;
  std::string out = "Root cause (first observed failure):\n";
  absl::StrAppend(&out, "  time       : ",
                  absl::FormatTime("%Y-%m-%d %H:%M:%E3S %Z", f.time, absl::UTCTimeZone()),
                  "\n");
  absl::StrAppend(&out, "  host       : ", host, "\n");
  absl::StrAppend(&out, "  rank       : ", f.rank, " (local_rank: ", f.local_rank, ")\n");
  absl::StrAppend(&out, "  exit       : ", DescribeExit(as_exit), "\n");
  if (f.hung) {
    absl::StrAppend(&out, "  hang       : ", f.message,
                    "; its stacks are in its stderr.log\n");
  } else if (f.message.empty()) {
    absl::StrAppend(&out, "  error_file : <N/A> (the worker wrote none",
                    f.signal != 0 ? "; it was killed by a signal" : "", ")\n");
  } else {
    absl::StrAppend(&out, "  error_file : ", ErrorFilePath(attempt_dir, f.local_rank),
                    "\n");
    absl::StrAppend(&out, "  message    : ", f.message, "\n");
    if (!f.traceback.empty()) {
      absl::StrAppend(&out, "  traceback  :\n", Indent(f.traceback, "    "));
    }
  }
  absl::StrAppend(&out, "  logs       : ", attempt_dir, "/", f.local_rank, "/\n");
  return out;
}

std::string FormatFailureSummary(const std::string& run_id, const std::string& node,
                                 const rendezvous::RendezvousCore& core,
                                 const AttemptOutcome& last_attempt,
                                 const std::string& attempt_dir) {
  std::string out = absl::StrCat("elastrun: run ", run_id, " FAILED after ",
                                 core.restart_count(), " restart(s)\n");
  const auto& root = core.root_cause();
  if (!root) return out;
  absl::StrAppend(&out, FormatRootCause(*root, node, attempt_dir));
  std::string others;
  for (const WorkerExit& e : last_attempt.exits) {
    if (e.ok() ||
        (last_attempt.first_failure && e.pid == last_attempt.first_failure->pid)) {
      continue;
    }
    absl::StrAppend(&others, "  rank ", e.rank, " (local_rank: ", e.local_rank,
                    "): ", DescribeExit(e), " (stopped after the root cause)\n");
  }
  if (!others.empty())
    absl::StrAppend(&out, "Other workers of the last attempt:\n", others);
  return out;
}

}  // namespace elastrun::launcher
