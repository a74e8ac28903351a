// Fakes for the Daemon's tests: a service client that records every call
// and answers as the test sets, one whose Watch streams the test feeds,
// and runners whose attempts end when the test says. Test-only.
#ifndef ELASTRUN_LAUNCHER_DAEMON_DAEMON_FAKES_H_
#define ELASTRUN_LAUNCHER_DAEMON_DAEMON_FAKES_H_

#include <signal.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "launcher/daemon/client.h"
#include "launcher/daemon/daemon.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {

class FakeClient : public RendezvousClient {
 public:
  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(
      const v1::RegisterNodeRequest& request) override {
    absl::MutexLock lock(&mu_);
    registers.push_back(request);
    return v1::RegisterNodeResponse();
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest&) override {
    return v1::HeartbeatResponse();
  }
  absl::StatusOr<v1::JoinRoundResponse> JoinRound(
      const v1::JoinRoundRequest& request) override {
    HoldIfAsked(request.job_id());
    absl::MutexLock lock(&mu_);
    joins.push_back(request);
    v1::JoinRoundResponse resp;
    resp.set_round(request.round());
    return resp;
  }
  absl::Status ReportExit(const v1::ReportExitRequest& request) override {
    HoldIfAsked(request.job_id());
    absl::MutexLock lock(&mu_);
    if (!report_status.ok()) return report_status;
    reports.push_back(request);
    return absl::OkStatus();
  }
  absl::Status PushLogs(const v1::PushLogsRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (!push_status.ok()) return push_status;
    pushes.push_back(request);
    return absl::OkStatus();
  }
  absl::Status Barrier(const v1::BarrierRequest& request, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    barriers.push_back(request);
    return barrier_status;
  }
  absl::Status ReportProgress(const v1::ReportProgressRequest& request) override {
    absl::MutexLock lock(&mu_);
    progress.push_back(request);
    return absl::OkStatus();
  }
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest&) override { return nullptr; }

  // Makes JoinRound and ReportExit calls of `job` wait until Release(): a
  // slow service for that job only. `held` is notified at the first such
  // call.
  void Hold(const std::string& job) {
    absl::MutexLock lock(&mu_);
    held_job_ = job;
  }
  void Release() { release_.Notify(); }
  absl::Notification held;

  absl::Mutex mu_;
  std::vector<v1::RegisterNodeRequest> registers;
  std::vector<v1::JoinRoundRequest> joins;
  std::vector<v1::ReportExitRequest> reports;
  std::vector<v1::PushLogsRequest> pushes;
  std::vector<v1::ReportProgressRequest> progress;
  std::vector<v1::BarrierRequest> barriers;
  absl::Status barrier_status;
  absl::Status report_status;
  absl::Status push_status;

 private:
  void HoldIfAsked(const std::string& job) {
    {
      absl::MutexLock lock(&mu_);
      if (held_job_.empty() || job != held_job_) return;
      if (!held.HasBeenNotified()) held.Notify();
    }
    release_.WaitForNotification();
  }
  std::string held_job_;
  absl::Notification release_;
};

// Models a runner of several attempts at once: each Start adds an active
// attempt; the test ends each with Finish. Stop only records the request.
class FakeRunner : public AttemptRunner {
 public:
  struct Started {
    uint64_t id;
    AttemptSpec spec;
    std::function<void(const AttemptOutcome&)> done;
  };
  void Start(uint64_t id, AttemptSpec spec,
             std::function<void(const AttemptOutcome&)> done) override {
    ASSERT_EQ(active.count(id), 0u) << "attempt " << id << " started twice";
    active.insert(id);
    started.push_back({id, std::move(spec), std::move(done)});
  }
  void Stop(uint64_t id, int sig) override { stops.emplace_back(id, sig); }
  // Ends active attempt `id` with `outcome`.
  void Finish(uint64_t id, AttemptOutcome outcome) {
    ASSERT_EQ(active.count(id), 1u) << "attempt " << id << " is not active";
    active.erase(id);
    for (const Started& s : started) {
      if (s.id == id) {
        auto done = s.done;  // `started` may grow inside done
        done(outcome);
        if (after_finish) after_finish();
        return;
      }
    }
  }
  // Ends the only active attempt with `outcome`.
  void Finish(AttemptOutcome outcome) {
    ASSERT_EQ(active.size(), 1u);
    Finish(*active.begin(), std::move(outcome));
  }
  // The ids of the attempts Stop was asked for.
  std::vector<uint64_t> stopped_ids() const {
    std::vector<uint64_t> out;
    for (const auto& [id, sig] : stops) out.push_back(id);
    return out;
  }

