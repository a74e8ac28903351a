// The plain data of the rendezvous: configs, requests, assignments, events,
// history and the whole persisted state, with their validation. No logic
// beyond checks; the state machine is in core.h.
#ifndef ELASTRUN_RENDEZVOUS_TYPES_H_
#define ELASTRUN_RENDEZVOUS_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace elastrun::rendezvous {

// Upper bounds on network inputs, so that sizes and rank sums never overflow
// (kMaxNodes * kMaxLocalWorldSize < 2^31).
inline constexpr int kMaxNodes = 100000;
inline constexpr int kMaxLocalWorldSize = 4096;
inline constexpr int kMaxIdLength = 256;  // node_id and addr

// How a job's rounds are formed. All fields must pass ValidateRoundConfig.
struct RoundConfig {
  // 1 <= min_nodes <= max_nodes <= kMaxNodes.
  int min_nodes = 1;
  int max_nodes = 1;
  // After min_nodes joined, wait this long for more, then close (>= 0).
  absl::Duration last_call_timeout = absl::Seconds(1);
  // A round that still has < min_nodes this long after it opened fails the
  // job (> 0).
  absl::Duration join_timeout = absl::Seconds(600);
  // Failure-caused restarts allowed (>= 0); membership changes do not count.
  int max_restarts = 0;
};

// OK, or InvalidArgument naming the offending field and its valid range.
absl::Status ValidateRoundConfig(const RoundConfig& config);

// A node asking to take part in the current (or next) round.
struct JoinRequest {
  std::string node_id;       // unique per node, non-empty
  std::string addr;          // advertised address; MASTER_ADDR if group rank 0
  int master_port = 0;       // reserved on this node, 1..65535; MASTER_PORT if rank 0
  int local_world_size = 1;  // workers on this node, 1..kMaxLocalWorldSize
  // The group rank asked for (the static backend's node rank); -1: any.
  int wanted_group_rank = -1;
};

// OK, or InvalidArgument naming the field (node_id, addr, master_port,
// local_world_size).
absl::Status ValidateJoinRequest(const JoinRequest& request);

struct NodeAssignment {
  std::string node_id;
  std::string addr;
  int group_rank = 0;
  int local_world_size = 1;
  int rank_offset = 0;  // global rank of this node's local rank 0
};

// The outcome of a closed round; identical for every node of the round.
struct RoundAssignment {
  int64_t round = 0;      // 0 first, +1 for every new round (any cause)
  int restart_count = 0;  // failure-caused restarts so far
  std::string master_addr;
  int master_port = 0;
  int world_size = 0;                 // sum of local_world_size
  int group_world_size = 0;           // number of nodes
  std::vector<NodeAssignment> nodes;  // indexed by group_rank

  // The node's entry, or nullptr if it is not in this round. O(nodes): for
  // the latest closed round, RendezvousCore::assigned() is O(1).
  const NodeAssignment* Find(absl::string_view node_id) const;
};

// Reported by a node when one of its workers failed.
struct Failure {
  std::string node_id;
  int64_t round = 0;
  int local_rank = 0;
  int rank = 0;
  int exit_code = 0;
  int signal = 0;         // != 0 when killed by a signal
  std::string message;    // from the worker's error file, may be empty
  std::string traceback;  // from the worker's error file, may be empty
  absl::Time time;        // when the worker exited
  // The program could not be started at all (not found, not executable, no
  // log folder): restarting cannot help, so the core fails the job at once
  // instead of spending a restart. The one place that decides this is
  // RendezvousCore::ReportFailure.
  bool cannot_start = false;
  // Declared hung by its agent rather than failed by itself; `message` then
  // says so. hung_step: its newest reported step, -1: none.
  bool hung = false;
  int64_t hung_step = -1;
};

enum class JobState { kJoining, kRunning, kSucceeded, kFailed, kCancelled };

// "JOINING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED".
absl::string_view JobStateName(JobState state);

