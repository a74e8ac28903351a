#include "rendezvous/replica.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/etcd_store.h"
#include "rendezvous/follower_proxy.h"

namespace elastrun::rendezvous {
namespace {

absl::StatusOr<std::string> ReadPassword(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::PermissionDeniedError(
        absl::StrCat("--etcd-password-file ", path, ": cannot be read"));
  }
  return std::string(absl::StripTrailingAsciiWhitespace(line));
}

// Stops serving at once: the process becomes a fresh follower, or, when it
// was told to stop meanwhile, ends.
[[noreturn]] void StepDown(char** argv, const std::string& why, bool stopping) {
  if (stopping) {
    LOG(ERROR) << "lost the leadership while stopping: " << why << "; exiting";
    google::FlushLogFiles(google::GLOG_INFO);
    _exit(0);
  }
  LOG(ERROR) << "lost the leadership: " << why
             << "; stepping down (restarting as a follower)";
  google::FlushLogFiles(google::GLOG_INFO);
  execv("/proc/self/exe", argv);
  PLOG(ERROR) << "re-executing " << argv[0];
  _exit(75);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Replica>> Replica::Lead(const ServiceFlags& flags,
                                                       char** argv,
                                                       const std::atomic<bool>& stop) {
  EtcdOptions eo;
  eo.endpoints = flags.etcd_endpoints;
  eo.tls = flags.etcd_tls;
  eo.user = flags.etcd_user;
  if (!flags.etcd_password_file.empty()) {
    ASSIGN_OR_RETURN(eo.password, ReadPassword(flags.etcd_password_file));
  }
  std::unique_ptr<Replica> r(new Replica());
  ASSIGN_OR_RETURN(r->client_, EtcdClient::Create(std::move(eo)));

  LeadershipOptions lo;
  lo.client = r->client_.get();
  lo.prefix = flags.etcd_prefix;
  lo.value = flags.advertise.empty() ? flags.listen : flags.advertise;
  lo.lease = flags.leader_lease;
  lo.on_lost = [argv, &stop](const std::string& why) {
    StepDown(argv, why, stop.load());
  };
  // With --follower-proxy, while another replica leads, this one's port
  // passes every call on to it, so that clients (or a load balancer) may
  // reach any replica.
  FollowerProxyOptions po;
  po.listen = flags.listen;
  po.tls = flags.tls;
  const std::string self = lo.value;
  EtcdClient* client = r->client_.get();
  const std::string election = lo.prefix + "/leader";
  // Never to itself: the election may still name this replica's previous
  // run (stepped down, its lease not yet expired).
  auto other = [self](const std::string& leader) {
    return leader == self ? std::string() : leader;
  };
  po.find_leader = [client, election, other]() -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::string leader, client->Leader(election));
    return other(leader);
  };
  std::unique_ptr<FollowerProxy> proxy;
  if (flags.follower_proxy) {
    ASSIGN_OR_RETURN(proxy, FollowerProxy::Start(po));
    // Known from the start, not only after the first campaign slice.
    if (absl::StatusOr<std::string> leader = po.find_leader(); leader.ok()) {
      proxy->SetLeader(*leader);
    }
    LOG(INFO) << "following on " << proxy->address()
              << ": calls pass to the leader until this replica leads";
  }
  std::string said;  // the last thing said while waiting: said again only when it changes
  lo.on_waiting = [&said, &proxy, other](const absl::Status& etcd,
                                         const std::string& leader) {
    // etcd away, or the election not read: the leader known last may still
    // serve (a call it fails makes the proxy ask again).
    if (proxy != nullptr && etcd.ok() && !other(leader).empty()) {
      proxy->SetLeader(other(leader));
    }
    const std::string now =
        etcd.ok()
            ? (leader.empty() ? "waiting to lead" : "following the leader at " + leader)
            : absl::StrCat("not serving: ", etcd.message(),
                           " (running workers go on; serving resumes when etcd is back)");
    if (now == said) return;
    said = now;
    if (etcd.ok()) {
      LOG(INFO) << now;
    } else {
      LOG(ERROR) << now;
    }
  };
  LOG(INFO) << "replica " << lo.value << " over " << r->client_->name() << " (prefix "
            << lo.prefix << "): campaigning";
  absl::StatusOr<std::unique_ptr<Leadership>> led =
      Leadership::Campaign(std::move(lo), stop);
  // The port is the service's from now on; calls passed on end UNAVAILABLE
  // and come again, to this replica.
  proxy.reset();
  if (!led.ok()) return led.status();
  r->leadership_ = *std::move(led);
  LOG(INFO) << "leading (key " << r->leadership_->key().key() << ")";
  return r;
}

void Replica::Configure(ServerOptions& options) const {
  const EtcdPlace place = leadership_->Place();
  options.coordinator.open_store = [place]() -> absl::StatusOr<std::unique_ptr<Store>> {
    ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Open(place));
    return store;
  };
  options.open_logs = [place]() -> absl::StatusOr<std::unique_ptr<LogDb>> {
    return std::make_unique<EtcdLogDb>(place);
  };
}

Replica::~Replica() = default;

}  // namespace elastrun::rendezvous
