#include "rendezvous/core.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace elastrun::rendezvous {

namespace {

bool IsFinal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

Event RoundEnded(int64_t round, RoundEnd end) {
  Event e;
  e.kind = Event::Kind::kRoundEnded;
  e.round = round;
  e.end = end;
  return e;
}

}  // namespace

RendezvousCore::RendezvousCore(std::string run_id, RoundConfig config, absl::Time now) {
  if (absl::Status st = ValidateRoundConfig(config); !st.ok()) {
    // A programming error: the caller promised a validated config.
    std::fprintf(stderr, "RendezvousCore: invalid RoundConfig: %s\n",
                 std::string(st.message()).c_str());
    std::abort();
  }
  s_.run_id = std::move(run_id);
  s_.config = config;
  RoundRecord r;
  r.id = 0;
  r.opened_time = now;
  s_.rounds.push_back(std::move(r));
}

RendezvousCore::RendezvousCore(RendezvousState state) : s_(std::move(state)) {
  RebuildIndexes();
}

absl::StatusOr<std::unique_ptr<RendezvousCore>> RendezvousCore::Create(std::string run_id,
                                                                       RoundConfig config,
                                                                       absl::Time now) {
  RETURN_IF_ERROR(ValidateRoundConfig(config));
  return std::make_unique<RendezvousCore>(std::move(run_id), config, now);
}

absl::StatusOr<std::unique_ptr<RendezvousCore>> RendezvousCore::Restore(
    RendezvousState state) {
  if (absl::Status st = ValidateRendezvousState(state); !st.ok()) return st;
  return std::unique_ptr<RendezvousCore>(new RendezvousCore(std::move(state)));
}

bool RendezvousCore::finished() const { return IsFinal(s_.state); }

const RoundAssignment* RendezvousCore::assignment() const {
  if (s_.state != JobState::kRunning) return nullptr;
  return &*current().assignment;
}

const NodeAssignment* RendezvousCore::assigned(absl::string_view node_id) const {
  // rank_index_ describes the latest closed round (CloseRound, Restore).
  auto rank = rank_index_.find(node_id);
  if (rank == rank_index_.end()) return nullptr;
  for (auto it = s_.rounds.rbegin(); it != s_.rounds.rend(); ++it) {
    if (it->assignment) return &it->assignment->nodes[rank->second];
  }
  return nullptr;
}

void RendezvousCore::RebuildIndexes() {
  joined_index_.clear();
  spare_index_.clear();
  rank_index_.clear();
  succeeded_by_rank_.clear();
  succeeded_count_ = 0;
  for (const auto& [seq, n] : s_.joined) joined_index_[n.request.node_id] = seq;
  for (const auto& [seq, n] : s_.spares) spare_index_[n.request.node_id] = seq;
  for (auto it = s_.rounds.rbegin(); it != s_.rounds.rend(); ++it) {
    if (!it->assignment) continue;
    for (const NodeAssignment& n : it->assignment->nodes) {
      rank_index_[n.node_id] = n.group_rank;
    }
    succeeded_by_rank_.assign(it->assignment->nodes.size(), false);
    for (const std::string& id : it->succeeded) {
      auto r = rank_index_.find(id);
      if (r != rank_index_.end() && !succeeded_by_rank_[r->second]) {
        succeeded_by_rank_[r->second] = true;
        ++succeeded_count_;
      }
    }
    break;
  }
}

