// The worker's half of the standby protocol (common/standby.h): how a
// process started ahead of time by `elastrun run --standby` learns which
// rank of which attempt it is.
#ifndef ELASTRUN_WORKER_STANDBY_H_
#define ELASTRUN_WORKER_STANDBY_H_

#include "absl/status/status.h"

namespace elastrun::worker {

// When ELASTRUN_STANDBY_FD is set: tells the launcher that this process has
// started, waits for the activation, sets its entries in the environment
// (RANK, MASTER_PORT, ...), and closes the socket. If the launcher closes the
// socket instead (the standby is not needed), the process exits 0 right
// here. Without ELASTRUN_STANDBY_FD: returns OK at once. Idempotent.
//
// WorkerEnv::FromEnvironment() calls it first; a program that reads the
// environment before that (or does heavy set-up it wants done while on
// standby) calls it itself at the right point.
// Errors: a malformed ELASTRUN_STANDBY_FD or activation.
absl::Status AwaitStandbyActivation();

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_STANDBY_H_
