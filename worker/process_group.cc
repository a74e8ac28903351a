#include "worker/process_group.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace elastrun::worker {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// The text of the exception in flight, without c10's C++ backtrace (which
// says nothing to a user and can be hundreds of lines).
std::string CurrentExceptionText() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::string Endpoint(const WorkerEnv& env) {
  return absl::StrCat(env.master_addr, ":", env.master_port);
}

// Loopback as Gloo would see it: 127.0.0.0/8, ::1 and "localhost".
bool IsLoopback(absl::string_view host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// Gloo devices chosen as PyTorch's ProcessGroupGloo binding does
// (GLOO_SOCKET_IFNAME, else the default device), plus a loopback shortcut:
// with a loopback master every rank is on this host, and the default device
// fails on hosts whose name does not resolve.
std::vector<std::shared_ptr<::gloo::transport::Device>> GlooDevices(
    const WorkerEnv& env, const ProcessGroupOptions& options) {
  std::string interfaces = options.gloo_interfaces;
  if (interfaces.empty()) {
    const char* from_env = std::getenv("GLOO_SOCKET_IFNAME");
    if (from_env != nullptr) interfaces = from_env;
  }
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (!interfaces.empty()) {
    for (absl::string_view name : absl::StrSplit(interfaces, ',', absl::SkipEmpty())) {
      devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(std::string(name)));
    }
  } else if (IsLoopback(env.master_addr)) {
    devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return devices;
}

// Whether host:port accepts a TCP connection within `wait`.
bool Accepts(const std::string& host, int port, std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return false;
  }
  bool ok = false;
  for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      ok = poll(&p, 1, static_cast<int>(wait.count())) == 1 &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return ok;
}

