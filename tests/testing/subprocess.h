// Test helpers for multi-process tests: start a program in its own process
// group with its output captured to a file, wait for it with a deadline, and
// wait for files to appear (inotify) instead of sleeping. Every process a
// test starts is killed by process group and reaped when its Subprocess dies.
#ifndef ELASTRUN_TESTS_TESTING_SUBPROCESS_H_
#define ELASTRUN_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace elastrun::testing {

class Subprocess {
 public:
  // Starts `argv` (argv[0] looked up on PATH) with the test's environment plus
  // `extra_env` ("NAME=value", overriding), in a new process group, with
  // stdout and stderr both captured.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {});
  ~Subprocess();  // SIGKILLs the process group if still running, then reaps

  pid_t pid() const { return pid_; }
  // Waits for the exit; returns the wait status. DeadlineExceeded after
  // `timeout` (the process is left running).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // The process's own exit code, or 128+signal, once waited for.
  std::optional<int> exit_code() const { return exit_code_; }
  void Signal(int sig);
  // Everything written to stdout and stderr so far.
  std::string Output() const;

 private:
  Subprocess(pid_t pid, int pidfd, std::string output_path)
      : pid_(pid), pidfd_(pidfd), output_path_(std::move(output_path)) {}
  pid_t pid_;
  int pidfd_;
  std::string output_path_;
  std::optional<int> exit_code_;
};

// Runs to completion; fails the wait with DeadlineExceeded past `timeout`.
struct RunResult {
  int exit_code = -1;
  std::string output;
};
absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                              const std::vector<std::string>& extra_env = {},
                              absl::Duration timeout = absl::Seconds(120));

// Waits until `dir` holds at least `count` entries whose names start with
// `prefix`; returns their names. Event-driven (inotify), with a deadline.
absl::StatusOr<std::vector<std::string>> WaitForFiles(const std::string& dir,
                                                      const std::string& prefix,
                                                      size_t count,
                                                      absl::Duration timeout);

// Entries of `dir` starting with `prefix`, sorted.
std::vector<std::string> ListFiles(const std::string& dir, const std::string& prefix = "");

// Pids of live processes whose environment contains `entry` ("NAME=value").
// Tests tag everything they start with a unique entry and use this to prove
// that nothing was left behind.
std::vector<pid_t> ProcessesWithEnv(const std::string& entry);

// Waits until process `pid` (any process, not only a child) has exited:
// its pidfd becomes readable. True at once when it is gone already.
bool WaitProcessExited(pid_t pid, absl::Duration timeout);

// SIGKILLs the process group of each of `pids` (each one's group read before
// any is killed; never the test's own), as a lost machine would, and waits
// until every one of them has exited. False when a group cannot be read or
// is the test's, or a process outlives `timeout`.
bool KillGroupsAsLost(const std::vector<pid_t>& pids, absl::Duration timeout);

// A new empty folder under $TMPDIR (or /tmp).
std::string MakeTempDir(const std::string& tag);

// Moves this process into a mount namespace of its own (as root, or as
// this uid in a new user namespace), so that a tmpfs it mounts is seen by
// nobody else and goes with it. False where neither is allowed (skip).
// Call while the process has one thread.
bool EnterPrivateMountNamespace();
// Writes file `path` until its file system is full; false if it never
// fills (or the file cannot be written).
bool FillFileSystem(const std::string& path);
std::string ReadFile(const std::string& path);
bool FileExists(const std::string& path);
// Writes `contents` to `path`, created (or truncated) with `mode` (0755 for
// a script); returns `path` ("" when it cannot be written).
std::string WriteFile(const std::string& path, const std::string& contents,
                      mode_t mode = 0644);
// WriteFile owner-only (0600), as a token file must be.
std::string WriteOwnerOnlyFile(const std::string& path, const std::string& contents);

// A loopback port with nothing listening (bound, read back, released), or
// -1 when none can be bound.
int FreeLoopbackPort();

// Where the build put binaries (the build's own, or $ELASTRUN_BIN_DIR).
std::string BinDir();
// The source tree (the build's own, or $ELASTRUN_SOURCE_DIR).
std::string SourceDir();
// Debian's python3 with torch, or empty when it lacks torch.
std::string TorchPython();

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_TESTING_SUBPROCESS_H_
