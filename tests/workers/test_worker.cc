// elastrun-test-worker: the worker every launcher test and benchmark runs.
// It joins the job's Gloo group from the torchrun environment, checks one
// allreduce, and can simulate training, fail in chosen ways, hang, ignore
// SIGTERM and mark readiness with files, so tests observe the launcher
// without sleeping. See Usage() for the flags.
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/strings.h"
#include "common/worker_env.h"
#include "worker/env.h"
#include "worker/process_group.h"
#include "worker/progress.h"
#include "worker/record.h"

namespace elastrun::test_worker {
namespace {

using worker::WorkerEnv;

constexpr char kUsage[] =
    "usage: elastrun-test-worker [flags]\n"
    "  --steps N            after the first barrier, N steps of allreduce + sleep\n"
    "  --step-ms M          sleep per step, milliseconds (default 0)\n"
    "  --fail-rank R        rank R fails (default: none)\n"
    "  --fail-mode MODE     sigkill | segv | exit:CODE | throw | stall (default\n"
    "                       throw); stall: spend --step-ms, report progress for the\n"
    "                       step it was to run, then block without entering its\n"
    "                       allreduce, so the other ranks wait there forever\n"
    "  --fail-restarts K    fail while TORCHELASTIC_RESTART_COUNT < K; -1: always\n"
    "                       (default 1: only the first attempt)\n"
    "  --fail-at-step S     fail at the start of step S instead of right after\n"
    "                       the first barrier (needs --steps > S)\n"
    "  --ready-dir DIR      after the first barrier, create DIR/ready.<restart>.<rank>\n"
    "                       holding CLOCK_REALTIME in nanoseconds\n"
    "  --hang               after the first barrier, block until killed\n"
    "  --ignore-sigterm     ignore SIGTERM\n"
    "  --print-env          print the contract variables as NAME=value\n"
    "  --agent-barrier NAME after the first barrier, meet every worker of every\n"
    "                       node at barrier NAME through the node daemon; with\n"
    "                       --ready-dir, DIR/arrive.* and DIR/passed.* get the\n"
    "                       times of arriving and passing\n"
    "  --delay-rank R       rank R sleeps --delay-ms before that barrier\n"
    "  --delay-ms M         (default 0)\n";

enum class FailMode { kSigkill, kSegv, kExit, kThrow, kStall };

struct Flags {
  int steps = 0;
  int step_ms = 0;
  int fail_rank = -1;
  FailMode fail_mode = FailMode::kThrow;
  int fail_exit_code = 1;
  int fail_restarts = 1;
  int fail_at_step = -1;
  std::string ready_dir;
  std::string agent_barrier;
  int delay_rank = -1;
  int delay_ms = 0;
  bool hang = false;
  bool ignore_sigterm = false;
  bool print_env = false;
};

absl::Status ParseFailMode(absl::string_view text, Flags* flags) {
  if (text == "sigkill") {
    flags->fail_mode = FailMode::kSigkill;
  } else if (text == "segv") {
    flags->fail_mode = FailMode::kSegv;
  } else if (text == "throw") {
    flags->fail_mode = FailMode::kThrow;
  } else if (text == "stall") {
    flags->fail_mode = FailMode::kStall;
  } else if (absl::ConsumePrefix(&text, "exit:")) {
    absl::StatusOr<int64_t> code = ParseInt(text, "--fail-mode exit:CODE", 0, 255);
    if (!code.ok()) return code.status();
    flags->fail_mode = FailMode::kExit;
    flags->fail_exit_code = static_cast<int>(*code);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fail-mode: '", text, "' is not sigkill, segv, exit:CODE, throw or stall"));
  }
  return absl::OkStatus();
}

// Accepts "--flag value" and "--flag=value".
absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    auto take = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(name + " needs a value");
      return std::string(argv[++i]);
    };
    auto take_int = [&](int64_t min, int64_t max) -> absl::StatusOr<int> {
      absl::StatusOr<std::string> v = take();
      if (!v.ok()) return v.status();
      absl::StatusOr<int64_t> n = ParseInt(*v, name, min, max);
      if (!n.ok()) return n.status();
      return static_cast<int>(*n);
    };
    absl::Status status;
    auto set_int = [&](int* out, int64_t min, int64_t max) {
      absl::StatusOr<int> n = take_int(min, max);
      if (n.ok()) *out = *n;
      status = n.status();
    };
    auto set_bool = [&](bool* out) {
      *out = true;
      if (has_value) status = absl::InvalidArgumentError(name + " takes no value");
    };
    if (name == "--steps") {
      set_int(&flags.steps, 0, INT32_MAX);
    } else if (name == "--step-ms") {
      set_int(&flags.step_ms, 0, INT32_MAX);
    } else if (name == "--fail-rank") {
      set_int(&flags.fail_rank, 0, INT32_MAX);
    } else if (name == "--fail-restarts") {
      set_int(&flags.fail_restarts, -1, INT32_MAX);
    } else if (name == "--fail-at-step") {
      set_int(&flags.fail_at_step, 0, INT32_MAX);
    } else if (name == "--fail-mode") {
      absl::StatusOr<std::string> v = take();
      status = v.ok() ? ParseFailMode(*v, &flags) : v.status();
    } else if (name == "--ready-dir") {
      absl::StatusOr<std::string> v = take();
      if (v.ok()) flags.ready_dir = *v;
      status = v.status();
    } else if (name == "--agent-barrier") {
      absl::StatusOr<std::string> v = take();
      if (v.ok()) flags.agent_barrier = *v;
      status = v.status();
    } else if (name == "--delay-rank") {
      set_int(&flags.delay_rank, 0, INT32_MAX);
    } else if (name == "--delay-ms") {
      set_int(&flags.delay_ms, 0, INT32_MAX);
    } else if (name == "--hang") {
      set_bool(&flags.hang);
    } else if (name == "--ignore-sigterm") {
      set_bool(&flags.ignore_sigterm);
    } else if (name == "--print-env") {
      set_bool(&flags.print_env);
    } else {
      status = absl::InvalidArgumentError(absl::StrCat("unknown flag '", argv[i], "'"));
    }
    if (!status.ok()) return status;
  }
  if (flags.fail_at_step >= 0 && flags.fail_at_step >= flags.steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fail-at-step ", flags.fail_at_step, " needs --steps greater than it"));
  }
  return flags;
}

