#include "worker/process_group.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

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
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store = ConnectStore(env, options);
  if (!store.ok()) return store.status();
  return Create(env, *std::move(store), options);
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(
    const WorkerEnv& env, c10::intrusive_ptr<c10d::TCPStore> store,
    const ProcessGroupOptions& options) {
  try {
    // Key prefixes as PyTorch's: the launcher's store is shared by all
    // attempts, so keys are per attempt; "default_pg" keeps the group's keys
    // apart from anything else using the store.
    c10::intrusive_ptr<c10d::Store> base = store;
    if (env.use_agent_store) {
      base = c10::make_intrusive<c10d::PrefixStore>(
          absl::StrCat("/worker/attempt_", env.restart_count), base);
    }
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("default_pg", base);
    auto gloo_options =
        c10d::ProcessGroupGloo::Options::create(ToChrono(options.collective_timeout));
    gloo_options->devices = GlooDevices(env, options);
    gloo_options->threads = options.gloo_threads;
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank,
                                                           env.world_size, gloo_options);
    return std::unique_ptr<ProcessGroup>(
        new ProcessGroup(env.rank, env.world_size, std::move(store), std::move(gloo)));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", env.rank, " of ", env.world_size,
        " could not form the Gloo process group through the c10d store at ",
        Endpoint(env), " within ", absl::FormatDuration(options.collective_timeout),
        " (did every rank start, with the same WORLD_SIZE?): ",
        CurrentExceptionText()));
  }
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
  std::vector<at::Tensor> tensors = {tensor};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = gloo_->allreduce(tensors);
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
  std::vector<at::Tensor> tensors = {tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = gloo_->broadcast(tensors, opts);
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast rejected on rank ", rank_, ": ", CurrentExceptionText()));
  }
  return Wait(work, "broadcast");
}

}  // namespace elastrun::worker
