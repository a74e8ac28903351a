#include "rendezvous/codec.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace elastrun::rendezvous {

google::protobuf::Timestamp ToProto(absl::Time t) {
  google::protobuf::Timestamp p;
  const int64_t ns = absl::ToUnixNanos(t);
  int64_t sec = ns / 1000000000;
  int64_t nanos = ns % 1000000000;
  if (nanos < 0) {
    nanos += 1000000000;
    --sec;
  }
  p.set_seconds(sec);
  p.set_nanos(static_cast<int32_t>(nanos));
  return p;
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

google::protobuf::Duration ToProto(absl::Duration d) {
  google::protobuf::Duration p;
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  p.set_seconds(ns / 1000000000);
  p.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return p;
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

v1::NodeAssignment ToProto(const NodeAssignment& n) {
  v1::NodeAssignment q;
  q.set_node_id(n.node_id);
  q.set_addr(n.addr);
  q.set_group_rank(n.group_rank);
  q.set_local_world_size(n.local_world_size);
  q.set_rank_offset(n.rank_offset);
  return q;
}

v1::Assignment ToProto(const RoundAssignment& a) {
  v1::Assignment p;
  p.set_round(a.round);
  p.set_restart_count(a.restart_count);
  p.set_master_addr(a.master_addr);
  p.set_master_port(a.master_port);
  p.set_world_size(a.world_size);
  p.set_group_world_size(a.group_world_size);
  for (const NodeAssignment& n : a.nodes) *p.add_nodes() = ToProto(n);
  return p;
}

RoundAssignment FromProto(const v1::Assignment& p) {
  RoundAssignment a;
  a.round = p.round();
  a.restart_count = p.restart_count();
  a.master_addr = p.master_addr();
  a.master_port = p.master_port();
  a.world_size = p.world_size();
  a.group_world_size = p.group_world_size();
  for (const v1::NodeAssignment& q : p.nodes()) {
    NodeAssignment n;
    n.node_id = q.node_id();
    n.addr = q.addr();
    n.group_rank = q.group_rank();
    n.local_world_size = q.local_world_size();
    n.rank_offset = q.rank_offset();
    a.nodes.push_back(std::move(n));
  }
  return a;
}

v1::WorkerFailure ToProto(const Failure& f) {
  v1::WorkerFailure p;
  p.set_node_id(f.node_id);
  p.set_round(f.round);
  p.set_local_rank(f.local_rank);
  p.set_rank(f.rank);
  p.set_exit_code(f.exit_code);
  p.set_signal(f.signal);
  p.set_message(f.message);
  p.set_traceback(f.traceback);
  *p.mutable_time() = ToProto(f.time);
  p.set_cannot_start(f.cannot_start);
  p.set_hung(f.hung);
  if (f.hung) p.set_hung_step(f.hung_step);
  return p;
}

Failure FromProto(const v1::WorkerFailure& p) {
  Failure f;
  f.node_id = p.node_id();
  f.round = p.round();
  f.local_rank = p.local_rank();
  f.rank = p.rank();
  f.exit_code = p.exit_code();
  f.signal = p.signal();
  f.message = p.message();
  f.traceback = p.traceback();
  f.time = FromProto(p.time());
  f.cannot_start = p.cannot_start();
  f.hung = p.hung();
  f.hung_step = p.hung() ? p.hung_step() : -1;
  return f;
}

v1::RoundRecord ToProto(const RoundRecord& r) {
  v1::RoundRecord p;
  p.set_id(r.id);
  *p.mutable_opened_time() = ToProto(r.opened_time);
  if (r.closed_time) *p.mutable_closed_time() = ToProto(*r.closed_time);
  if (r.ended_time) *p.mutable_ended_time() = ToProto(*r.ended_time);
  p.set_end_reason(std::string(RoundEndName(r.end_reason)));
  p.set_counted_as_restart(r.counted_as_restart);
  if (r.assignment) *p.mutable_assignment() = ToProto(*r.assignment);
  for (const Failure& f : r.failures) *p.add_failures() = ToProto(f);
  for (const std::string& s : r.succeeded) p.add_succeeded(s);
  for (const std::string& s : r.lost_after_success) p.add_lost_after_success(s);
  return p;
}

RoundRecord FromProto(const v1::RoundRecord& p) {
  RoundRecord r;
  r.id = p.id();
  r.opened_time = FromProto(p.opened_time());
  if (p.has_closed_time()) r.closed_time = FromProto(p.closed_time());
  if (p.has_ended_time()) r.ended_time = FromProto(p.ended_time());
  r.end_reason = RoundEndFromName(p.end_reason());
  r.counted_as_restart = p.counted_as_restart();
  if (p.has_assignment()) r.assignment = FromProto(p.assignment());
  for (const v1::WorkerFailure& f : p.failures()) r.failures.push_back(FromProto(f));
  r.succeeded.assign(p.succeeded().begin(), p.succeeded().end());
  r.lost_after_success.assign(p.lost_after_success().begin(),
                              p.lost_after_success().end());
  return r;
}

namespace {

v1::StoredWaitingNode WaitingToProto(int64_t seq, const WaitingNode& w) {
  v1::StoredWaitingNode p;
  p.set_seq(seq);
  v1::StoredJoinRequest* r = p.mutable_request();
  r->set_node_id(w.request.node_id);
  r->set_addr(w.request.addr);
  r->set_master_port(w.request.master_port);
  r->set_local_world_size(w.request.local_world_size);
  if (w.request.wanted_group_rank >= 0) r->set_group_rank(w.request.wanted_group_rank);
  *p.mutable_joined_time() = ToProto(w.joined_time);
  return p;
}

WaitingNode WaitingFromProto(const v1::StoredWaitingNode& p) {
  WaitingNode w;
  w.request.node_id = p.request().node_id();
  w.request.addr = p.request().addr();
  w.request.master_port = p.request().master_port();
  w.request.local_world_size = p.request().local_world_size();
  w.request.wanted_group_rank = p.request().has_group_rank() ? p.request().group_rank() : -1;
  w.joined_time = FromProto(p.joined_time());
  return w;
}

}  // namespace

v1::StoredRendezvousState ToProto(const RendezvousState& s) {
  v1::StoredRendezvousState p;
  p.set_run_id(s.run_id);
  p.set_min_nodes(s.config.min_nodes);
  p.set_max_nodes(s.config.max_nodes);
  *p.mutable_last_call_timeout() = ToProto(s.config.last_call_timeout);
  *p.mutable_join_timeout() = ToProto(s.config.join_timeout);
  p.set_max_restarts(s.config.max_restarts);
  p.set_state(static_cast<int32_t>(s.state));
  p.set_restart_count(s.restart_count);
  for (const RoundRecord& r : s.rounds) *p.add_rounds() = ToProto(r);
  for (const auto& [seq, w] : s.joined) *p.add_joined() = WaitingToProto(seq, w);
  for (const auto& [seq, w] : s.spares) *p.add_spares() = WaitingToProto(seq, w);
  p.set_next_seq(s.next_seq);
  if (s.min_reached_time) *p.mutable_min_reached_time() = ToProto(*s.min_reached_time);
  if (s.root_cause) *p.mutable_root_cause() = ToProto(*s.root_cause);
  p.set_finish_reason(s.finish_reason);
  if (s.finished_time) *p.mutable_finished_time() = ToProto(*s.finished_time);
  return p;
}

absl::StatusOr<RendezvousState> FromProto(const v1::StoredRendezvousState& p) {
  RendezvousState s;
  s.run_id = p.run_id();
  s.config.min_nodes = p.min_nodes();
  s.config.max_nodes = p.max_nodes();
  s.config.last_call_timeout = FromProto(p.last_call_timeout());
  s.config.join_timeout = FromProto(p.join_timeout());
  s.config.max_restarts = p.max_restarts();
  if (p.state() < 0 || p.state() > static_cast<int>(JobState::kCancelled)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stored rendezvous state of run \"%s\": unknown job state %d",
                        p.run_id(), p.state()));
  }
  s.state = static_cast<JobState>(p.state());
  s.restart_count = p.restart_count();
  for (const v1::RoundRecord& r : p.rounds()) s.rounds.push_back(FromProto(r));
  for (const v1::StoredWaitingNode& w : p.joined()) s.joined[w.seq()] = WaitingFromProto(w);
  for (const v1::StoredWaitingNode& w : p.spares()) s.spares[w.seq()] = WaitingFromProto(w);
  s.next_seq = p.next_seq();
  if (p.has_min_reached_time()) s.min_reached_time = FromProto(p.min_reached_time());
  if (p.has_root_cause()) s.root_cause = FromProto(p.root_cause());
  s.finish_reason = p.finish_reason();
  if (p.has_finished_time()) s.finished_time = FromProto(p.finished_time());
  return s;
}

v1::JobState PublicJobState(const RendezvousState& s) {
  switch (s.state) {
    case JobState::kSucceeded:
      return v1::JOB_STATE_SUCCEEDED;
    case JobState::kFailed:
      return v1::JOB_STATE_FAILED;
    case JobState::kCancelled:
      return v1::JOB_STATE_CANCELLED;
    case JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case JobState::kJoining:
      break;
  }
  for (const RoundRecord& r : s.rounds) {
    if (r.assignment) return v1::JOB_STATE_RUNNING;
  }
  return v1::JOB_STATE_PENDING;
}

}  // namespace elastrun::rendezvous