int64_t RealtimeNanos() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Creates DIR/ready.<restart>.<rank> atomically (write a temporary, rename),
// so a watcher never reads a partial time.
void WriteReadyFile(const std::string& dir, const WorkerEnv& env,
                    const std::string& kind = "ready") {
  const std::string name = absl::StrCat(kind, ".", env.restart_count, ".", env.rank);
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp.", ::getpid());
  const std::string contents = absl::StrCat(RealtimeNanos(), "\n");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, contents.data(), contents.size()) !=
                    static_cast<ssize_t>(contents.size()) ||
      ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error(
        absl::StrCat("cannot create ready file ", path, ": ", std::strerror(errno)));
  }
}

void PrintEnv() {
  for (const char* name :
       {env::kRank, env::kLocalRank, env::kWorldSize, env::kLocalWorldSize,
        env::kGroupRank, env::kGroupWorldSize, env::kRoleRank, env::kRoleWorldSize,
        env::kRoleName, env::kMasterAddr, env::kMasterPort, env::kRestartCount,
        env::kMaxRestarts, env::kRunId, env::kErrorFile, env::kUseAgentStore,
        env::kOmpNumThreads, env::kAgentSocket, env::kRound, env::kSnapshot}) {
    if (const char* value = std::getenv(name)) std::printf("%s=%s\n", name, value);
  }
  std::fflush(stdout);
}

// Fails as asked, in place of running step `step` (0: right after the
// first barrier, before any step). Never returns.
[[noreturn]] void Fail(const Flags& flags, const WorkerEnv& env, const std::string& where,
                       int step) {
  std::fprintf(stderr, "rank %d: injected failure %s (restart %d)\n", env.rank,
               where.c_str(), env.restart_count);
  std::fflush(stdout);
  std::fflush(stderr);
  switch (flags.fail_mode) {
    case FailMode::kStall:
      // A rank busy elsewhere (a slow data loader, a deadlock of its own):
      // it still reports the step, newer than any other rank's last, so
      // that a hang detector finds the ranks left inside the collective.
      if (flags.step_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(flags.step_ms));
      }
      worker::ReportProgress(step + 1, {});
      for (;;) ::pause();
    case FailMode::kSigkill:
      ::raise(SIGKILL);
      break;
    case FailMode::kSegv:
      // Default action, whatever handler a library installed: die by SIGSEGV.
      ::signal(SIGSEGV, SIG_DFL);
      ::raise(SIGSEGV);
      break;
    case FailMode::kExit:
      // _Exit: static destructors would race Gloo's threads.
      std::_Exit(flags.fail_exit_code);
    case FailMode::kThrow:
      throw std::runtime_error(absl::StrCat("injected failure on rank ", env.rank, " ",
                                            where, " (restart ", env.restart_count, ")"));
  }
  std::abort();  // Not reached.
}