  // Called after each Finish (e.g. to wait for the reports it sends).
  std::function<void()> after_finish;
  std::set<uint64_t> active;
  std::vector<Started> started;
  std::vector<std::pair<uint64_t, int>> stops;
};

// Waits until the Daemon's service calls (joins, reports) were made: they
// run on its lanes, off the caller's thread.
inline void Settle(Daemon& daemon) {
  ASSERT_TRUE(daemon.WaitCallsDone(absl::Seconds(60))) << "service calls still in flight";
}

// How long the fakes below wait for an event.
constexpr absl::Duration kFakeWait = absl::Seconds(20);

// A Watch stream the test feeds.
class FakeStream : public WatchStream {
 public:
  bool Read(v1::Command* command) override {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !queue_.empty() || ended_;
    };
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return false;
    *command = queue_.front();
    queue_.pop_front();
    return true;
  }
  void Cancel() override { End(absl::CancelledError("cancelled")); }
  absl::Status Finish() override {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  void Push(v1::Command c) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(c));
  }
  void End(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    status_ = std::move(status);
  }

 private:
  absl::Mutex mu_;
  std::deque<v1::Command> queue_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class FakeService : public RendezvousClient {
 public:
  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(
      const v1::RegisterNodeRequest& request) override {
    absl::MutexLock lock(&mu_);
    registers_.push_back(request);
    if (!register_status_.ok()) return register_status_;
    v1::RegisterNodeResponse resp;
    *resp.mutable_heartbeat_interval() = rendezvous::ToProto(absl::Milliseconds(5));
    *resp.mutable_lease_timeout() = rendezvous::ToProto(absl::Seconds(3));
    return resp;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest&) override {
    absl::MutexLock lock(&mu_);
    ++heartbeats_;
    if (!heartbeat_status_.ok()) return heartbeat_status_;
    return heartbeat_response_;
  }
  absl::StatusOr<v1::JoinRoundResponse> JoinRound(const v1::JoinRoundRequest&) override {
    return v1::JoinRoundResponse();
  }
  absl::Status ReportExit(const v1::ReportExitRequest&) override {
    return absl::OkStatus();
  }
  absl::Status PushLogs(const v1::PushLogsRequest&) override { return absl::OkStatus(); }
  absl::Status Barrier(const v1::BarrierRequest&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status ReportProgress(const v1::ReportProgressRequest&) override {
    return absl::OkStatus();
  }
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest&) override {
    // The session owns its handle; the stream itself stays with the
    // service, so that a test may look at it after the session let go.
    class Handle : public WatchStream {
     public:
      explicit Handle(FakeStream* s) : s_(s) {}
      bool Read(v1::Command* command) override { return s_->Read(command); }
      void Cancel() override { s_->Cancel(); }
      absl::Status Finish() override { return s_->Finish(); }

     private:
      FakeStream* const s_;
    };
    absl::MutexLock lock(&mu_);
    streams_.push_back(std::make_unique<FakeStream>());
    return std::make_unique<Handle>(streams_.back().get());
  }

  // Waits until `n` registrations happened; returns the n-th request.
  v1::RegisterNodeRequest AwaitRegister(size_t n) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registers_.size() >= n; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&done), kFakeWait))
        << "no registration " << n;
    return registers_.size() >= n ? registers_[n - 1] : v1::RegisterNodeRequest();
  }
  size_t streams_opened() {
    absl::MutexLock lock(&mu_);
    return streams_.size();
  }
  // Waits for the i-th Watch stream (from 0) to be opened.
  FakeStream* stream(size_t i) {
    absl::MutexLock lock(&mu_);
    auto done = [this, i]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_.size() > i; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&done), kFakeWait))
        << "no stream " << i;
    return streams_.at(i).get();
  }
  void set_register_status(absl::Status s) {
    absl::MutexLock lock(&mu_);
    register_status_ = std::move(s);
  }
  void set_heartbeat_status(absl::Status s) {
    absl::MutexLock lock(&mu_);
    heartbeat_status_ = std::move(s);
  }
  // What a heartbeat that succeeds answers (default: nothing set).
  void set_heartbeat_response(v1::HeartbeatResponse r) {
    absl::MutexLock lock(&mu_);
    heartbeat_response_ = std::move(r);
  }
  int heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  // Waits until `n` heartbeats came; returns how many came.
  int AwaitHeartbeats(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return heartbeats_ >= n; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&done), kFakeWait))
        << "no heartbeat " << n;
    return heartbeats_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::RegisterNodeRequest> registers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<FakeStream>> streams_ ABSL_GUARDED_BY(mu_);
  absl::Status register_status_ ABSL_GUARDED_BY(mu_);
  absl::Status heartbeat_status_ ABSL_GUARDED_BY(mu_);
  v1::HeartbeatResponse heartbeat_response_ ABSL_GUARDED_BY(mu_);
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
};