absl::StatusOr<std::vector<Event>> RendezvousCore::Join(const JoinRequest& request,
                                                        absl::Time now) {
  RETURN_IF_ERROR(ValidateJoinRequest(request));
  const std::string& id = request.node_id;
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "join of node \"%s\" to run \"%s\" refused: %s (round %d, job %s)", id, s_.run_id,
        why, round(), JobStateName(s_.state)));
  };
  if (finished()) return refuse("the job is finished");
  if (joined_index_.contains(id)) {
    return refuse("the node already joined this round");
  }
  if (spare_index_.contains(id)) {
    return refuse("the node is already waiting as a spare for the next round");
  }
  std::vector<Event> events;
  WaitingNode node{request, now};
  if (s_.state == JobState::kJoining) {
    AddJoined(std::move(node), events);
    return events;
  }
  // RUNNING.
  if (rank_index_.contains(id)) {
    return refuse("the node is already in the running round");
  }
  // Either way the node waits in the spares: at max_nodes until some other
  // cause opens the next round; below it, a scale-up opens that round now
  // and OpenRound pulls the newcomer in as any waiting node.
  const bool at_max = current().assignment->group_world_size >= s_.config.max_nodes;
  int64_t seq = s_.next_seq++;
  spare_index_[id] = seq;
  s_.spares.emplace(seq, std::move(node));
  if (at_max) return events;
  EndRoundAndOpenNext(RoundEnd::kScaleUp, /*restart=*/false, now, events);
  return events;
}

void RendezvousCore::AddJoined(WaitingNode node, std::vector<Event>& events) {
  const absl::Time when = node.joined_time;
  int64_t seq = s_.next_seq++;
  joined_index_[node.request.node_id] = seq;
  s_.joined.emplace(seq, std::move(node));
  const int n = joined_count();
  if (n == s_.config.min_nodes) s_.min_reached_time = when;
  if (n >= s_.config.max_nodes) CloseRound(when, events);
}

// A rank asked for (the static backend's node rank) comes first: to the
// node that held it in the latest closed round, else to the earliest node
// that asked for it. Then stable ranks: a node keeps its rank of the latest
// closed round while it is < n; the others fill the free ranks in join
// order. rank_index_ still describes that previous round here. O(n).
std::vector<NodeAssignment> RendezvousCore::AssignRanks() const {
  const int n = joined_count();
  std::vector<NodeAssignment> nodes(n);
  std::vector<bool> taken(n, false);
  auto place = [&nodes, &taken](int rank, const JoinRequest& r) {
    taken[rank] = true;
    NodeAssignment& slot = nodes[rank];
    slot.node_id = r.node_id;
    slot.addr = r.addr;
    slot.local_world_size = r.local_world_size;
  };
  auto held = [this](const JoinRequest& r) {
    auto prev = rank_index_.find(r.node_id);
    return prev != rank_index_.end() && prev->second == r.wanted_group_rank;
  };
  for (const auto& [seq, w] : s_.joined) {
    const int wanted = w.request.wanted_group_rank;
    if (wanted >= 0 && wanted < n && held(w.request)) place(wanted, w.request);
  }
  std::vector<const JoinRequest*> unplaced;
  for (const auto& [seq, w] : s_.joined) {
    const int wanted = w.request.wanted_group_rank;
    if (wanted >= 0 && wanted < n && taken[wanted] &&
        nodes[wanted].node_id == w.request.node_id) {
      continue;  // placed above
    }
    if (wanted >= 0 && wanted < n && !taken[wanted]) {
      place(wanted, w.request);
    } else {
      unplaced.push_back(&w.request);
    }
  }
  std::vector<const JoinRequest*> movers;
  for (const JoinRequest* r : unplaced) {
    auto prev = rank_index_.find(r->node_id);
    if (prev != rank_index_.end() && prev->second < n && !taken[prev->second]) {
      place(prev->second, *r);
    } else {
      movers.push_back(r);
    }
  }
  int free_rank = 0;
  for (const JoinRequest* r : movers) {
    while (taken[free_rank]) ++free_rank;
    place(free_rank, *r);
  }
  int offset = 0;
  for (int rank = 0; rank < n; ++rank) {
    nodes[rank].group_rank = rank;
    nodes[rank].rank_offset = offset;
    offset += nodes[rank].local_world_size;
  }
  return nodes;
}