// Waits until the store's port accepts connections, or `timeout` passes.
// libtorch 1.13's TCPStore client sleeps a whole second after a refused
// connection; ranks start together, so without this the ranks that are
// faster than rank 0 lose that second on every start and restart.
void WaitForStoreListening(const WorkerEnv& env, absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + ToChrono(timeout);
  auto pause = std::chrono::milliseconds(1);
  while (!Accepts(env.master_addr, env.master_port, std::chrono::milliseconds(200)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// Create's refusal of a GPU in a build without CUDA, before any connecting.
absl::Status CheckCudaBuild(const ProcessGroupOptions& options) {
  if (options.cuda_device >= 0 && !ELASTRUN_WITH_CUDA) {
    return absl::FailedPreconditionError(
        absl::StrCat("this build has no CUDA (ELASTRUN_WITH_CUDA off): cannot use cuda:",
                     options.cuda_device));
  }
  return absl::OkStatus();
}

// The store the group's keys go through, with PyTorch's prefixes: the
// launcher's store is shared by all attempts, so keys are per attempt;
// "default_pg" keeps the group's keys apart from anything else using it.
c10::intrusive_ptr<c10d::Store> GroupStore(const WorkerEnv& env,
                                           const c10::intrusive_ptr<c10d::TCPStore>& store) {
  c10::intrusive_ptr<c10d::Store> base = store;
  if (env.use_agent_store) {
    base = c10::make_intrusive<c10d::PrefixStore>(
        absl::StrCat("/worker/attempt_", env.restart_count), base);
  }
  return c10::make_intrusive<c10d::PrefixStore>("default_pg", base);
}

#if TORCH_VERSION_MAJOR >= 2
// Since LibTorch 2.0 collectives reach a backend through a c10d::ProcessGroup
// that picks it by the tensors' device, as Python's init_process_group
// ("cpu:gloo,cuda:nccl") builds it: Gloo is the default and CPU's backend,
// NCCL (if any) CUDA's. Its constructor took ProcessGroup::Options (naming
// the default backend) until the 2.6 release (2.5 by some accounts: the
// change was reverted and relanded around that branch cut), so the header
// is asked which it has; PG is a template parameter so that only the
// matching branch compiles.
template <typename PG = c10d::ProcessGroup>
c10::intrusive_ptr<PG> MakeDispatchingGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                            int rank, int world_size,
                                            std::chrono::milliseconds timeout,
                                            c10::intrusive_ptr<CollectiveBackend> gloo,
                                            c10::intrusive_ptr<CollectiveBackend> nccl) {
  using BackendType = typename PG::BackendType;
  c10::intrusive_ptr<PG> group;
  if constexpr (std::is_constructible_v<PG, const c10::intrusive_ptr<c10d::Store>&, int, int>) {
    group = c10::make_intrusive<PG>(store, rank, world_size);
    group->setDefaultBackend(BackendType::GLOO);
  } else {
    group = c10::make_intrusive<PG>(store, rank, world_size,
                                    c10::make_intrusive<typename PG::Options>("gloo", timeout));
  }
  group->setBackend(c10::DeviceType::CPU, BackendType::GLOO, gloo);
  if (nccl) group->setBackend(c10::DeviceType::CUDA, BackendType::NCCL, nccl);
  return group;
}
#endif

}  // namespace

absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> ConnectStore(
    const WorkerEnv& env, const ProcessGroupOptions& options) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = env.rank == 0 && !env.use_agent_store;
  opts.numWorkers = static_cast<std::size_t>(env.world_size);
  opts.waitWorkers = options.wait_for_workers;
  opts.timeout = ToChrono(options.store_timeout);
  // As PyTorch's env:// (multi_tenant=True): one server per port per process.
  opts.multiTenant = true;
  if (!opts.isServer) WaitForStoreListening(env, options.store_timeout);
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (...) {
    const std::string cause = CurrentExceptionText();
    if (opts.isServer) {
      return absl::UnavailableError(absl::StrCat(
          "rank 0 cannot host the c10d store at ", Endpoint(env),
          " (is MASTER_PORT already in use, or MASTER_ADDR not an address of "
          "this host?): ", cause));
    }
    return absl::UnavailableError(absl::StrCat(
        "rank ", env.rank, " cannot reach the c10d store at ", Endpoint(env),
        " within ", absl::FormatDuration(options.store_timeout), " (",
        env.use_agent_store ? "the launcher hosts it" : "rank 0 hosts it",
        "; check that it is running and that MASTER_ADDR/MASTER_PORT are "
        "right): ",
        cause));
  }
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(
    const WorkerEnv& env, const ProcessGroupOptions& options) {
  RETURN_IF_ERROR(CheckCudaBuild(options));
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store = ConnectStore(env, options);
  if (!store.ok()) return store.status();
  return Create(env, *std::move(store), options);
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(
    const WorkerEnv& env, c10::intrusive_ptr<c10d::TCPStore> store,
    const ProcessGroupOptions& options) {
  RETURN_IF_ERROR(CheckCudaBuild(options));
  std::unique_ptr<ProcessGroup> group(new ProcessGroup(env.rank, env.world_size, store));
  c10::intrusive_ptr<c10d::Store> group_store;
  try {
    group_store = GroupStore(env, store);
    auto gloo_options =
        c10d::ProcessGroupGloo::Options::create(ToChrono(options.collective_timeout));
    gloo_options->devices = GlooDevices(env, options);
    gloo_options->threads = options.gloo_threads;
    group->gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(group_store, env.rank,
                                                              env.world_size, gloo_options);
  } catch (...) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", env.rank, " of ", env.world_size,
        " could not form the Gloo process group through the c10d store at ",
        Endpoint(env), " within ", absl::FormatDuration(options.collective_timeout),
        " (did every rank start, with the same WORLD_SIZE?): ",
        CurrentExceptionText()));
  }
