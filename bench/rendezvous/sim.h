// N simulated node daemons in one process, speaking the real gRPC API to
// the service: RegisterNode + Heartbeat, a Watch stream each, JoinRound on a
// JoinRound command, and the assignment recorded from StartAttempt.
#ifndef ELASTRUN_BENCH_RENDEZVOUS_SIM_H_
#define ELASTRUN_BENCH_RENDEZVOUS_SIM_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/rendezvous/service.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"

namespace elastrun::bench {

namespace v1 = elastrun::v1;

constexpr int kPortBase = 20000;  // node i reserves MASTER_PORT kPortBase + i

struct StartInfo {
  int64_t ns = 0;
  int group_rank = -1;
  int group_world_size = 0;
  int world_size = 0;
  int64_t restart_count = 0;
  std::string master_addr;
  int master_port = 0;
  std::string error;  // an inconsistency seen in this node's copy
};

class Sim;
class Watcher;

struct Node {
  int idx = 0;
  std::string id, incarnation, addr;
  v1::Rendezvous::Stub* stub = nullptr;
  // Heartbeat state, guarded by Sim::hb_mu_: on once registered.
  bool hb_on = false;
  int64_t next_hb_ns = 0;
  int64_t last_hb_ns = 0;
  // The interval the service gave last (registration, then each heartbeat
  // reply: it grows with the cluster), as a daemon keeps it. Atomic: set
  // from reply callbacks, which must not take hb_mu_.
  std::atomic<int64_t> hb_interval_ns{1'000'000'000};
  std::unique_ptr<Watcher> watch;
  // Guarded by Sim::mu_.
  std::map<int64_t, StartInfo> starts;  // by round
  int stops = 0, end_jobs = 0;
};

template <typename Req, typename Resp>
struct Call {
  Call() { ctx.AddMetadata("authorization", kBenchAuthorization); }
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

class Sim {
 public:
  Sim(const std::string& target, int n, int channels) : n_(n) {
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      // Own connection per channel (not one shared subchannel).
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("elastrun.bench.channel", c);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
      auto ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(v1::Rendezvous::NewStub(ch));
      if (c == 0) jobs_ = v1::Jobs::NewStub(ch);
      channels_.push_back(std::move(ch));
    }
    nodes_.reserve(n);
    for (int i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->idx = i;
      char buf[64];
      std::snprintf(buf, sizeof buf, "node-%05d", i);
      node->id = buf;
      std::snprintf(buf, sizeof buf, "inc-%d-%lld", i, static_cast<long long>(NowNs()));
      node->incarnation = buf;
      std::snprintf(buf, sizeof buf, "10.%d.%d.%d", 1 + i / 65536, (i / 256) % 256, i % 256);
      node->addr = buf;
      node->stub = stubs_[i % channels].get();
      nodes_.push_back(std::move(node));
    }
  }

  int n() const { return n_; }
  Node* node(int i) { return nodes_[i].get(); }
  v1::Jobs::Stub* jobs() { return jobs_.get(); }

  // Registers every node (concurrently) and waits for each Welcome. As a
  // daemon does, each node heartbeats and opens its Watch stream as soon as
  // its own registration is answered, whatever the others' are doing.
  bool RegisterAndWatch(double timeout_s, std::string* error);
  void StopHeartbeats();
  // The node goes silent: no more heartbeats. Returns its last heartbeat's
  // send time.
  int64_t Silence(Node* node) {
    std::lock_guard<std::mutex> l(hb_mu_);
    node->hb_on = false;
    return node->last_hb_ns;
  }

  void OnCommand(Node* node, const v1::Command& c);
  void OnWatchDone(Node* node, const grpc::Status& s);

  // Waits until `count` nodes hold a StartAttempt for `round`.
  bool WaitStarted(int64_t round, int count, double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_until(l, Clock::now() + Secs(timeout_s),
                          [&] { return started_[round] >= count; });
  }
  int64_t FirstJoinNs(int64_t round) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = first_join_ns_.find(round);
    return it == first_join_ns_.end() ? 0 : it->second;
  }
  // Phases of a round: the last JoinRound command received, the last
  // JoinRound call answered, the first StartAttempt received.
  struct Phases {
    int64_t last_cmd_ns = 0, last_joined_ns = 0, first_start_ns = 0;
  };
  Phases PhasesOf(int64_t round) {
    std::lock_guard<std::mutex> l(mu_);
    return phases_[round];
  }
  StartInfo StartOf(Node* node, int64_t round) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = node->starts.find(round);
    return it == node->starts.end() ? StartInfo{} : it->second;
  }
  std::vector<std::string> Errors() {
    std::lock_guard<std::mutex> l(mu_);
    return errors_;
  }
  int ErrorCount() {
    std::lock_guard<std::mutex> l(mu_);
    return error_count_;
  }
  // Waits until no unary call is in flight and every Watch stream ended.
  bool WaitQuiet(double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_until(l, Clock::now() + Secs(timeout_s), [&] {
      return in_flight_ == 0 && watches_done_ == watches_started_;
    });
  }

 private:
  using Clock = std::chrono::steady_clock;
  static Clock::duration Secs(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  void RecordError(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    ++error_count_;
    if (errors_.size() < 5) errors_.push_back(what);
  }
  void CallStarted() {
    std::lock_guard<std::mutex> l(mu_);
    ++in_flight_;
  }
  void CallDone() {
    std::lock_guard<std::mutex> l(mu_);
    --in_flight_;
    cv_.notify_all();
  }
  void SendHeartbeat(Node* node);
  void HeartbeatLoop();
  // A JoinRound command: call JoinRound as a daemon would.
  void OnJoinRound(Node* node, const v1::Command& c);
  // A StartAttempt: record what this node was assigned, checking it.
  void OnStart(Node* node, const v1::Command& c);

  const int n_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
  std::vector<std::unique_ptr<Node>> nodes_;

  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  int registered_ = 0;  // RegisterNode calls answered (ok or not)
  int welcomed_ = 0;
  int watches_started_ = 0, watches_done_ = 0;
  std::map<int64_t, int> started_;          // round -> nodes holding its StartAttempt
  std::map<int64_t, int64_t> first_join_ns_;  // round -> first JoinRound sent
  std::map<int64_t, Phases> phases_;          // round -> its phases
  std::vector<std::string> errors_;
  int error_count_ = 0;
  std::atomic<bool> stopping_{false};

  std::mutex hb_mu_;
  std::atomic<bool> hb_stop_{false};
  std::thread hb_thread_;

  friend class Watcher;
};

class Watcher : public grpc::ClientReadReactor<v1::Command> {
 public:
  Watcher(Sim* sim, Node* node) : sim_(sim), node_(node) {
    ctx_.AddMetadata("authorization", kBenchAuthorization);
    req_.set_node_id(node->id);
    req_.set_incarnation(node->incarnation);
    node->stub->async()->Watch(&ctx_, &req_, this);
    StartRead(&cmd_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    sim_->OnCommand(node_, cmd_);
    StartRead(&cmd_);
  }
  void OnDone(const grpc::Status& s) override { sim_->OnWatchDone(node_, s); }
  void Cancel() { ctx_.TryCancel(); }

 private:
  Sim* sim_;
  Node* node_;
  grpc::ClientContext ctx_;
  v1::WatchRequest req_;
  v1::Command cmd_;
};

}  // namespace elastrun::bench

#endif  // ELASTRUN_BENCH_RENDEZVOUS_SIM_H_