void Check(const absl::Status& status) {
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "elastrun-test-worker: %s\n%s",
                 std::string(parsed.status().message()).c_str(), kUsage);
    return 2;
  }
  const Flags& flags = *parsed;
  if (flags.ignore_sigterm) ::signal(SIGTERM, SIG_IGN);
  if (flags.print_env) PrintEnv();

  absl::StatusOr<WorkerEnv> parsed_env = WorkerEnv::FromEnvironment();
  if (!parsed_env.ok()) {
    std::fprintf(stderr, "elastrun-test-worker: %s\n",
                 std::string(parsed_env.status().message()).c_str());
    return 2;
  }
  const WorkerEnv& env = *parsed_env;
  const bool fails = env.rank == flags.fail_rank &&
                     (flags.fail_restarts < 0 || env.restart_count < flags.fail_restarts);

  absl::StatusOr<std::unique_ptr<worker::ProcessGroup>> created =
      worker::InitProcessGroup(env);
  Check(created.status());
  // Deliberately not owned by this scope: if an exception leaves Main, the
  // group must stay up until RunRecorded has written the error file, as a
  // Python worker's default group does. Otherwise peers see the connection
  // close first and their error files would look like the root cause.
  worker::ProcessGroup* const group = created->release();
  const int world = env.world_size;
  at::Tensor t = at::full({1}, static_cast<int64_t>(env.rank + 1), at::kLong);
  Check(group->AllReduce(t));
  const int64_t expected = static_cast<int64_t>(world) * (world + 1) / 2;
  if (t.item<int64_t>() != expected) {
    throw std::runtime_error(absl::StrCat("allreduce gave ", t.item<int64_t>(),
                                          ", expected ", expected));
  }
  Check(group->Barrier());
  if (!flags.ready_dir.empty()) WriteReadyFile(flags.ready_dir, env);
  if (!flags.agent_barrier.empty()) {
    if (env.rank == flags.delay_rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(flags.delay_ms));
    }
    if (!flags.ready_dir.empty()) WriteReadyFile(flags.ready_dir, env, "arrive");
    Check(worker::AgentBarrier(flags.agent_barrier, absl::Seconds(120)));
    if (!flags.ready_dir.empty()) WriteReadyFile(flags.ready_dir, env, "passed");
  }
  if (fails && flags.fail_at_step < 0) Fail(flags, env, "after the first barrier", 0);
  if (flags.hang) {
    for (;;) ::pause();
  }

  for (int step = 0; step < flags.steps; ++step) {
    if (fails && step == flags.fail_at_step) {
      Fail(flags, env, absl::StrCat("at step ", step), step);
    }
    at::Tensor ones = at::ones({1}, at::kLong);
    Check(group->AllReduce(ones));
    if (ones.item<int64_t>() != world) {
      throw std::runtime_error(absl::StrCat("step ", step, ": allreduce gave ",
                                            ones.item<int64_t>(), ", expected ", world));
    }
    // Progress heartbeats to the agent (no-op without one); `elastrun
    // status` shows the newest.
    worker::ReportProgress(step + 1, {{"world", static_cast<double>(world)}});
    if (flags.step_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(flags.step_ms));
    }
  }
  if (flags.steps > 0) Check(group->Barrier());
  delete group;
  std::printf("rank %d/%d ok restart=%d\n", env.rank, world, env.restart_count);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace elastrun::test_worker

int main(int argc, char** argv) {
  return elastrun::worker::RunRecorded(
      [&] { return elastrun::test_worker::Main(argc, argv); });
}
