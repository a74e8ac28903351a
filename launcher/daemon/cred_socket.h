// The daemon's credential socket: how a local user who cannot read the
// cluster token proves who they are to the service. elastrund (which holds
// the token) listens on a unix stream socket open to every local user; the
// kernel tells it the caller's uid and gid (SO_PEERCRED), and it answers one
// line, a credential for exactly that uid (common/auth.h), then closes. A
// user can only ever get a credential naming themselves.
#ifndef ELASTRUN_LAUNCHER_DAEMON_CRED_SOCKET_H_
#define ELASTRUN_LAUNCHER_DAEMON_CRED_SOCKET_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/clock.h"

namespace elastrun::launcher {

struct CredSocketOptions {
  // The socket's path; its folder is created (0755) when missing.
  std::string path;
  // The cluster token credentials are signed with. Required.
  std::string token;
  // Time for credentials' expiry; not owned.
  const Clock* clock = &RealClock();
  // How long a credential is valid.
  absl::Duration life = auth::kCredentialLife;
  // Replaces accept4(listen_fd, ...) (tests inject EMFILE); empty: the real.
  std::function<int(int listen_fd)> accept_for_test;
};

// The socket's default path: /run/elastrund/cred.sock for root (euid 0),
// else $XDG_RUNTIME_DIR/elastrund-cred.sock; empty when there is no
// $XDG_RUNTIME_DIR.
std::string DefaultCredSocket(const auth::EnvLookup& env, uid_t euid);

// Serves credentials on a thread of its own until destroyed (then the
// socket file is removed). Thread-safe to destroy from any thread.
class CredSocket {
 public:
  // Binds and starts serving. Errors: InvalidArgument (no token, a path
  // too long for a unix socket), AlreadyExists (a live daemon answers at
  // the path), FailedPrecondition (something else is at the path, or it
  // cannot be bound), naming the path.
  static absl::StatusOr<std::unique_ptr<CredSocket>> Create(CredSocketOptions options);
  ~CredSocket();

  const std::string& path() const { return options_.path; }

 private:
  CredSocket(CredSocketOptions options, int listen_fd, int stop_fd[2]);
  void Serve();
  void Answer(int fd);
  // Out of descriptors: frees the spare one to take the waiting caller,
  // tells it so and closes it, then takes a spare again.
  void Shed();

  const CredSocketOptions options_;
  const int listen_fd_;
  int stop_read_;   // the serving thread polls it: readable means stop
  int stop_write_;  // closed by the destructor
  int spare_fd_ = -1;  // /dev/null, held for Shed
  std::thread thread_;
};

// Asks the daemon listening at `path` for a credential of this process's
// user. Unavailable naming the path when no daemon answers there (missing,
// refused), DeadlineExceeded after `timeout`, FailedPrecondition with the
// daemon's reason when it answers an error.
absl::StatusOr<std::string> FetchCredential(const std::string& path,
                                            absl::Duration timeout);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_CRED_SOCKET_H_
