// The node registry: which daemons exist, their slots and labels, their
// leases, and which jobs hold their slots.
#ifndef ELASTRUN_RENDEZVOUS_REGISTRY_H_
#define ELASTRUN_RENDEZVOUS_REGISTRY_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "elastrun/v1/state.pb.h"

namespace elastrun::rendezvous {

// How leases work. Defaults notice a silent node within 3 s.
struct LeaseOptions {
  // How often daemons are told to heartbeat (> 0).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A node with no heartbeat for this long is lost (> heartbeat_interval).
  absl::Duration lease_timeout = absl::Seconds(3);
  // A node LOST this long, holding no job's slots, is forgotten (> 0;
  // InfiniteDuration: never). Ten minutes outlasts a reboot or a short
  // network cut, so a returning node finds its record (drained or not)
  // and `elastrun nodes` shows what was lost and why while someone looks;
  // and it bounds what a flood of fresh node ids leaves behind.
  absl::Duration node_expiry = absl::Minutes(10);
  // The heartbeats a second asked of all alive nodes together (0: no
  // limit). Past max_heartbeat_rate x heartbeat_interval alive nodes, the
  // interval and the lease grow in proportion, as Nomad's
  // max_heartbeats_per_second: at the defaults a cluster of up to 4,000
  // nodes heartbeats every 1 s (lease 3 s), 10,000 nodes every 2.5 s
  // (lease 7.5 s). Each node hears the current ones in every reply.
  double max_heartbeat_rate = 4000;
};

// The heartbeat interval and lease a node is given now (LeaseOptions'
// ones, grown with the cluster by max_heartbeat_rate).
struct Cadence {
  absl::Duration heartbeat_interval;
  absl::Duration lease_timeout;
};

// OK, or InvalidArgument naming the bad setting.
absl::Status ValidateLeaseOptions(const LeaseOptions& options);

// One node as the registry knows it.
struct NodeRecord {
  v1::StoredNode stored;  // the persisted part (id, incarnation, addr, ...)
  absl::Time lease_expiry;
  int used_slots = 0;          // sum of nproc_per_node of `jobs`
  // When a job was last placed on it (the registry's count of placements;
  // 0: never since this service started): among equally free nodes,
  // placement takes the least recently used, so short jobs spread.
  uint64_t last_placed = 0;
  std::set<std::string> jobs;  // unfinished jobs placed on this node
  // Attempts the daemon said it runs when it last registered.
  std::vector<v1::RunningAttempt> reported_running;
  // Its daemon registered with this service process. A node restored from
  // the store is not, until its daemon re-registers: its fresh lease is a
  // grace period to reconnect, not proof that the daemon still lives.
  bool confirmed = false;
  // Where the registry's time indexes hold it (its own bookkeeping): the
  // lease expiry it is filed under while ALIVE, the time it is due to be
  // forgotten while LOST.
  std::optional<absl::Time> indexed_lease;
  std::optional<absl::Time> indexed_lost_due;

  bool alive() const { return stored.state() == v1::NODE_STATE_ALIVE; }
  // Drained by an operator: no new placements; its running jobs go on.
  bool draining() const { return stored.draining(); }
  int free_slots() const { return stored.slots() - used_slots; }
};

// Not thread-safe: the coordinator serializes calls under its mutex. Times
// are passed in; the registry never reads a clock.
class NodeRegistry {
 public:
  explicit NodeRegistry(LeaseOptions options) : options_(options) {}

  const LeaseOptions& options() const { return options_; }
  // What a node is told (and given) when it registers or heartbeats now;
  // O(1).
  Cadence cadence() const;