void RendezvousCore::CloseRound(absl::Time now, std::vector<Event>& events) {
  const int n = joined_count();
  RoundAssignment a;
  a.round = round();
  a.restart_count = s_.restart_count;
  a.group_world_size = n;
  a.nodes = AssignRanks();
  a.world_size = 0;
  for (const NodeAssignment& node : a.nodes) a.world_size += node.local_world_size;
  const JoinRequest& master = s_.joined.at(joined_index_.at(a.nodes[0].node_id)).request;
  a.master_addr = master.addr;
  a.master_port = master.master_port;

  s_.joined.clear();
  joined_index_.clear();
  s_.min_reached_time.reset();
  rank_index_.clear();
  rank_index_.reserve(n);
  for (const NodeAssignment& node : a.nodes) {
    rank_index_[node.node_id] = node.group_rank;
  }
  succeeded_by_rank_.assign(n, false);
  succeeded_count_ = 0;

  RoundRecord& r = current();
  r.closed_time = now;
  r.assignment = a;
  s_.state = JobState::kRunning;
  Event e;
  e.kind = Event::Kind::kRoundClosed;
  e.round = a.round;
  e.assignment = std::move(a);
  events.push_back(std::move(e));
}

void RendezvousCore::EndRoundAndOpenNext(RoundEnd end, bool restart, absl::Time now,
                                         std::vector<Event>& events) {
  RoundRecord& r = current();
  r.ended_time = now;
  r.end_reason = end;
  r.counted_as_restart = restart;
  if (restart) ++s_.restart_count;
  events.push_back(RoundEnded(r.id, end));
  OpenRound(r.id + 1, now, events);
}

void RendezvousCore::OpenRound(int64_t id, absl::Time now, std::vector<Event>& events) {
  RoundRecord r;
  r.id = id;
  r.opened_time = now;
  s_.rounds.push_back(std::move(r));
  s_.state = JobState::kJoining;
  s_.joined.clear();
  joined_index_.clear();
  s_.min_reached_time.reset();
  // Spares enter in arrival order; AddJoined closes the round at max_nodes,
  // and whoever is left stays a spare for the round after.
  while (!s_.spares.empty() && s_.state == JobState::kJoining) {
    auto it = s_.spares.begin();
    WaitingNode node = std::move(it->second);
    spare_index_.erase(node.request.node_id);
    s_.spares.erase(it);
    // They join the new round now, not when they first arrived.
    node.joined_time = now;
    AddJoined(std::move(node), events);
  }
}

void RendezvousCore::Finish(JobState final_state, std::string reason, absl::Time now,
                            std::vector<Event>& events) {
  RoundRecord& r = current();
  if (!r.ended_time) r.ended_time = now;
  s_.state = final_state;
  s_.finish_reason = reason;
  s_.finished_time = now;
  s_.joined.clear();
  joined_index_.clear();
  s_.spares.clear();
  spare_index_.clear();
  s_.min_reached_time.reset();
  Event e;
  e.kind = Event::Kind::kJobFinished;
  e.round = r.id;
  e.reason = std::move(reason);
  e.final_state = final_state;
  events.push_back(std::move(e));
}

