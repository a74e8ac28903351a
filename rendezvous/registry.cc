#include "rendezvous/registry.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rendezvous/codec.h"
#include "rendezvous/job_spec.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {
namespace {

constexpr int kMaxLabels = 64;
constexpr size_t kMaxLabelLength = 256;
constexpr int kMaxSlots = kMaxLocalWorldSize;

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat("RegisterNode.%s: %s", field, why));
}

// The refusal of a second daemon for a node whose holder is alive.
absl::Status Held(const NodeRecord& n, absl::Time now) {
  return absl::AlreadyExistsError(absl::StrFormat(
      "node \"%s\" is held by another daemon at %s (incarnation %s) whose lease "
      "expires in %s, at %s; stop that daemon or give this one another --node-id",
      n.stored.node_id(), n.stored.addr(), n.stored.incarnation(),
      absl::FormatDuration(absl::Trunc(n.lease_expiry - now, absl::Milliseconds(1))),
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", n.lease_expiry, absl::UTCTimeZone())));
}

}  // namespace

absl::Status ValidateLeaseOptions(const LeaseOptions& o) {
  if (o.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("heartbeat interval %s must be greater than 0",
                        absl::FormatDuration(o.heartbeat_interval)));
  }
  if (o.lease_timeout <= o.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lease timeout %s must be longer than the heartbeat interval %s",
        absl::FormatDuration(o.lease_timeout), absl::FormatDuration(o.heartbeat_interval)));
  }
  if (!(o.max_heartbeat_rate >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max heartbeat rate %g must be 0 (no limit) or more", o.max_heartbeat_rate));
  }
  if (o.node_expiry <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node expiry %s must be greater than 0", absl::FormatDuration(o.node_expiry)));
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeRegistry::Registered> NodeRegistry::CheckRegister(
    const v1::RegisterNodeRequest& r, absl::Time now) const {
  if (r.node_id().empty() || r.node_id().size() > kMaxIdLength) {
    return Bad("node_id", absl::StrFormat("must have 1..%d characters", kMaxIdLength));
  }
  for (const char c : r.node_id()) {
    if (absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return Bad("node_id", absl::StrFormat("\"%s\" holds a control character (NUL, "
                                            "newline, ...)",
                                            absl::CHexEscape(r.node_id())));
    }
  }
  if (r.incarnation().empty() || r.incarnation().size() > kMaxIdLength) {
    return Bad("incarnation", absl::StrFormat("must have 1..%d characters", kMaxIdLength));
  }
  if (r.addr().empty() || r.addr().size() > kMaxIdLength) {
    return Bad("addr", absl::StrFormat("must have 1..%d characters", kMaxIdLength));
  }
  if (r.slots() < 1 || r.slots() > kMaxSlots) {
    return Bad("slots", absl::StrFormat("%d is out of range 1..%d", r.slots(), kMaxSlots));
  }
  if (r.labels_size() > kMaxLabels) {
    return Bad("labels", absl::StrFormat("%d labels; at most %d", r.labels_size(), kMaxLabels));
  }
  for (const auto& [k, v] : r.labels()) {
    if (k.empty() || k.size() > kMaxLabelLength || v.size() > kMaxLabelLength) {
      return Bad("labels", absl::StrFormat("label \"%s\": keys need 1..%d characters, "
                                           "values at most %d",
                                           absl::CHexEscape(k.substr(0, 64)),
                                           kMaxLabelLength, kMaxLabelLength));
    }
  }
  if (absl::Status pool = ValidatePool(r.pool()); !pool.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterNode.", pool.message()));
  }
  if (r.running_size() > 4096) return Bad("running", "too many attempts");
  Registered out;
  const NodeRecord* n = Find(r.node_id());
  if (n == nullptr || !n->alive() || n->stored.incarnation() == r.incarnation()) return out;
  if (n->confirmed && n->lease_expiry > now) return Held(*n, now);
  out.restarted = true;
  return out;
}

Cadence NodeRegistry::cadence() const {
  Cadence c{options_.heartbeat_interval, options_.lease_timeout};
  if (options_.max_heartbeat_rate <= 0) return c;
  // leases_ holds every alive node once.
  const double rate =
      static_cast<double>(leases_.size()) / absl::ToDoubleSeconds(c.heartbeat_interval);
  if (rate <= options_.max_heartbeat_rate) return c;
  const double grow = rate / options_.max_heartbeat_rate;
  c.heartbeat_interval = absl::Ceil(c.heartbeat_interval * grow, absl::Milliseconds(1));
  c.lease_timeout = absl::Ceil(c.lease_timeout * grow, absl::Milliseconds(1));
  return c;
}

NodeRecord& NodeRegistry::Register(const v1::RegisterNodeRequest& r, absl::Time now) {
  NodeRecord& n = nodes_[r.node_id()];
  const bool fresh = !n.stored.has_registered_time() ||
                     n.stored.incarnation() != r.incarnation() || !n.alive();
  n.stored.set_node_id(r.node_id());
  n.stored.set_incarnation(r.incarnation());
  n.stored.set_addr(r.addr());
  n.stored.set_slots(r.slots());
  *n.stored.mutable_labels() = r.labels();
  n.stored.set_pool(r.pool());
  n.stored.set_state(v1::NODE_STATE_ALIVE);
  n.stored.clear_lost_reason();
  n.stored.clear_lost_time();
  if (fresh) *n.stored.mutable_registered_time() = ToProto(now);
  n.lease_expiry = now + cadence().lease_timeout;
  n.confirmed = true;
  n.reported_running.assign(r.running().begin(), r.running().end());
  Reindex(r.node_id(), n);
  return n;
}

absl::Status NodeRegistry::CheckAlive(absl::string_view node_id,
                                      absl::string_view incarnation) const {
  const NodeRecord* n = Find(node_id);
  if (n == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("node \"%s\" is not registered; call RegisterNode", node_id));
  }
  if (!n->alive()) {
    return absl::NotFoundError(absl::StrFormat(
        "node \"%s\" was lost (%s); call RegisterNode again", node_id,
        n->stored.lost_reason()));
  }
  if (n->stored.incarnation() != incarnation) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node \"%s\" is registered by another daemon (incarnation \"%s\", not \"%s\")",
        node_id, n->stored.incarnation(), incarnation));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Time> NodeRegistry::Heartbeat(absl::string_view node_id,
                                                   absl::string_view incarnation,
                                                   absl::Time now) {
  if (absl::Status st = CheckAlive(node_id, incarnation); !st.ok()) return st;
  NodeRecord* n = Find(node_id);
  n->lease_expiry = now + cadence().lease_timeout;
  n->confirmed = true;
  Reindex(n->stored.node_id(), *n);
  return n->lease_expiry;
}