// Why a round ended: the round's record (RoundRecord::end_reason) and a
// kRoundEnded event (Event::end) say it with one of these, never a string.
enum class RoundEnd {
  kNone,         // open or running
  kFailure,      // a worker failed; the next round restarts the job
  kFailed,       // a worker failed with no restart left: the job failed
  kNodeLost,     // a node of the round was lost; the next round re-forms
  kScaleUp,      // more nodes came; the next round takes them
  kCancelled,    // the job was cancelled
  kAbandoned,    // no daemon ran it after a service restart
  kSucceeded,    // every node succeeded
  kJoinTimeout,  // too few nodes joined in time
};

// The name the API, the state file and messages use: "failure", "failed",
// "node lost", "scale-up", "cancelled", "abandoned", "succeeded",
// "join timeout"; "" for kNone.
absl::string_view RoundEndName(RoundEnd end);
// The RoundEnd of `name`; kNone for "" and for a name this version does
// not know (a newer service's).
RoundEnd RoundEndFromName(absl::string_view name);

// What a call caused. Within one call's vector events are in causal order;
// kJobFinished, if present, is last.
struct Event {
  enum class Kind {
    // A round closed; `assignment` holds ranks for every node: start workers.
    kRoundClosed,
    // A RUNNING round stopped while workers may still run: stop them. Unless
    // a kJobFinished follows, round `round + 1` is now open and every node
    // that wants to continue must Join it (spares are already in it).
    kRoundEnded,
    // The job reached a final state; nothing else will happen.
    kJobFinished,
  };
  Kind kind = Kind::kRoundClosed;
  int64_t round = 0;
  // kRoundEnded: why (kFailure also when no restart is left: a
  // kJobFinished follows).
  RoundEnd end = RoundEnd::kNone;
  // kJobFinished: a human summary.
  std::string reason;
  std::optional<RoundAssignment> assignment;  // kRoundClosed only
  JobState final_state = JobState::kJoining;  // kJobFinished only
};

// History of one round.
struct RoundRecord {
  int64_t id = 0;
  absl::Time opened_time;
  std::optional<absl::Time> closed_time;  // set when the round closed
  std::optional<absl::Time> ended_time;   // set when it stopped, for any cause
  RoundEnd end_reason = RoundEnd::kNone;
  bool counted_as_restart = false;  // ended by a failure within max_restarts
  // Participants with their ranks; set when the round closed.
  std::optional<RoundAssignment> assignment;
  std::vector<Failure> failures;                // in arrival order
  std::vector<std::string> succeeded;           // nodes, in report order
  std::vector<std::string> lost_after_success;  // see NodeLost
};

// A node waiting in a JOINING round or as a spare, with its arrival order.
struct WaitingNode {
  JoinRequest request;
  absl::Time joined_time;
};

// Whether `node_id` waits in `waiting` (a state's joined nodes or spares).
bool InWaiting(const std::map<int64_t, WaitingNode>& waiting, absl::string_view node_id);

// Everything the core knows: persist this, Restore() from it. Plain data.
struct RendezvousState {
  std::string run_id;
  RoundConfig config;
  JobState state = JobState::kJoining;
  int restart_count = 0;
  std::vector<RoundRecord> rounds;  // every round so far; back() is current
  // The current round's joined nodes while JOINING, keyed by arrival
  // sequence (join order); empty otherwise.
  std::map<int64_t, WaitingNode> joined;
  // Nodes that joined while the running round was at max_nodes; they enter
  // the next round automatically, in this order.
  std::map<int64_t, WaitingNode> spares;
  int64_t next_seq = 0;  // arrival sequence for `joined` and `spares`
  // When the current JOINING round reached min_nodes (last call started).
  std::optional<absl::Time> min_reached_time;
  // Earliest-timed failure of the latest round with a reported failure.
  std::optional<Failure> root_cause;
  std::string finish_reason;  // set when the job finished
  std::optional<absl::Time> finished_time;
};

// OK, or InvalidArgument saying what is inconsistent: a bad config, no rounds,
// round ids not 0..n-1, an assignment whose ranks do not match its index, a
// state that contradicts its current round, a bad or duplicate waiting node.
absl::Status ValidateRendezvousState(const RendezvousState& state);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_TYPES_H_