absl::Status RendezvousCore::CheckReport(absl::string_view what,
                                         absl::string_view node_id, int64_t round_id,
                                         bool* stale) const {
  *stale = false;
  if (round_id > round() || round_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s of node \"%s\" names round %d, but run \"%s\" is at round %d",
                        what, node_id, round_id, s_.run_id, round()));
  }
  if (round_id < round()) {
    *stale = true;
    return absl::OkStatus();
  }
  if (!current().assignment) {
    // Current round, not closed: either JOINING, or finished (cancelled or
    // timed out) before it closed. No worker can have run in it.
    return absl::FailedPreconditionError(
        absl::StrFormat("%s of node \"%s\" for round %d of run \"%s\": the round never "
                        "started (job %s)",
                        what, node_id, round_id, s_.run_id, JobStateName(s_.state)));
  }
  if (!rank_index_.contains(node_id)) {
    return absl::NotFoundError(
        absl::StrFormat("%s of node \"%s\": the node is not in round %d of run \"%s\"",
                        what, node_id, round_id, s_.run_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Event>> RendezvousCore::ReportFailure(const Failure& failure,
                                                                 absl::Time now) {
  std::vector<Event> events;
  if (s_.state == JobState::kSucceeded || s_.state == JobState::kCancelled) {
    return events;  // Workers stopped by a cancel exit with errors; noise.
  }
  bool stale = false;
  RETURN_IF_ERROR(CheckReport("failure report", failure.node_id, failure.round, &stale));
  if (stale) return events;
  const int rank = rank_index_.at(failure.node_id);
  const RoundAssignment& a = *current().assignment;
  const NodeAssignment& node = a.nodes[rank];
  if (failure.local_rank < 0 || failure.local_rank >= node.local_world_size ||
      failure.rank < 0 || failure.rank >= a.world_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "failure report of node \"%s\" round %d: local_rank %d / rank %d out "
        "of range (local_world_size %d, world_size %d)",
        failure.node_id, failure.round, failure.local_rank, failure.rank,
        node.local_world_size, a.world_size));
  }
  if (succeeded_by_rank_[rank]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "failure report of node \"%s\" round %d: the node already reported "
        "success for this round",
        failure.node_id, failure.round));
  }
  RoundRecord& r = current();
  const bool first_of_round = r.failures.empty();
  r.failures.push_back(failure);
  // Root cause: earliest `time` of the latest round with failures; ties keep
  // the report that came first.
  if (first_of_round || !s_.root_cause || failure.time < s_.root_cause->time) {
    s_.root_cause = failure;
  }
  if (s_.state != JobState::kRunning) return events;  // FAILED: record only.
  // The one place that decides whether a failure costs a restart or ends
  // the job: a program that could not be started fails it at once.
  if (!failure.cannot_start && s_.restart_count < s_.config.max_restarts) {
    EndRoundAndOpenNext(RoundEnd::kFailure, /*restart=*/true, now, events);
    return events;
  }
  r.ended_time = now;
  r.end_reason = RoundEnd::kFailed;
  events.push_back(RoundEnded(r.id, RoundEnd::kFailure));
  const std::string why = failure.signal != 0
                              ? absl::StrFormat("signal %d", failure.signal)
                              : absl::StrFormat("exit code %d", failure.exit_code);
  if (failure.cannot_start) {
    Finish(JobState::kFailed,
           absl::StrFormat("rank %d (node \"%s\", local rank %d) could not be started in "
                           "round %d (not restarted: it cannot start again)%s%s",
                           failure.rank, failure.node_id, failure.local_rank, failure.round,
                           failure.message.empty() ? "" : ": ", failure.message),
           now, events);
    return events;
  }
  Finish(JobState::kFailed,
         absl::StrFormat("rank %d (node \"%s\", local rank %d) failed with %s "
                         "in round %d after %d of %d restarts%s%s",
                         failure.rank, failure.node_id, failure.local_rank, why,
                         failure.round, s_.restart_count, s_.config.max_restarts,
                         failure.message.empty() ? "" : ": ", failure.message),
         now, events);
  return events;
}

absl::StatusOr<std::vector<Event>> RendezvousCore::ReportSuccess(
    absl::string_view node_id, int64_t round_id, absl::Time now) {
  std::vector<Event> events;
  if (s_.state == JobState::kFailed || s_.state == JobState::kCancelled) {
    return events;
  }
  bool stale = false;
  RETURN_IF_ERROR(CheckReport("success report", node_id, round_id, &stale));
  if (stale) return events;
  const int rank = rank_index_.at(std::string(node_id));
  if (succeeded_by_rank_[rank]) return events;  // repeat (or SUCCEEDED)
  succeeded_by_rank_[rank] = true;
  ++succeeded_count_;
  RoundRecord& r = current();
  r.succeeded.push_back(std::string(node_id));
  if (succeeded_count_ == r.assignment->group_world_size) {
    r.end_reason = RoundEnd::kSucceeded;
    Finish(JobState::kSucceeded,
           absl::StrFormat("all %d nodes (%d workers) succeeded in round %d "
                           "after %d restarts",
                           r.assignment->group_world_size, r.assignment->world_size, r.id,
                           s_.restart_count),
           now, events);
  }
  return events;
}

