// Joining the job's collective group from C++: the c10d TCPStore at
// MASTER_ADDR:MASTER_PORT and a Gloo process group over it, set up exactly
// as PyTorch's init_process_group("gloo", init_method="env://") does, so
// the launcher treats C++ and Python workers alike; with a GPU
// (ProcessGroupOptions::cuda_device) an NCCL group beside it, as
// init_process_group("cpu:gloo,cuda:nccl"). LibTorch's exceptions stop here:
// every call returns an absl::Status with a message a user can act on.
//
// Builds against LibTorch 1.13 and 2.x; the API differences are guarded in
// process_group.cc (see CollectiveBackend below).
#ifndef ELASTRUN_WORKER_PROCESS_GROUP_H_
#define ELASTRUN_WORKER_PROCESS_GROUP_H_

#include <chrono>
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
  // The GPU this rank trains on (cuda:N), or -1 for none. With a GPU, Create
  // also builds an NCCL group on it (timeout: collective_timeout), used for
  // CUDA tensors; CPU tensors and Barrier() stay on Gloo. Needs a build with
  // ELASTRUN_WITH_CUDA.
  int cuda_device = -1;
};

// The common base of ProcessGroupGloo and ProcessGroupNCCL: c10d::Backend
// since LibTorch 2.0, which split the backends from the c10d::ProcessGroup
// that dispatches to them by device; c10d::ProcessGroup itself before.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// Connects to the job's c10d TCPStore. Rank 0 hosts it (binding
// MASTER_PORT, or any free port if 0; read it back with getPort()) unless
// env.use_agent_store, in which case every rank is a client of the
// launcher's store. Errors: Unavailable when the store cannot be reached
// within options.store_timeout or rank 0 cannot bind the port.
absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ConnectStore(
    const WorkerEnv& env, const ProcessGroupOptions& options = {});

// A worker's process group(s) and the store under them: Gloo always, NCCL
// too when options.cuda_device >= 0. Not thread-safe: collectives must be
// issued in the same order on every rank, so one thread drives them.
class ProcessGroup {
 public:
  // Connects to the store and builds the process group; returns once every
  // rank of env.world_size has joined. Errors: ConnectStore()'s; Unavailable
  // when the other ranks do not all join within the shorter of
  // options.store_timeout and options.collective_timeout, or Gloo cannot
  // bind its interface; FailedPrecondition when options.cuda_device >= 0 in
  // a build without ELASTRUN_WITH_CUDA; InvalidArgument when that GPU does
  // not exist; Unavailable when NCCL cannot be set up on it.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(
      const WorkerEnv& env, const ProcessGroupOptions& options = {});
  // As above over an existing store (from ConnectStore(); tests).
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(
      const WorkerEnv& env, c10::intrusive_ptr<c10d::TCPStore> store,
      const ProcessGroupOptions& options = {});

  // Waits until every rank called Barrier() (on Gloo). Errors: Unavailable
  // when a peer died or the collective timed out.
  absl::Status Barrier();
  // Sums `tensor` over all ranks, in place: through NCCL for a CUDA tensor,
  // Gloo otherwise. Same errors as Barrier(); FailedPrecondition for a CUDA
  // tensor without an NCCL group.
  absl::Status AllReduce(at::Tensor& tensor);
  // Copies `tensor` from rank `root` to every rank, in place; the backend
  // as AllReduce().
  absl::Status Broadcast(at::Tensor& tensor, int root);

  // The c10d::ProcessGroup for collectives on tensors of `type` (what a
  // c10d::Reducer and c10d::broadcast_coalesced take): Gloo's for CPU,
  // NCCL's for CUDA. On LibTorch 1.13 that is the backend itself; from 2.0
  // one c10d::ProcessGroup with Gloo registered for CPU and NCCL for CUDA.
  // Owned here. Errors: FailedPrecondition for CUDA without an NCCL group
  // (cuda_device was -1, or the build has no CUDA); InvalidArgument for other
  // device types.
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> ForDevice(
      c10::DeviceType type) const;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // The GPU of the NCCL group, or -1 without one.
  int cuda_device() const { return cuda_device_; }
  const c10::intrusive_ptr<c10d::TCPStore>& store() const { return store_; }

 private:
  ProcessGroup(int rank, int world_size, c10::intrusive_ptr<c10d::TCPStore> store)
      : rank_(rank), world_size_(world_size), store_(std::move(store)) {}

  // The backend for collectives on `tensor`, or FailedPrecondition.
  absl::StatusOr<CollectiveBackend*> BackendFor(const at::Tensor& tensor, const char* what);
  // Waits for `work`, translating failures; `what` names the collective.
  absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);

  int rank_;
  int world_size_;
  int cuda_device_ = -1;
  // Declared first so the groups go before it: their threads use the store.
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
  c10::intrusive_ptr<CollectiveBackend> nccl_;  // null without a GPU
  // ForDevice()'s answers (see there); cuda_group_ null without NCCL.
  c10::intrusive_ptr<c10d::ProcessGroup> cpu_group_;
  c10::intrusive_ptr<c10d::ProcessGroup> cuda_group_;
};

namespace internal {
// Builds the NCCL backend of a rank on GPU `device` over `store`, with
// `timeout` per collective; makes that GPU the thread's current device.
// Defined in process_group_cuda.cc, compiled only with ELASTRUN_WITH_CUDA.
// Errors: InvalidArgument when the GPU does not exist; Unavailable when
// NCCL cannot be set up.
absl::StatusOr<c10::intrusive_ptr<CollectiveBackend>> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, int device,
    std::chrono::milliseconds timeout);
}  // namespace internal

// ProcessGroup::Create(env, options), under the name PyTorch users know.
inline absl::StatusOr<std::unique_ptr<ProcessGroup>> InitProcessGroup(
    const WorkerEnv& env, const ProcessGroupOptions& options = {}) {
  return ProcessGroup::Create(env, options);
}

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_PROCESS_GROUP_H_
