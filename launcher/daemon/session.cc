#include "launcher/daemon/session.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <thread>

#include "absl/time/clock.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {
namespace {

// A stream that stayed up this long resets the backoff.
constexpr absl::Duration kStableStream = absl::Seconds(5);

// A refusal that retrying cannot fix.
bool Fatal(const absl::Status& st) {
  return absl::IsInvalidArgument(st) || absl::IsUnauthenticated(st);
}

}  // namespace

v1::RegisterNodeRequest RegisterRequest(const SessionOptions& options,
                                        const std::vector<v1::RunningAttempt>& running) {
  v1::RegisterNodeRequest reg;
  reg.set_node_id(options.node_id);
  reg.set_incarnation(options.incarnation);
  reg.set_addr(options.addr);
  reg.set_slots(options.slots);
  for (const auto& [k, v] : options.labels) (*reg.mutable_labels())[k] = v;
  reg.set_pool(options.pool);
  for (const v1::RunningAttempt& a : running) *reg.add_running() = a;
  return reg;
}

absl::Status ClaimNodeId(const SessionOptions& options, RendezvousClient* client,
                         const std::function<bool(absl::Duration)>& wait) {
  const v1::RegisterNodeRequest reg = RegisterRequest(options, {});
  absl::Duration backoff = options.initial_backoff;
  bool logged_away = false;
  for (;;) {
    absl::StatusOr<v1::RegisterNodeResponse> registered = client->RegisterNode(reg);
    if (registered.ok()) return absl::OkStatus();
    if (Fatal(registered.status()) || absl::IsAlreadyExists(registered.status())) {
      return registered.status();
    }
    if (!logged_away) {
      LOG(WARNING) << "cannot register with the service (retrying): " << registered.status();
      logged_away = true;
    }
    if (!wait(backoff)) return absl::CancelledError("stopped before registering");
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

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

void DaemonSession::StopAttempts(const absl::Status& why) {
  for (const v1::RunningAttempt& a : daemon_->Running()) {
    v1::Command stop;
    stop.mutable_stop()->set_job_id(a.job_id());
    // Any round: a start queued behind this attempt goes too.
    stop.mutable_stop()->set_round(std::numeric_limits<int64_t>::max());
    stop.mutable_stop()->set_reason(std::string(why.message()));
    daemon_->OnCommand(stop);
  }
}

absl::Status DaemonSession::Run() {
  absl::Duration backoff = options_.initial_backoff;
  bool logged_away = false;
  bool ever_registered = false;
  for (;;) {
    if (IsStopped()) return absl::OkStatus();
    absl::StatusOr<v1::RegisterNodeResponse> registered = Register();
    if (!registered.ok()) {
      if (Fatal(registered.status())) return registered.status();
      if (absl::IsAlreadyExists(registered.status())) {
        // At the first registration nothing runs yet: leave. Later, the
        // service lost this node and another daemon took its id; these
        // workers' rounds are over, so they must not go on beside its.
        if (!ever_registered) return registered.status();
        if (!logged_away) {
          LOG(ERROR) << "node id " << options_.node_id
                     << " was taken by another elastrund while this one was away; "
                        "stopping this node's workers and retrying: "
                     << registered.status();
          logged_away = true;
        }
        StopAttempts(registered.status());
        if (!WaitBackoff(&backoff)) return absl::OkStatus();
        continue;
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
    ever_registered = true;
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
  const v1::RegisterNodeRequest reg = RegisterRequest(options_, daemon_->Running());
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
  daemon_->SendReports();
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
    absl::StatusOr<v1::HeartbeatResponse> resp = client_->Heartbeat(r);
    if (resp.ok()) {
      last_ok = absl::Now();
      // The service stretches both as its cluster grows
      // (--max-heartbeat-rate); an older one sends neither.
      if (resp->has_heartbeat_interval() && resp->has_lease_timeout()) {
        interval = std::max(rendezvous::FromProto(resp->heartbeat_interval()),
                            absl::Milliseconds(10));
        lease = rendezvous::FromProto(resp->lease_timeout());
      }
      continue;
    }
    const absl::Status& st = resp.status();
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