// Accepts attempts and never ends them on its own (the session tests are
// not about them); counts starts and stops. With end_on_stop, a Stop ends
// the attempt at once, stopped by that signal, as workers that obey it do.
class IdleRunner : public AttemptRunner {
 public:
  explicit IdleRunner(bool end_on_stop = false) : end_on_stop_(end_on_stop) {}
  void Start(uint64_t id, AttemptSpec,
             std::function<void(const AttemptOutcome&)> done) override {
    absl::MutexLock lock(&mu_);
    ++starts_;
    done_[id] = std::move(done);
  }
  void Stop(uint64_t id, int sig) override {
    std::function<void(const AttemptOutcome&)> done;
    {
      absl::MutexLock lock(&mu_);
      ++stops_;
      stop_signals_.push_back(sig);
      if (!end_on_stop_) return;
      auto it = done_.find(id);
      if (it == done_.end()) return;
      done = std::move(it->second);
      done_.erase(it);
    }
    AttemptOutcome stopped;
    stopped.kind = AttemptOutcome::Kind::kStopped;
    stopped.stop_signal = sig;
    done(stopped);
  }
  std::vector<int> stop_signals() {
    absl::MutexLock lock(&mu_);
    return stop_signals_;
  }
  // Waits until `*counter` reached `n`; false after kFakeWait.
  bool AwaitStarts(int n) { return Await(&starts_, n); }
  bool AwaitStops(int n) { return Await(&stops_, n); }

 private:
  bool Await(const int* counter, int n) {
    absl::MutexLock lock(&mu_);
    auto done = [this, counter, n]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return *counter >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kFakeWait);
  }

  const bool end_on_stop_;
  absl::Mutex mu_;
  int starts_ ABSL_GUARDED_BY(mu_) = 0;
  int stops_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> stop_signals_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::function<void(const AttemptOutcome&)>> done_
      ABSL_GUARDED_BY(mu_);
};

inline AttemptOutcome Succeeded() {
  AttemptOutcome o;
  o.kind = AttemptOutcome::Kind::kSucceeded;
  return o;
}
inline AttemptOutcome Stopped() {
  AttemptOutcome o;
  o.kind = AttemptOutcome::Kind::kStopped;
  o.stop_signal = SIGTERM;
  return o;
}
inline AttemptOutcome Killed(int rank, int sig) {
  AttemptOutcome o;
  o.kind = AttemptOutcome::Kind::kFailed;
  WorkerExit e;
  e.rank = rank;
  e.local_rank = rank % 2;
  e.signal = sig;
  o.first_failure = e;
  return o;
}

// Service commands. Node "a" is group rank 0, "b" group rank 1, each with
// `nproc` workers.
inline v1::Command Join(const std::string& job, int64_t round, int nproc = 2) {
  v1::Command c;
  c.mutable_join_round()->set_job_id(job);
  c.mutable_join_round()->set_round(round);
  c.mutable_join_round()->mutable_spec()->set_nproc_per_node(nproc);
  return c;
}
inline v1::Command Start(const std::string& job, int64_t round, int nproc = 2) {
  v1::Command c;
  v1::StartAttempt* s = c.mutable_start();
  s->set_job_id(job);
  s->mutable_spec()->add_argv("worker");
  s->mutable_spec()->add_argv("--flag");
  s->mutable_spec()->set_nproc_per_node(nproc);
  (*s->mutable_spec()->mutable_env())["EXTRA"] = "1";
  s->set_max_restarts(3);
  v1::Assignment* a = s->mutable_assignment();
  a->set_round(round);
  a->set_restart_count(static_cast<int>(round));
  a->set_master_addr("10.0.0.1");
  a->set_master_port(29500);
  a->set_world_size(2 * nproc);
  a->set_group_world_size(2);
  for (int g = 0; g < 2; ++g) {
    v1::NodeAssignment* n = a->add_nodes();
    n->set_node_id(g == 0 ? "a" : "b");
    n->set_group_rank(g);
    n->set_local_world_size(nproc);
    n->set_rank_offset(nproc * g);
  }
  return c;
}
inline v1::Command Stop(const std::string& job, int64_t round) {
  v1::Command c;
  c.mutable_stop()->set_job_id(job);
  c.mutable_stop()->set_round(round);
  return c;
}
inline v1::Command End(const std::string& job) {
  v1::Command c;
  c.mutable_end_job()->set_job_id(job);
  return c;
}

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_DAEMON_FAKES_H_
