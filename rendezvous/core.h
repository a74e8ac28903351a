// The rendezvous core: the pure state machine behind every rendezvous of one
// job. It decides when a round closes, which group rank and global rank
// offset every node gets, when a round ends (worker failure, node lost,
// scale-up) and when the job is finished.
//
// It does no I/O, has no threads and never reads a clock: every event method
// takes `now`, and timers fire only in Tick(now). Two adapters drive it:
// `elastrun run` in-process (one node, MIN=MAX=1) and the gRPC rendezvous
// service (many nodes). They turn the returned Events into commands to nodes.
//
// All job state lives in one plain copyable struct (RendezvousState) so the
// service can persist it and Restore() it after a restart.
#ifndef ELASTRUN_RENDEZVOUS_CORE_H_
#define ELASTRUN_RENDEZVOUS_CORE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {

// The state machine of one job's rendezvous.
//
// Not thread-safe: the adapters serialize calls (they hold a mutex). Timers
// (last call, join timeout) fire only in Tick(now); event methods never fire
// them, so an adapter should Tick(now) before delivering an event whenever
// NextDeadline() <= now. Time may be passed in any order; the core does not
// require `now` to be monotonic.
//
// Finished jobs: Join is refused (FailedPrecondition); NodeLost, Cancel and
// Tick are no-ops. Reports that can no longer matter (a failure after
// SUCCEEDED or CANCELLED, a success after FAILED or CANCELLED) are OK no-ops;
// the others keep their usual checks: a failure for the last round of a
// FAILED job is recorded and may change the root cause, a repeated success
// after SUCCEEDED is a no-op.
//
// Partial success: ReportSuccess is provisional until every participant of
// the round reported it. If another node of the same round then fails, the
// failure is handled as usual (restart or FAILED) and the next round needs
// every node again, including those that succeeded: the job succeeds only
// when one whole round does. A node that already succeeded being lost
// (daemon exits or lease expires) is not a membership change: it is recorded
// and still counts as succeeded.
class RendezvousCore {
 public:
  // Opens round 0 at `now`. `config` must pass ValidateRoundConfig (the
  // process aborts otherwise); use Create() for unchecked input.
  RendezvousCore(std::string run_id, RoundConfig config, absl::Time now);

  // As the constructor, but InvalidArgument for a bad config.
  static absl::StatusOr<std::unique_ptr<RendezvousCore>> Create(std::string run_id,
                                                                RoundConfig config,
                                                                absl::Time now);

  // Rebuilds a core from a persisted state. InvalidArgument if the state is
  // inconsistent (bad config, no rounds, ids out of sequence, ...).
  static absl::StatusOr<std::unique_ptr<RendezvousCore>> Restore(RendezvousState state);

  // A node joins the open round. JOINING: added; the round closes (event
  // kRoundClosed) when max_nodes joined. RUNNING, node not in the round:
  // below max_nodes it is a scale-up (kRoundEnded "scale-up", next round
  // opens with this node in it); at max_nodes the node waits as a spare for
  // the next round (no events).
  // Errors: InvalidArgument for a bad request; FailedPrecondition if the
  // node is already in the current round or waiting as a spare, or the job
  // is finished.
  absl::StatusOr<std::vector<Event>> Join(const JoinRequest& request, absl::Time now);

  // A worker of `failure.node_id` failed in `failure.round`. Current running
  // round: recorded; restarts (kRoundEnded "failure", next round opens) while
  // restart_count < max_restarts, else the job FAILS (kRoundEnded, then
  // kJobFinished). Later failures of that round are only recorded.
  // Old round: stale, ignored (OK, no events).
  // Errors: InvalidArgument (future round, ranks out of range), NotFound
  // (node not in the round), FailedPrecondition (round not running yet, or
  // the node already reported success).
  absl::StatusOr<std::vector<Event>> ReportFailure(const Failure& failure,
                                                   absl::Time now);

  // All workers of `node_id` exited 0 in `round`. When every participant of
  // the running round did, the job SUCCEEDS (kJobFinished). Repeats and old
  // rounds are OK no-ops. Errors as for ReportFailure.
  absl::StatusOr<std::vector<Event>> ReportSuccess(absl::string_view node_id,
                                                   int64_t round, absl::Time now);

  // The node is gone (daemon disconnected or lease expired). Spare or
  // JOINING: removed (the last call is cancelled if the round drops below
  // min_nodes). RUNNING participant: kRoundEnded "node lost" (not a
  // restart) and the next round opens. Unknown node or finished job: no-op.
  std::vector<Event> NodeLost(absl::string_view node_id, absl::Time now);

