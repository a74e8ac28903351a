#include "rendezvous/types.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace elastrun::rendezvous {

absl::Status ValidateRoundConfig(const RoundConfig& c) {
  if (c.min_nodes < 1 || c.min_nodes > kMaxNodes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_nodes is %d; it must be in [1, %d]", c.min_nodes, kMaxNodes));
  }
  if (c.max_nodes < c.min_nodes || c.max_nodes > kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_nodes is %d; it must be in [min_nodes=%d, %d]", c.max_nodes,
                        c.min_nodes, kMaxNodes));
  }
  if (c.last_call_timeout < absl::ZeroDuration() ||
      c.last_call_timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("last_call_timeout is ", absl::FormatDuration(c.last_call_timeout),
                     "; it must be finite and >= 0"));
  }
  if (c.join_timeout <= absl::ZeroDuration() ||
      c.join_timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("join_timeout is ",
                                                   absl::FormatDuration(c.join_timeout),
                                                   "; it must be finite and > 0"));
  }
  if (c.max_restarts < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_restarts is %d; it must be >= 0", c.max_restarts));
  }
  return absl::OkStatus();
}

absl::Status ValidateJoinRequest(const JoinRequest& r) {
  if (r.node_id.empty() || r.node_id.size() > kMaxIdLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("join request: node_id must have 1 to %d characters (got %d)",
                        kMaxIdLength, r.node_id.size()));
  }
  if (r.addr.empty() || r.addr.size() > kMaxIdLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("join request of node \"%s\": addr must have 1 to %d characters "
                        "(got %d)",
                        r.node_id, kMaxIdLength, r.addr.size()));
  }
  if (r.wanted_group_rank < -1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "join request of node \"%s\": group_rank must be >= 0 (got %d)", r.node_id,
        r.wanted_group_rank));
  }
  if (r.master_port < 1 || r.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("join request of node \"%s\": master_port is %d; it must be in "
                        "[1, 65535]",
                        r.node_id, r.master_port));
  }
  if (r.local_world_size < 1 || r.local_world_size > kMaxLocalWorldSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "join request of node \"%s\": local_world_size is %d; it must be in "
        "[1, %d]",
        r.node_id, r.local_world_size, kMaxLocalWorldSize));
  }
  return absl::OkStatus();
}

const NodeAssignment* RoundAssignment::Find(absl::string_view node_id) const {
  for (const NodeAssignment& n : nodes) {
    if (n.node_id == node_id) return &n;
  }
  return nullptr;
}

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kJoining:
      return "JOINING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

namespace {

constexpr std::pair<RoundEnd, absl::string_view> kRoundEndNames[] = {
    {RoundEnd::kNone, ""},
    {RoundEnd::kFailure, "failure"},
    {RoundEnd::kFailed, "failed"},
    {RoundEnd::kNodeLost, "node lost"},
    {RoundEnd::kScaleUp, "scale-up"},
    {RoundEnd::kCancelled, "cancelled"},
    {RoundEnd::kAbandoned, "abandoned"},
    {RoundEnd::kSucceeded, "succeeded"},
    {RoundEnd::kJoinTimeout, "join timeout"},
};

}  // namespace

absl::string_view RoundEndName(RoundEnd end) {
  for (const auto& [e, name] : kRoundEndNames) {
    if (e == end) return name;
  }
  return "";
}

RoundEnd RoundEndFromName(absl::string_view name) {
  for (const auto& [e, n] : kRoundEndNames) {
    if (n == name) return e;
  }
  return RoundEnd::kNone;
}

absl::Status ValidateRendezvousState(const RendezvousState& s) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent rendezvous state of run \"", s.run_id, "\": ", why));
  };
  if (absl::Status st = ValidateRoundConfig(s.config); !st.ok()) {
    return bad(st.message());
  }
  if (s.rounds.empty()) return bad("no rounds");
  for (size_t i = 0; i < s.rounds.size(); ++i) {
    const RoundRecord& r = s.rounds[i];
    if (r.id != static_cast<int64_t>(i)) {
      return bad(absl::StrCat("round at index ", i, " has id ", r.id));
    }
    if (!r.assignment) continue;
    const RoundAssignment& a = *r.assignment;
    if (a.round != r.id || a.group_world_size != static_cast<int>(a.nodes.size()) ||
        a.nodes.empty()) {
      return bad(absl::StrCat("round ", r.id, " has an inconsistent assignment"));
    }
    for (size_t k = 0; k < a.nodes.size(); ++k) {
      if (a.nodes[k].group_rank != static_cast<int>(k)) {
        return bad(absl::StrCat("round ", r.id, ": nodes[", k, "] has group_rank ",
                                a.nodes[k].group_rank));
      }
    }
  }
  if (s.restart_count < 0 || s.restart_count > s.config.max_restarts) {
    return bad(absl::StrCat("restart_count ", s.restart_count,
                            " outside [0, max_restarts=", s.config.max_restarts, "]"));
  }
  const RoundRecord& cur = s.rounds.back();
  const bool joining = s.state == JobState::kJoining;
  if (s.state == JobState::kRunning && !cur.assignment) {
    return bad("state RUNNING but the current round never closed");
  }
  if (joining && cur.assignment) return bad("state JOINING but the round closed");
  if (!joining && !s.joined.empty()) {
    return bad("joined nodes outside a JOINING round");
  }
  if (joining && static_cast<int>(s.joined.size()) >= s.config.max_nodes) {
    return bad("a JOINING round already holds max_nodes nodes");
  }
  if (joining && s.min_reached_time.has_value() !=
                     (static_cast<int>(s.joined.size()) >= s.config.min_nodes)) {
    return bad("min_reached_time disagrees with the number of joined nodes");
  }
  absl::flat_hash_set<std::string> seen;
  for (const auto* m : {&s.joined, &s.spares}) {
    for (const auto& [seq, w] : *m) {
      if (seq < 0 || seq >= s.next_seq) return bad("join sequence out of range");
      if (absl::Status st = ValidateJoinRequest(w.request); !st.ok()) {
        return bad(st.message());
      }
      if (!seen.insert(w.request.node_id).second) {
        return bad(absl::StrCat("node \"", w.request.node_id, "\" is waiting twice"));
      }
    }
  }
  return absl::OkStatus();
}

bool InWaiting(const std::map<int64_t, WaitingNode>& waiting, absl::string_view node_id) {
  for (const auto& [seq, w] : waiting) {
    if (w.request.node_id == node_id) return true;
  }
  return false;
}

}  // namespace elastrun::rendezvous
