// Fakes for the Daemon's tests: a service client that records every call
// and answers as the test sets, and a runner whose attempts end when the
// test says. Test-only.
#ifndef ELASTRUN_LAUNCHER_DAEMON_DAEMON_FAKES_H_
#define ELASTRUN_LAUNCHER_DAEMON_DAEMON_FAKES_H_

#include <signal.h>

#include <functional>
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

namespace elastrun::launcher {

class FakeClient : public RendezvousClient {
 public:
  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(
      const v1::RegisterNodeRequest& request) override {
    absl::MutexLock lock(&mu_);
    registers.push_back(request);
    return v1::RegisterNodeResponse();
  }
  absl::Status Heartbeat(const v1::HeartbeatRequest&) override { return absl::OkStatus(); }
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
