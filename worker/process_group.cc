#include "worker/process_group.h"

#include <chrono>
#include <cstdlib>
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
