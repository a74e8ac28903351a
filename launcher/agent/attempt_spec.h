// What an attempt is and how it ended: the types shared by the agent's
// parts (attempt_run.h, agent.h) and its callers (`elastrun run`, elastrund).
#ifndef ELASTRUN_LAUNCHER_AGENT_ATTEMPT_SPEC_H_
#define ELASTRUN_LAUNCHER_AGENT_ATTEMPT_SPEC_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "launcher/agent/liveness.h"
#include "launcher/agent/supervisor.h"

namespace elastrun::launcher {

// One line of a worker's output, for AgentOptions::on_output_line.
struct OutputLine {
  int local_rank = 0;
  int rank = 0;
  bool is_stderr = false;
  absl::string_view text;  // without the newline; valid during the call
};

// Where one worker's output goes.
struct WorkerOutput {
  std::string stdout_log;  // file path; empty: no log file
  std::string stderr_log;
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  std::string prefix;  // before each console line, e.g. "[rank0]:"
};

struct AttemptSpec {
  // The job this attempt is of (elastrund's job id). A worker's datagrams
  // are taken as this job's, from a node of workers.size() workers,
  // whatever they say: the worker's secret binds them to its attempt.
  // Empty: the launcher runs one job (its datagrams name none).
  std::string job_id;
  std::vector<WorkerSpec> workers;
  std::vector<WorkerOutput> outputs;  // one per worker, same order
  // What a standby for the next attempt runs: the program and the part of
  // the environment that does not depend on the attempt.
  std::vector<std::string> standby_argv;
  std::vector<std::string> standby_env;
  // Where and as whom standbys run: the workers' folder and user (a set is
  // used only by an attempt with the same).
  std::string standby_cwd;
  std::optional<ProcessCredentials> standby_run_as;
  // Log files must be new (O_EXCL): never truncate or write through
  // something already at their path (elastrund's fresh attempt folders).
  bool new_log_files = false;
  // Whether another attempt can follow this one (restarts left, or rounds
  // that do not count as restarts): standbys are started only then.
  bool next_attempt_possible = true;
  // The port of the job's c10d store when its rank 0 runs here (0: not
  // here, or unknown). Then workers that wait for an activation (standbys,
  // and new workers under --standby) get theirs rank 0 first, and the others
  // once the store listens, or kStoreGateMax after rank 0 began: a c10d
  // client that finds no store sleeps a whole second before it tries again,
  // and a warm worker is always faster than rank 0 to the store.
  int store_port = 0;
  // Called on the agent's thread with every complete line a worker of this
  // attempt writes (e.g. to forward logs to the service, tagged with the
  // attempt's job); must not block for long. Empty: AgentOptions'
  // on_output_line, if any.
  std::function<void(const OutputLine&)> on_output_line;
  // Hang detection (liveness.h). Off unless set: BuildAttempt sets it from
  // GroupSpec (where the default is derived), specs built by hand opt in.
  HangTimeout hang_timeout = HangTimeout::Off();
  // Other nodes run ranks of this attempt's round (HangPolicy::other_nodes).
  bool other_nodes = false;
};

// How long activations wait for the store to listen once rank 0 runs (a
// program that hosts no store there loses at most this, once per attempt).
inline constexpr absl::Duration kStoreGateMax = absl::Seconds(1);

struct AttemptOutcome {
  enum class Kind {
    kSucceeded,  // every worker exited 0
    kFailed,     // a worker failed (first_failure) or could not start
    kStopped,    // stopped by a signal to the launcher or Agent::Stop
  };
  Kind kind = Kind::kFailed;
  std::optional<WorkerExit> first_failure;
  std::vector<WorkerExit> exits;
  // A worker could not be started (then first_failure is empty).
  absl::Status spawn_error;
  // kStopped: the signal that stopped the attempt.
  int stop_signal = 0;
  // The workers were activated standbys rather than new processes.
  bool from_standby = false;
  // Processes of the group outlived SIGKILL and could not be reaped.
  bool leftovers = false;
  // Workers SIGKILL did not end within the reap limit (D state): the
  // attempt ended without them (Supervisor::unreaped).
  std::vector<WorkerExit> unreaped;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_ATTEMPT_SPEC_H_