#if ELASTRUN_WITH_CUDA
  if (options.cuda_device >= 0) {
    // Its own key space, as Python's per-device backend stores.
    ASSIGN_OR_RETURN(group->nccl_, internal::MakeNcclBackend(
                                       c10::make_intrusive<c10d::PrefixStore>("cuda", group_store),
                                       env.rank, env.world_size, options.cuda_device,
                                       ToChrono(options.collective_timeout)));
    group->cuda_device_ = options.cuda_device;
  }
#endif
#if TORCH_VERSION_MAJOR >= 2
  try {
    group->cpu_group_ =
        MakeDispatchingGroup(group_store, env.rank, env.world_size,
                             ToChrono(options.collective_timeout), group->gloo_, group->nccl_);
  } catch (...) {
    return absl::InternalError(
        absl::StrCat("could not set up the c10d process group: ", CurrentExceptionText()));
  }
  if (group->nccl_) group->cuda_group_ = group->cpu_group_;
#else
  // Before 2.0 each backend is a c10d::ProcessGroup itself.
  group->cpu_group_ = group->gloo_;
  group->cuda_group_ = group->nccl_;
#endif
  return group;
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> ProcessGroup::ForDevice(
    c10::DeviceType type) const {
  switch (type) {
    case c10::DeviceType::CPU:
      return cpu_group_;
    case c10::DeviceType::CUDA:
      if (cuda_group_) return cuda_group_;
      if (!ELASTRUN_WITH_CUDA) {
        return absl::FailedPreconditionError(
            "this build has no CUDA (ELASTRUN_WITH_CUDA off): no NCCL group for CUDA tensors");
      }
      return absl::FailedPreconditionError(
          "no NCCL group for CUDA tensors: the process group was created without a GPU "
          "(ProcessGroupOptions::cuda_device -1)");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "no process group for ", c10::DeviceTypeName(type), " tensors (only CPU and CUDA)"));
  }
}

absl::StatusOr<CollectiveBackend*> ProcessGroup::BackendFor(const at::Tensor& tensor,
                                                            const char* what) {
  if (!tensor.is_cuda()) return gloo_.get();
  if (nccl_) return nccl_.get();
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> cuda = ForDevice(c10::DeviceType::CUDA);
  return absl::FailedPreconditionError(
      absl::StrCat(what, " of a CUDA tensor on rank ", rank_, ": ", cuda.status().message()));
}

absl::Status ProcessGroup::Wait(const c10::intrusive_ptr<c10d::Work>& work,
                                const char* what) {
  try {
    work->wait();
    return absl::OkStatus();
  } catch (...) {
    return absl::UnavailableError(absl::StrCat(
        what, " failed on rank ", rank_, " of ", world_size_,
        " (a peer probably exited or timed out): ", CurrentExceptionText()));
  }
}

absl::Status ProcessGroup::Barrier() {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = gloo_->barrier();
  } catch (...) {
    return absl::UnavailableError(absl::StrCat("barrier failed on rank ", rank_,
                                               ": ", CurrentExceptionText()));
  }
  return Wait(work, "barrier");
}

absl::Status ProcessGroup::AllReduce(at::Tensor& tensor) {
  ASSIGN_OR_RETURN(CollectiveBackend* backend, BackendFor(tensor, "allreduce"));
  std::vector<at::Tensor> tensors = {tensor};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = backend->allreduce(tensors);
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat(
        "allreduce rejected on rank ", rank_, ": ", CurrentExceptionText()));
  }
  return Wait(work, "allreduce");
}

absl::Status ProcessGroup::Broadcast(at::Tensor& tensor, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not a rank of 0..", world_size_ - 1));
  }
  ASSIGN_OR_RETURN(CollectiveBackend* backend, BackendFor(tensor, "broadcast"));
  std::vector<at::Tensor> tensors = {tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = backend->broadcast(tensors, opts);
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast rejected on rank ", rank_, ": ", CurrentExceptionText()));
  }
  return Wait(work, "broadcast");
}

}  // namespace elastrun::worker