void NodeRegistry::MarkLost(absl::string_view node_id, absl::string_view reason,
                            absl::Time now) {
  NodeRecord* n = Find(node_id);
  if (n == nullptr || !n->alive()) return;
  n->stored.set_state(v1::NODE_STATE_LOST);
  n->stored.set_lost_reason(std::string(reason));
  *n->stored.mutable_lost_time() = ToProto(now);
  n->reported_running.clear();
  Reindex(n->stored.node_id(), *n);
}

void NodeRegistry::Unindex(const std::string& id, NodeRecord& n) {
  if (n.indexed_lease) leases_.erase({*n.indexed_lease, id});
  if (n.indexed_lost_due) lost_due_.erase({*n.indexed_lost_due, id});
  n.indexed_lease.reset();
  n.indexed_lost_due.reset();
}

void NodeRegistry::Reindex(const std::string& id, NodeRecord& n) {
  Unindex(id, n);
  if (n.alive()) {
    leases_.emplace(n.lease_expiry, id);
    n.indexed_lease = n.lease_expiry;
  } else if (options_.node_expiry != absl::InfiniteDuration()) {
    const absl::Time due = FromProto(n.stored.lost_time()) + options_.node_expiry;
    lost_due_.emplace(due, id);
    n.indexed_lost_due = due;
  }
}

std::vector<std::string> NodeRegistry::Expired(absl::Time now) const {
  std::vector<std::string> out;
  for (const auto& [expiry, id] : leases_) {
    if (expiry > now) break;
    out.push_back(id);
  }
  return out;
}

std::optional<absl::Time> NodeRegistry::NextExpiry() const {
  if (leases_.empty()) return std::nullopt;
  return leases_.begin()->first;
}

std::vector<std::string> NodeRegistry::ExpiredLost(absl::Time now) const {
  std::vector<std::string> out;
  for (const auto& [due, id] : lost_due_) {
    if (due > now) break;
    if (Find(id)->jobs.empty()) out.push_back(id);
  }
  return out;
}

std::optional<absl::Time> NodeRegistry::NextLostExpiry() const {
  // The few lost nodes that still hold a job's slots are passed over.
  for (const auto& [due, id] : lost_due_) {
    if (Find(id)->jobs.empty()) return due;
  }
  return std::nullopt;
}

std::optional<std::string> NodeRegistry::OldestLost() const {
  std::optional<std::string> oldest;
  absl::Time when;
  for (const auto& [id, n] : nodes_) {
    if (n.alive() || !n.jobs.empty()) continue;
    const absl::Time lost = FromProto(n.stored.lost_time());
    if (!oldest || lost < when) {
      oldest = id;
      when = lost;
    }
  }
  return oldest;
}

void NodeRegistry::Remove(absl::string_view node_id) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  Unindex(it->first, it->second);
  nodes_.erase(it);
}

absl::Status NodeRegistry::SetDraining(absl::string_view node_id, bool draining) {
  NodeRecord* n = Find(node_id);
  if (n == nullptr) {
    return absl::NotFoundError(absl::StrFormat("no node \"%s\"", node_id));
  }
  n->stored.set_draining(draining);
  return absl::OkStatus();
}

void NodeRegistry::Restore(const v1::StoredNode& stored, absl::Time now) {
  NodeRecord& n = nodes_[stored.node_id()];
  Unindex(stored.node_id(), n);
  n.stored = stored;
  n.lease_expiry = now + cadence().lease_timeout;
  if (!n.alive() && !n.stored.has_lost_time()) *n.stored.mutable_lost_time() = ToProto(now);
  Reindex(stored.node_id(), n);
}

void NodeRegistry::Reserve(const std::string& node_id, const std::string& job_id,
                           int nproc) {
  NodeRecord* n = Find(node_id);
  if (n == nullptr || !n->jobs.insert(job_id).second) return;
  n->used_slots += nproc;
  n->last_placed = ++placements_;
}

void NodeRegistry::Release(const std::string& node_id, const std::string& job_id,
                           int nproc) {
  NodeRecord* n = Find(node_id);
  if (n == nullptr || n->jobs.erase(job_id) == 0) return;
  n->used_slots -= nproc;
}

NodeRecord* NodeRegistry::Find(absl::string_view node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeRecord* NodeRegistry::Find(absl::string_view node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

}  // namespace elastrun::rendezvous