  // What RegisterNode found.
  struct Registered {
    // The node was alive under another incarnation whose daemon is gone
    // (its lease ran out, or it never re-registered since the service
    // restarted): its workers died with it. The caller must treat the old
    // node as lost (before Register).
    bool restarted = false;
  };
  // OK, or InvalidArgument naming the bad field (node_id, incarnation, addr,
  // slots, labels), or AlreadyExists when another incarnation holds the
  // node with a lease live at `now`: two daemons with one --node-id would
  // otherwise evict each other for ever. The message names the node, the
  // holder's address and when its lease expires. A holder whose Watch
  // stream broke was already marked lost, so a daemon restarted after a
  // crash is not kept waiting. Changes nothing.
  absl::StatusOr<Registered> CheckRegister(const v1::RegisterNodeRequest& request,
                                           absl::Time now) const;
  // Adds or refreshes the node (ALIVE, lease from `now`). Call CheckRegister
  // first. Slots in use keep counting; a node re-registering with fewer
  // slots than its jobs use is over-committed until they finish.
  NodeRecord& Register(const v1::RegisterNodeRequest& request, absl::Time now);

  // Renews the lease (by cadence()); returns the new expiry. NotFound for an unknown or
  // lost node (it must register again), FailedPrecondition for another
  // incarnation.
  absl::StatusOr<absl::Time> Heartbeat(absl::string_view node_id,
                                       absl::string_view incarnation, absl::Time now);
  // OK if the node is registered, alive and has this incarnation; else as
  // Heartbeat.
  absl::Status CheckAlive(absl::string_view node_id, absl::string_view incarnation) const;

  // Marks an alive node LOST at `now` with `reason`; no-op otherwise. Its
  // jobs are the caller's to release.
  void MarkLost(absl::string_view node_id, absl::string_view reason, absl::Time now);

  // Alive nodes whose lease expired at `now`, by id.
  std::vector<std::string> Expired(absl::Time now) const;
  // The earliest lease expiry of an alive node.
  std::optional<absl::Time> NextExpiry() const;

  // LOST nodes due to be forgotten at `now` (lost for node_expiry), by id.
  // A node still holding a job's slots is not due until the job lets go.
  std::vector<std::string> ExpiredLost(absl::Time now) const;
  // When the next LOST node is due to be forgotten; nullopt if none.
  std::optional<absl::Time> NextLostExpiry() const;

  // The LOST node without jobs that was lost first (ties: by id), if any:
  // the one to forget first when the registry is full.
  std::optional<std::string> OldestLost() const;

  // Forgets the node; a later registration of its id is a fresh node. The
  // caller releases its jobs first. No-op for an unknown node.
  void Remove(absl::string_view node_id);
  // Sets whether the node is drained. NotFound for an unknown node.
  absl::Status SetDraining(absl::string_view node_id, bool draining);

  // Re-adds a node loaded from the store. An ALIVE node gets a fresh lease
  // from `now`, so that its daemon has a full lease to reconnect; it is not
  // `confirmed`, so a new daemon of the node (a host that rebooted with the
  // service) is not refused meanwhile. A LOST node from a file that did not
  // record when it was lost counts as lost since `now`.
  void Restore(const v1::StoredNode& stored, absl::Time now);

  // Slot accounting for a job of `nproc` workers per node.
  void Reserve(const std::string& node_id, const std::string& job_id, int nproc);
  void Release(const std::string& node_id, const std::string& job_id, int nproc);

  NodeRecord* Find(absl::string_view node_id);
  const NodeRecord* Find(absl::string_view node_id) const;
  const std::map<std::string, NodeRecord, std::less<>>& nodes() const { return nodes_; }

 private:
  LeaseOptions options_;
  uint64_t placements_ = 0;  // Reserve calls: NodeRecord::last_placed
  std::map<std::string, NodeRecord, std::less<>> nodes_;  // by node id
  // The ALIVE nodes by lease expiry and the LOST ones by when they are due
  // to be forgotten, so that the timer's questions (Expired, NextExpiry,
  // ExpiredLost, NextLostExpiry) cost what they find, not a walk over every
  // node: the timer runs after every change, and four walks per tick over
  // thousands of nodes would hold the lock until heartbeats queue and
  // leases expire.
  std::set<std::pair<absl::Time, std::string>> leases_;
  std::set<std::pair<absl::Time, std::string>> lost_due_;
  // Files `n` (id `id`) in the index its state and times call for.
  void Reindex(const std::string& id, NodeRecord& n);
  void Unindex(const std::string& id, NodeRecord& n);
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_REGISTRY_H_
