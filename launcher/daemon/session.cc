#include "launcher/daemon/session.h"

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {
namespace {

// A stream that stayed up this long resets the backoff.
constexpr absl::Duration kStableStream = absl::Seconds(5);

}  // namespace

DaemonSession::DaemonSession(SessionOptions options, RendezvousClient* client,
                             Daemon* daemon)
    : options_(std::move(options)), client_(client), daemon_(daemon) {}

void DaemonSession::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (stream_ != nullptr) stream_->Cancel();
}

bool DaemonSession::connected() const {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr;
}

bool DaemonSession::IsStopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

bool DaemonSession::WaitBackoff(absl::Duration* backoff) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopped_), *backoff);
  *backoff = std::min(*backoff * 2, options_.max_backoff);
  return !stopped_;
}

absl::Status DaemonSession::Run() {
  absl::Duration backoff = options_.initial_backoff;
  bool logged_away = false;
  for (;;) {
    if (IsStopped()) return absl::OkStatus();
    absl::StatusOr<v1::RegisterNodeResponse> registered = Register();
    if (!registered.ok()) {
      if (absl::IsInvalidArgument(registered.status()) ||
          absl::IsUnauthenticated(registered.status())) {
        return registered.status();
      }
      if (!logged_away) {
        LOG(WARNING) << "cannot register with the service (retrying): "
                     << registered.status();
        logged_away = true;
      }
      if (!WaitBackoff(&backoff)) return absl::OkStatus();
      continue;
    }
    logged_away = false;
    const absl::Duration interval =
        std::max(rendezvous::FromProto(registered->heartbeat_interval()),
                 absl::Milliseconds(10));
    const absl::Duration lease = rendezvous::FromProto(registered->lease_timeout());
    const StreamEnd end = Serve(interval, lease);
    if (IsStopped()) return absl::OkStatus();
    if (absl::IsUnauthenticated(end.status)) return end.status;
    LOG(WARNING) << "Watch stream ended (" << end.status << "); reconnecting";
    if (end.lasted >= kStableStream) backoff = options_.initial_backoff;
    if (!WaitBackoff(&backoff)) return absl::OkStatus();
  }
}

absl::StatusOr<v1::RegisterNodeResponse> DaemonSession::Register() {
  v1::RegisterNodeRequest reg;
  reg.set_node_id(options_.node_id);
  reg.set_incarnation(options_.incarnation);
  reg.set_addr(options_.addr);
  reg.set_slots(options_.slots);
  for (const auto& [k, v] : options_.labels) (*reg.mutable_labels())[k] = v;
  for (const v1::RunningAttempt& a : daemon_->Running()) *reg.add_running() = a;
  // The service re-sends the joins it still wants; one whose EndJob was
  // lost while it was away must not hold this node's slots for good.
  daemon_->ForgetJoins();
  absl::StatusOr<v1::RegisterNodeResponse> registered = client_->RegisterNode(reg);
  if (registered.ok()) {
    LOG(INFO) << "registered as " << options_.node_id << " (" << options_.addr << ", "
              << options_.slots << " slots, incarnation " << options_.incarnation
              << ", running " << reg.running_size() << ")";
  }
  return registered;
}

DaemonSession::StreamEnd DaemonSession::Serve(absl::Duration interval,
                                              absl::Duration lease) {
  v1::WatchRequest w;
  w.set_node_id(options_.node_id);
  w.set_incarnation(options_.incarnation);
  std::unique_ptr<WatchStream> stream = client_->Watch(w);
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    // Stop() came before the stream existed: it ends at once.
    if (stopped_) stream->Cancel();
    stream_ = stream.get();
    generation = generation_;
  }
  std::thread heartbeat([this, generation, interval, lease] {
    HeartbeatLoop(generation, interval, lease);
  });
  // Reports kept while the service was away, now that it knows us again.
  daemon_->FlushReports();
  const absl::Time opened = absl::Now();
  v1::Command command;
  while (stream->Read(&command)) daemon_->OnCommand(command);
  StreamEnd end;
  end.status = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
    ++generation_;
  }
  heartbeat.join();
  end.lasted = absl::Now() - opened;
  return end;
}

void DaemonSession::HeartbeatLoop(uint64_t generation, absl::Duration interval,
                                  absl::Duration lease) {
  absl::Time last_ok = absl::Now();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto gone = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopped_ || generation_ != generation;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&gone), interval)) return;
    }
    v1::HeartbeatRequest r;
    r.set_node_id(options_.node_id);
    r.set_incarnation(options_.incarnation);
    absl::Status st = client_->Heartbeat(r);
    if (st.ok()) {
      last_ok = absl::Now();
      continue;
    }
    // NOT_FOUND: the service lost us (lease expired); FAILED_PRECONDITION:
    // another incarnation holds the id. Either way: reconnect and register.
    const bool forgotten = absl::IsNotFound(st) || absl::IsFailedPrecondition(st);
    const bool silent = absl::Now() - last_ok >= lease;
    LOG(WARNING) << "heartbeat: " << st;
    if (forgotten || silent) {
      absl::MutexLock lock(&mu_);
      if (generation_ == generation && stream_ != nullptr) stream_->Cancel();
      return;
    }
  }
}

}  // namespace elastrun::launcher
