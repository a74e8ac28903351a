#include "bench/rendezvous/sim.h"

#include <cstdio>
#include <cstdlib>

namespace elastrun::bench {
namespace {

int64_t DurationNs(const google::protobuf::Duration& d) {
  return d.seconds() * 1'000'000'000LL + d.nanos();
}

}  // namespace

bool Sim::RegisterAndWatch(double timeout_s, std::string* error) {
  hb_thread_ = std::thread([this] { HeartbeatLoop(); });
  for (auto& node : nodes_) {
    auto* call = new Call<v1::RegisterNodeRequest, v1::RegisterNodeResponse>;
    call->ctx.set_deadline(DeadlineIn(timeout_s));
    call->ctx.set_wait_for_ready(true);
    call->req.set_node_id(node->id);
    call->req.set_incarnation(node->incarnation);
    call->req.set_addr(node->addr);
    call->req.set_slots(1);
    CallStarted();
    Node* n = node.get();
    n->stub->async()->RegisterNode(
        &call->ctx, &call->req, &call->resp, [this, call, n](grpc::Status s) {
          if (!s.ok()) {
            RecordError("RegisterNode " + n->id + ": " + s.error_message());
          } else {
            const auto& d = call->resp.heartbeat_interval();
            {
              // The registration renewed the lease: the next heartbeat in
              // one interval.
              std::lock_guard<std::mutex> l(hb_mu_);
              n->hb_interval_ns = DurationNs(d);
              n->last_hb_ns = NowNs();
              n->next_hb_ns = n->last_hb_ns + n->hb_interval_ns;
              n->hb_on = true;
            }
            // Set under the lock: the main thread reads it once every
            // node counts (the Welcome may come before this returns).
            auto watch = std::make_unique<Watcher>(this, n);
            std::lock_guard<std::mutex> l(mu_);
            ++watches_started_;
            n->watch = std::move(watch);
            cv_.notify_all();
          }
          delete call;
          {
            std::lock_guard<std::mutex> l(mu_);
            ++registered_;
          }
          CallDone();
        });
  }
  std::unique_lock<std::mutex> l(mu_);
  // Heartbeats are in flight meanwhile: the registrations are counted.
  if (!cv_.wait_until(l, Clock::now() + Secs(timeout_s),
                      [&] { return registered_ == n_; })) {
    *error = "RegisterNode calls did not finish in time";
    return false;
  }
  if (error_count_ > 0) {
    *error = "RegisterNode failed: " + errors_.front();
    return false;
  }
  if (!cv_.wait_until(l, Clock::now() + Secs(timeout_s),
                      [&] { return welcomed_ >= n_ && watches_started_ >= n_; })) {
    *error = "only " + std::to_string(welcomed_) + " of " + std::to_string(n_) +
             " Watch streams got their Welcome in time";
    return false;
  }
  return true;
}

void Sim::OnCommand(Node* node, const v1::Command& c) {
  switch (c.kind_case()) {
    case v1::Command::kWelcome: {
      std::lock_guard<std::mutex> l(mu_);
      ++welcomed_;
      cv_.notify_all();
      break;
    }
    case v1::Command::kJoinRound:
      OnJoinRound(node, c);
      break;
    case v1::Command::kStart:
      OnStart(node, c);
      break;
    case v1::Command::kStop: {
      std::lock_guard<std::mutex> l(mu_);
      ++node->stops;
      break;
    }
    case v1::Command::kEndJob: {
      std::lock_guard<std::mutex> l(mu_);
      ++node->end_jobs;
      break;
    }
    default:
      break;
  }
}

void Sim::OnJoinRound(Node* node, const v1::Command& c) {
  if (stopping_) return;
  auto* call = new Call<v1::JoinRoundRequest, v1::JoinRoundResponse>;
  call->ctx.set_deadline(DeadlineIn(30));
  call->req.set_job_id(c.join_round().job_id());
  call->req.set_round(c.join_round().round());
  call->req.set_node_id(node->id);
  call->req.set_master_port(kPortBase + node->idx);
  call->req.set_local_world_size(c.join_round().spec().nproc_per_node());
  const int64_t round = c.join_round().round();
  {
    std::lock_guard<std::mutex> l(mu_);
    ++in_flight_;
    const int64_t now = NowNs();
    auto [it, inserted] = first_join_ns_.emplace(round, now);
    if (!inserted && now < it->second) it->second = now;
    phases_[round].last_cmd_ns = now;
  }
  node->stub->async()->JoinRound(&call->ctx, &call->req, &call->resp,
                                 [this, call, node](grpc::Status s) {
                                   {
                                     std::lock_guard<std::mutex> l(mu_);
                                     phases_[call->req.round()].last_joined_ns = NowNs();
                                   }
                                   if (!s.ok()) {
                                     RecordError("JoinRound " + node->id + " round " +
                                                 std::to_string(call->req.round()) +
                                                 ": " + s.error_message());
                                   }
                                   delete call;
                                   CallDone();
                                 });
}

void Sim::OnStart(Node* node, const v1::Command& c) {
  const int64_t now = NowNs();
  const v1::Assignment& a = c.start().assignment();
  StartInfo si;
  si.ns = now;
  si.group_world_size = a.group_world_size();
  si.world_size = a.world_size();
  si.restart_count = a.restart_count();
  si.master_addr = a.master_addr();
  si.master_port = a.master_port();
  // A node's StartAttempt carries only its own entry.
  if (a.nodes_size() != 1 || a.nodes(0).node_id() != node->id) {
    si.error = "StartAttempt does not carry exactly this node's entry";
  } else {
    const v1::NodeAssignment& na = a.nodes(0);
    si.group_rank = na.group_rank();
    if (na.group_rank() == 0) {
      // MASTER_ADDR/PORT are those of the rank-0 node.
      const int idx0 = std::atoi(na.node_id().c_str() + 5);
      if (a.master_addr() != na.addr() || a.master_port() != kPortBase + idx0) {
        si.error = "master addr/port is not the rank-0 node's";
      }
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  if (node->starts.emplace(a.round(), std::move(si)).second) {
    if (started_[a.round()]++ == 0) phases_[a.round()].first_start_ns = now;
    cv_.notify_all();
  }
}

void Sim::OnWatchDone(Node* node, const grpc::Status& s) {
  std::lock_guard<std::mutex> l(mu_);
  ++watches_done_;
  cv_.notify_all();
}

void Sim::SendHeartbeat(Node* node) {
  auto* call = new Call<v1::HeartbeatRequest, v1::HeartbeatResponse>;
  call->ctx.set_deadline(DeadlineIn(5));
  call->req.set_node_id(node->id);
  call->req.set_incarnation(node->incarnation);
  CallStarted();
  node->stub->async()->Heartbeat(&call->ctx, &call->req, &call->resp,
                                 [this, call, node](grpc::Status s) {
                                   if (!s.ok() && !stopping_) {
                                     RecordError("Heartbeat " + node->id + ": " +
                                                 s.error_message());
                                   }
                                   if (s.ok() && call->resp.has_heartbeat_interval()) {
                                     node->hb_interval_ns =
                                         DurationNs(call->resp.heartbeat_interval());
                                   }
                                   delete call;
                                   CallDone();
                                 });
}

void Sim::HeartbeatLoop() {
  while (!hb_stop_) {
    const int64_t now = NowNs();
    {
      std::lock_guard<std::mutex> l(hb_mu_);
      for (auto& node : nodes_) {
        if (!node->hb_on || now < node->next_hb_ns) continue;
        node->last_hb_ns = now;
        const int64_t interval = node->hb_interval_ns;
        node->next_hb_ns += interval;
        if (node->next_hb_ns < now) node->next_hb_ns = now + interval;
        SendHeartbeat(node.get());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Sim::StopHeartbeats() {
  stopping_ = true;
  hb_stop_ = true;
  if (hb_thread_.joinable()) hb_thread_.join();
}

}  // namespace elastrun::bench
