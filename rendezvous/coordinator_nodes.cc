// Coordinator: the operator's view of nodes — paged listing, drain,
// remove — and the expiry of nodes lost for good (see coordinator.h).
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/paging.h"

namespace elastrun::rendezvous {
namespace {

// How many ids a log line about expired nodes names; the rest are counted.
constexpr size_t kIdsLogged = 5;

absl::Status UnknownNode(absl::string_view node_id) {
  return absl::NotFoundError(absl::StrFormat("no node \"%s\"", node_id));
}

}  // namespace

v1::NodeInfo Coordinator::NodeInfoOf(const NodeRecord& n) const {
  const std::string& id = n.stored.node_id();
  v1::NodeInfo info;
  info.set_node_id(id);
  info.set_addr(n.stored.addr());
  info.set_slots(n.stored.slots());
  info.set_free_slots(n.alive() ? std::max(0, n.free_slots()) : 0);
  *info.mutable_labels() = n.stored.labels();
  info.set_pool(n.stored.pool());
  info.set_state(n.stored.state());
  info.set_watching(streams_.watching(id));
  *info.mutable_registered_time() = n.stored.registered_time();
  if (n.alive()) *info.mutable_lease_expiry() = ToProto(n.lease_expiry);
  for (const std::string& job : n.jobs) info.add_jobs(job);
  info.set_lost_reason(n.stored.lost_reason());
  info.set_draining(n.draining());
  return info;
}

absl::StatusOr<v1::ListNodesResponse> Coordinator::ListNodes(
    const v1::ListNodesRequest& r) {
  ASSIGN_OR_RETURN(const int size, PageSize(r.page_size(), "ListNodesRequest.page_size"));
  absl::MutexLock lock(&mu_);
  v1::ListNodesResponse resp;
  PageBudget page(size);
  const auto& nodes = registry_.nodes();
  // The token is the last id of the previous page: nodes registered since
  // sort into place, none is listed twice.
  auto it = r.page_token().empty() ? nodes.begin() : nodes.upper_bound(r.page_token());
  for (; it != nodes.end(); ++it) {
    v1::NodeInfo info = NodeInfoOf(it->second);
    if (!page.Take(info.ByteSizeLong())) {
      resp.set_next_page_token(resp.nodes(resp.nodes_size() - 1).node_id());
      break;
    }
    *resp.add_nodes() = std::move(info);
  }
  return resp;
}

absl::StatusOr<v1::NodeInfo> Coordinator::DrainNode(const v1::NodeRequest& r) {
  Outbox out;
  v1::NodeInfo info;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the service is shutting down");
    const NodeRecord* n = registry_.Find(r.node_id());
    if (n == nullptr) return UnknownNode(r.node_id());
    const bool was = n->draining();
    RETURN_IF_ERROR(registry_.SetDraining(r.node_id(), !r.undo()));
    node_writes_.SaveNow(out, r.node_id());
    if (!out.store_status.ok()) {
      // Not done unless durable: a restart would silently undo it.
      registry_.SetDraining(r.node_id(), was).IgnoreError();
      return out.store_status;
    }
    LOG(INFO) << "node " << r.node_id() << (r.undo() ? " undrained" : " draining");
    // Its free slots are open again to queued jobs.
    if (r.undo()) rounds_.Schedule(out);
    info = NodeInfoOf(*registry_.Find(r.node_id()));
  }
  Flush(out);
  RETURN_IF_ERROR(out.store_status);
  return info;
}

absl::StatusOr<v1::NodeInfo> Coordinator::RemoveNode(const v1::NodeRequest& r) {
  Outbox out;
  v1::NodeInfo info;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the service is shutting down");
    const NodeRecord* n = registry_.Find(r.node_id());
    if (n == nullptr) return UnknownNode(r.node_id());
    if (!n->jobs.empty() && !r.force()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "node \"%s\" holds slots of job(s) %s; wait for them to end or cancel them, "
          "or remove it with --force (it is then lost for those jobs)",
          r.node_id(), absl::StrJoin(n->jobs, ", ")));
    }
    info = NodeInfoOf(*n);
    const std::string id = r.node_id();
    // Its daemon, if it still runs, hears that the node is unknown (here
    // or at its next heartbeat) and registers again as a fresh node; its
    // attempts are then stopped as stale. Closed first, so that this is
    // what it hears rather than a node loss.
    streams_.Close(out, id,
                   absl::NotFoundError(absl::StrFormat(
                       "node \"%s\" was removed by the operator; register again", id)));
    if (!n->jobs.empty()) {
      LOG(WARNING) << "node " << id << " removed with --force while it holds job(s) "
                   << absl::StrJoin(n->jobs, ", ");
      if (n->alive()) {
        NodeLost(out, id, "removed by the operator (--force)");
      } else {
        rounds_.NodeLost(out, id);
      }
    }
    ForgetNodes(out, {id});
    LOG(INFO) << "node " << id << " removed";
  }
  Flush(out);
  RETURN_IF_ERROR(out.store_status);
  return info;
}

void Coordinator::ForgetNodes(Outbox& out, const std::vector<std::string>& node_ids) {
  for (const std::string& id : node_ids) registry_.Remove(id);
  node_writes_.Delete(out, node_ids);
}

absl::Status Coordinator::MakeRoomFor(Outbox& out, const std::string& node_id) {
  if (registry_.Find(node_id) != nullptr ||
      static_cast<int>(registry_.nodes().size()) < options_.max_nodes) {
    return absl::OkStatus();
  }
  std::optional<std::string> oldest = registry_.OldestLost();
  if (!oldest) {
    LOG(WARNING) << "node " << node_id << " refused: " << options_.max_nodes
                 << " nodes registered, none lost";
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the service already holds %d nodes (its --max-nodes), all alive; remove some "
        "with `elastrun nodes remove` or raise --max-nodes",
        options_.max_nodes));
  }
  LOG(WARNING) << options_.max_nodes << " nodes registered: forgetting node " << *oldest
               << ", lost longest, to make room for " << node_id;
  ForgetNodes(out, {*oldest});
  return absl::OkStatus();
}

void Coordinator::ExpireLostNodes(Outbox& out, absl::Time now) {
  const std::vector<std::string> due = registry_.ExpiredLost(now);
  if (due.empty()) return;
  const std::vector<std::string> named(due.begin(),
                                       due.begin() + std::min(due.size(), kIdsLogged));
  LOG(INFO) << "forgetting " << due.size() << " node(s) lost for "
            << absl::FormatDuration(options_.lease.node_expiry) << " or more: "
            << absl::StrJoin(named, ", ") << (due.size() > named.size() ? ", ..." : "");
  ForgetNodes(out, due);
}

}  // namespace elastrun::rendezvous
