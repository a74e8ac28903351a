// Joining the job's collective group from C++: the c10d TCPStore at
// MASTER_ADDR:MASTER_PORT and a Gloo process group over it, set up exactly
// as PyTorch's init_process_group("gloo", init_method="env://") does, so
// the launcher treats C++ and Python workers alike. LibTorch's exceptions
// stop here: every call returns an absl::Status with a message a user can
// act on.
#ifndef ELASTRUN_WORKER_PROCESS_GROUP_H_
#define ELASTRUN_WORKER_PROCESS_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/env.h"
#include "worker/torch_pch.h"

namespace elastrun::worker {

struct ProcessGroupOptions {
  // How long to wait for connecting to the store. A rank that cannot reach
  // it within this fails with an error naming the address. In libtorch 1.13
  // it also bounds each wait on the store, so forming the group fails after
  // the shorter of this and collective_timeout when a rank is missing.
  absl::Duration store_timeout = absl::Minutes(5);
  // Timeout of each collective (and of forming the group, Gloo's ranks
  // finding each other through the store). PyTorch's default_pg_timeout.
  absl::Duration collective_timeout = absl::Minutes(30);
  // Rank 0's store waits in ConnectStore() until every rank has connected
  // (TCPStore's waitWorkers). Off by default: the process group's own
  // set-up waits for all ranks anyway, and this lets a caller read the port
  // of a store on port 0 before the others connect.
  bool wait_for_workers = false;
  // Network interface(s) for Gloo, comma-separated; empty means
  // GLOO_SOCKET_IFNAME, else loopback when MASTER_ADDR is a loopback
  // address, else the address this host's name resolves to (Gloo's default).
  std::string gloo_interfaces;
  // Gloo's worker threads, as PyTorch's default.
  int gloo_threads = 2;
};

// Connects to the job's c10d TCPStore. Rank 0 hosts it (binding
// MASTER_PORT, or any free port if 0; read it back with getPort()) unless
// env.use_agent_store, in which case every rank is a client of the
// launcher's store. Errors: Unavailable when the store cannot be reached
// within options.store_timeout or rank 0 cannot bind the port.
absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ConnectStore(
    const WorkerEnv& env, const ProcessGroupOptions& options = {});

// A worker's Gloo process group and the store under it. Not thread-safe:
// collectives must be issued in the same order on every rank, so one thread
// drives them.
class ProcessGroup {
 public:
  // Connects to the store and builds the process group; returns once every
  // rank of env.world_size has joined. Errors: ConnectStore()'s; Unavailable
  // when the other ranks do not all join within the shorter of
  // options.store_timeout and options.collective_timeout, or Gloo cannot
  // bind its interface.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(
      const WorkerEnv& env, const ProcessGroupOptions& options = {});
  // As above over an existing store (from ConnectStore(); tests).
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(
      const WorkerEnv& env, c10::intrusive_ptr<c10d::TCPStore> store,
      const ProcessGroupOptions& options = {});

  // Waits until every rank called Barrier(). Errors: Unavailable when a
  // peer died or the collective timed out.
  absl::Status Barrier();
  // Sums `tensor` over all ranks, in place. Same errors as Barrier().
  absl::Status AllReduce(at::Tensor& tensor);
  // Copies `tensor` from rank `root` to every rank, in place.
  absl::Status Broadcast(at::Tensor& tensor, int root);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // For code that needs the raw objects (e.g. a c10d::Reducer). Owned here.
  const c10::intrusive_ptr<c10d::ProcessGroupGloo>& gloo() const { return gloo_; }
  const c10::intrusive_ptr<c10d::TCPStore>& store() const { return store_; }

 private:
  ProcessGroup(int rank, int world_size, c10::intrusive_ptr<c10d::TCPStore> store,
               c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo)
      : rank_(rank), world_size_(world_size), store_(std::move(store)),
        gloo_(std::move(gloo)) {}

  // Waits for `work`, translating failures; `what` names the collective.
  absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

  int rank_;
  int world_size_;
  // Declared before gloo_ so the group goes first: its threads use the store.
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
};

// ProcessGroup::Create(env, options), under the name PyTorch users know.
inline absl::StatusOr<std::unique_ptr<ProcessGroup>> InitProcessGroup(
    const WorkerEnv& env, const ProcessGroupOptions& options = {}) {
  return ProcessGroup::Create(env, options);
}

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_PROCESS_GROUP_H_
