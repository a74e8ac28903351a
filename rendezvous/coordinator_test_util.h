// What the Coordinator's tests share: a Watch stream that records what the
// coordinator sends one node, and the requests a daemon and the CLI make,
// with the values the tests take for granted (incarnation "inc-1", one
// slot, a job "train" of one "worker" per node). No gRPC: the tests call
// the Coordinator directly, with a FakeClock.
#ifndef ELASTRUN_RENDEZVOUS_COORDINATOR_TEST_UTIL_H_
#define ELASTRUN_RENDEZVOUS_COORDINATOR_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"

namespace elastrun::rendezvous::coordinator_testing {

// Records every command sent to one node, and how its stream ended.
class RecordingStream : public NodeStream {
 public:
  void Send(v1::Command command) override {
    absl::MutexLock lock(&mu_);
    commands_.push_back(std::move(command));
  }
  void Close(absl::Status status) override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    close_status_ = std::move(status);
  }

  std::vector<v1::Command> commands() {
    absl::MutexLock lock(&mu_);
    return commands_;
  }
  // The status the stream was closed with, if it was.
  std::optional<absl::Status> closed() {
    absl::MutexLock lock(&mu_);
    if (!closed_) return std::nullopt;
    return close_status_;
  }
  // Whether the node was asked to join round `round` of `job` (-1: any).
  bool AskedToJoin(const std::string& job, int64_t round = -1) {
    for (const v1::Command& c : commands()) {
      if (c.has_join_round() && c.join_round().job_id() == job &&
          (round < 0 || c.join_round().round() == round)) {
        return true;
      }
    }
    return false;
  }
  // The round of the latest StartAttempt (of `job`; "": any job), or -1.
  int64_t StartedRound(const std::string& job = "") {
    int64_t round = -1;
    for (const v1::Command& c : commands()) {
      if (c.has_start() && (job.empty() || c.start().job_id() == job)) {
        round = c.start().assignment().round();
      }
    }
    return round;
  }
  // The world size of the latest StartAttempt, or 0.
  int StartedWorldSize() {
    int size = 0;
    for (const v1::Command& c : commands()) {
      if (c.has_start()) size = c.start().assignment().world_size();
    }
    return size;
  }
  // Whether the node was told to stop `job` or that it ended.
  bool Stopped(const std::string& job) {
    for (const v1::Command& c : commands()) {
      if ((c.has_stop() && c.stop().job_id() == job) ||
          (c.has_end_job() && c.end_job().job_id() == job)) {
        return true;
      }
    }
    return false;
  }
  // The EndJob command for `job`, if one came.
  std::optional<v1::EndJob> EndJobOf(const std::string& job) {
    for (const v1::Command& c : commands()) {
      if (c.has_end_job() && c.end_job().job_id() == job) return c.end_job();
    }
    return std::nullopt;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::Command> commands_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

// RegisterNode of daemon `incarnation` of node `id` at `id`.test.
inline v1::RegisterNodeRequest RegisterRequest(const std::string& id, int slots = 1,
                                               const std::string& incarnation = "inc-1") {
  v1::RegisterNodeRequest r;
  r.set_node_id(id);
  r.set_incarnation(incarnation);
  r.set_addr(id + ".test");
  r.set_slots(slots);
  return r;
}

// Opens the Watch stream of daemon `incarnation` of node `id` as `stream`.
inline absl::Status Watch(Coordinator& c, const std::string& id,
                          std::shared_ptr<NodeStream> stream,
                          const std::string& incarnation = "inc-1") {
  v1::WatchRequest w;
  w.set_node_id(id);
  w.set_incarnation(incarnation);
  return c.AttachWatch(w, std::move(stream));
}

// Registers `r` and opens its Watch stream; the stream.
inline std::shared_ptr<RecordingStream> Connect(Coordinator& c,
                                                const v1::RegisterNodeRequest& r) {
  EXPECT_TRUE(c.RegisterNode(r).ok()) << r.node_id();
  auto stream = std::make_shared<RecordingStream>();
  EXPECT_TRUE(Watch(c, r.node_id(), stream, r.incarnation()).ok()) << r.node_id();
  return stream;
}

// A job "train" of `nproc` "worker"s per node on MIN..MAX nodes.
inline v1::SubmitRequest TrainJob(int min, int max, int nproc = 1, int max_restarts = 0) {
  v1::SubmitRequest r;
  v1::JobSpec* spec = r.mutable_spec();
  spec->set_name("train");
  spec->set_min_nodes(min);
  spec->set_max_nodes(max);
  spec->set_nproc_per_node(nproc);
  spec->set_max_restarts(max_restarts);
  spec->add_argv("worker");
  return r;
}

// Submits `r`; the job id, or "" (a test failure) when refused.
inline std::string SubmitOk(Coordinator& c, const v1::SubmitRequest& r) {
  absl::StatusOr<v1::SubmitResponse> resp = c.Submit(r);
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? resp->job_id() : "";
}

// Node `id`'s JoinRound of `round` of `job`, with one local worker.
inline v1::JoinRoundRequest JoinRequest(const std::string& id, const std::string& job,
                                        int64_t round, int local_world_size = 1) {
  v1::JoinRoundRequest r;
  r.set_job_id(job);
  r.set_round(round);
  r.set_node_id(id);
  r.set_master_port(30000);
  r.set_local_world_size(local_world_size);
  return r;
}

// Node `id`'s ReportExit of `round` of `job`: success, or exit code 3.
inline v1::ReportExitRequest ExitRequest(const std::string& id, const std::string& job,
                                         int64_t round, bool succeeded) {
  v1::ReportExitRequest r;
  r.set_job_id(job);
  r.set_round(round);
  r.set_node_id(id);
  if (succeeded) {
    r.set_succeeded(true);
  } else {
    r.mutable_failure()->set_exit_code(3);
  }
  return r;
}

// The job's status (a test failure and an empty status if unknown).
inline v1::JobStatus GetJob(Coordinator& c, const std::string& job) {
  v1::GetJobRequest r;
  r.set_job_id(job);
  absl::StatusOr<v1::JobStatus> s = c.GetJob(r);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : v1::JobStatus();
}

// Node `id` as ListNodes shows it, if listed.
inline std::optional<v1::NodeInfo> FindNode(Coordinator& c, const std::string& id) {
  absl::StatusOr<v1::ListNodesResponse> all = c.ListNodes();
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return std::nullopt;
  for (const v1::NodeInfo& n : all->nodes()) {
    if (n.node_id() == id) return n;
  }
  return std::nullopt;
}

}  // namespace elastrun::rendezvous::coordinator_testing

#endif  // ELASTRUN_RENDEZVOUS_COORDINATOR_TEST_UTIL_H_