  // Cancels the job: kRoundEnded "cancelled" if a round was running, then
  // kJobFinished CANCELLED with `why`. No-op once finished.
  std::vector<Event> Cancel(absl::string_view why, absl::Time now);

  // Fails the job now with `why`: the adapter learned that it cannot go on
  // (after a service restart, no daemon runs it any more).
  // kRoundEnded "abandoned" if a round was running, then kJobFinished
  // FAILED with `why` as finish_reason. No-op once finished.
  std::vector<Event> Abandon(absl::string_view why, absl::Time now);

  // Closes the JOINING round now, as if its last call had just run out:
  // the adapter knows nobody else can join (every node it placed on the job
  // joined), so waiting out last_call_timeout would only delay the start.
  // Returns kRoundClosed; the round's closed_time is `now`. Errors
  // (FailedPrecondition, nothing changes): the job is finished, the round is
  // not JOINING (already running), or fewer than min_nodes joined it.
  absl::StatusOr<std::vector<Event>> CloseNow(absl::Time now);

  // Fires every timer due at `now`: closes a JOINING round whose last call
  // expired, or fails the job if the round stayed below min_nodes for
  // join_timeout.
  std::vector<Event> Tick(absl::Time now);

  // The earliest pending timer, if any (only while JOINING).
  std::optional<absl::Time> NextDeadline() const;

  JobState state() const { return s_.state; }
  bool finished() const;
  int64_t round() const { return s_.rounds.back().id; }  // current round id
  int restart_count() const { return s_.restart_count; }
  const std::string& run_id() const { return s_.run_id; }
  const RoundConfig& config() const { return s_.config; }
  // The current closed round; nullptr while JOINING or once finished.
  const RoundAssignment* assignment() const;
  // The node's entry in the latest round that closed (the current one
  // while RUNNING), or nullptr. O(1): a round of N nodes is looked up N
  // times as it starts.
  const NodeAssignment* assigned(absl::string_view node_id) const;
  // The earliest-timed failure of the latest round that had one: for a
  // FAILED job, its root cause. Empty if no worker ever failed.
  const std::optional<Failure>& root_cause() const { return s_.root_cause; }
  // Human summary of why the job finished; empty before.
  const std::string& finish_reason() const { return s_.finish_reason; }
  int joined_count() const { return static_cast<int>(s_.joined.size()); }
  int spare_count() const { return static_cast<int>(s_.spares.size()); }
  // Whether `node_id` joined the open round / waits as a spare for the
  // next one (from the indexes: O(1), where InWaiting walks the list).
  bool joined(absl::string_view node_id) const { return joined_index_.contains(node_id); }
  bool spare(absl::string_view node_id) const { return spare_index_.contains(node_id); }
  // Every round so far, oldest first; back() is the current one.
  const std::vector<RoundRecord>& history() const { return s_.rounds; }
  // The whole state, to persist.
  const RendezvousState& state_snapshot() const { return s_; }

 private:
  explicit RendezvousCore(RendezvousState state);  // state already checked

  RoundRecord& current() { return s_.rounds.back(); }
  const RoundRecord& current() const { return s_.rounds.back(); }
  // Adds a node to the JOINING round; closes the round at max_nodes.
  void AddJoined(WaitingNode node, std::vector<Event>& events);
  void CloseRound(absl::Time now, std::vector<Event>& events);
  // The joined nodes by group rank, with their rank offsets (CloseRound).
  std::vector<NodeAssignment> AssignRanks() const;
  // Ends the running round and opens the next one (spares enter it).
  void EndRoundAndOpenNext(RoundEnd end, bool restart, absl::Time now,
                           std::vector<Event>& events);
  void OpenRound(int64_t id, absl::Time now, std::vector<Event>& events);
  void Finish(JobState final_state, std::string reason, absl::Time now,
              std::vector<Event>& events);
  // Checks shared by ReportFailure/ReportSuccess; sets *stale for old rounds.
  absl::Status CheckReport(absl::string_view what, absl::string_view node_id,
                           int64_t round, bool* stale) const;
  void RebuildIndexes();

  RendezvousState s_;
  // Derived from s_ (rebuilt by Restore), never persisted.
  absl::flat_hash_map<std::string, int64_t> joined_index_;  // node -> seq
  absl::flat_hash_map<std::string, int64_t> spare_index_;   // node -> seq
  // Group ranks of the latest closed round (running or the last one).
  absl::flat_hash_map<std::string, int> rank_index_;
  std::vector<bool> succeeded_by_rank_;  // of the latest closed round
  int succeeded_count_ = 0;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_CORE_H_