std::vector<Event> RendezvousCore::NodeLost(absl::string_view node_id, absl::Time now) {
  std::vector<Event> events;
  if (finished()) return events;
  const std::string id(node_id);
  if (auto it = spare_index_.find(id); it != spare_index_.end()) {
    s_.spares.erase(it->second);
    spare_index_.erase(it);
    return events;
  }
  if (s_.state == JobState::kJoining) {
    auto it = joined_index_.find(id);
    if (it == joined_index_.end()) return events;
    s_.joined.erase(it->second);
    joined_index_.erase(it);
    if (joined_count() < s_.config.min_nodes) s_.min_reached_time.reset();
    return events;
  }
  // RUNNING.
  auto it = rank_index_.find(id);
  if (it == rank_index_.end()) return events;
  if (succeeded_by_rank_[it->second]) {
    // Its work is done; losing it changes nothing for the others.
    current().lost_after_success.push_back(id);
    return events;
  }
  EndRoundAndOpenNext(RoundEnd::kNodeLost, /*restart=*/false, now, events);
  return events;
}

std::vector<Event> RendezvousCore::Cancel(absl::string_view why, absl::Time now) {
  std::vector<Event> events;
  if (finished()) return events;
  RoundRecord& r = current();
  r.ended_time = now;
  r.end_reason = RoundEnd::kCancelled;
  if (s_.state == JobState::kRunning)
    events.push_back(RoundEnded(r.id, RoundEnd::kCancelled));
  Finish(JobState::kCancelled,
         absl::StrCat("cancelled in round ", r.id, why.empty() ? "" : ": ", why), now,
         events);
  return events;
}

std::vector<Event> RendezvousCore::Abandon(absl::string_view why, absl::Time now) {
  std::vector<Event> events;
  if (finished()) return events;
  RoundRecord& r = current();
  r.ended_time = now;
  r.end_reason = RoundEnd::kAbandoned;
  if (s_.state == JobState::kRunning)
    events.push_back(RoundEnded(r.id, RoundEnd::kAbandoned));
  Finish(JobState::kFailed, std::string(why), now, events);
  return events;
}

absl::StatusOr<std::vector<Event>> RendezvousCore::CloseNow(absl::Time now) {
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot close round %d of run \"%s\" now: %s (job %s)", round(),
                        s_.run_id, why, JobStateName(s_.state)));
  };
  if (finished()) return refuse("the job is finished");
  if (s_.state != JobState::kJoining) return refuse("the round is not joining");
  if (joined_count() < s_.config.min_nodes) {
    return refuse(absl::StrFormat("%d of min_nodes=%d nodes joined", joined_count(),
                                  s_.config.min_nodes));
  }
  std::vector<Event> events;
  CloseRound(now, events);
  return events;
}

std::optional<absl::Time> RendezvousCore::NextDeadline() const {
  if (s_.state != JobState::kJoining) return std::nullopt;
  if (s_.min_reached_time) {
    return *s_.min_reached_time + s_.config.last_call_timeout;
  }
  return current().opened_time + s_.config.join_timeout;
}

std::vector<Event> RendezvousCore::Tick(absl::Time now) {
  std::vector<Event> events;
  std::optional<absl::Time> deadline = NextDeadline();
  if (!deadline || now < *deadline) return events;
  if (s_.min_reached_time) {
    CloseRound(now, events);
    return events;
  }
  RoundRecord& r = current();
  r.ended_time = now;
  r.end_reason = RoundEnd::kJoinTimeout;
  Finish(JobState::kFailed,
         absl::StrFormat("round %d timed out: only %d of min_nodes=%d nodes "
                         "joined within join_timeout=%s",
                         r.id, joined_count(), s_.config.min_nodes,
                         absl::FormatDuration(s_.config.join_timeout)),
         now, events);
  return events;
}

}  // namespace elastrun::rendezvous
