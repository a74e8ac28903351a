#include "rendezvous/leadership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace elastrun::rendezvous {
namespace {

// How long one Campaign call waits before it is made again (and stop and
// etcd's state looked at).
constexpr absl::Duration kCampaignSlice = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<Leadership>> Leadership::Campaign(
    LeadershipOptions options, const std::atomic<bool>& stop) {
  const std::string election = options.prefix + "/leader";
  int64_t lease = 0;
  absl::Duration pause = absl::Milliseconds(100);
  while (!stop.load()) {
    absl::Status st;
    if (lease == 0) {
      absl::StatusOr<int64_t> granted = options.client->Grant(options.lease);
      if (granted.ok()) lease = *granted;
      st = granted.status();
    }
    if (st.ok()) {
      // Keep the lease alive while waiting (a Campaign slice is shorter
      // than any lease etcd grants, but the wait may be long).
      absl::StatusOr<absl::Duration> left = options.client->KeepAlive(lease);
      if (left.ok() && *left <= absl::ZeroDuration()) {
        lease = 0;  // expired meanwhile (etcd was away): a new one
        continue;
      }
      st = left.status();
    }
    if (st.ok()) {
      absl::StatusOr<v3electionpb::LeaderKey> key =
          options.client->Campaign(election, lease, options.value, kCampaignSlice);
      if (key.ok()) {
        std::unique_ptr<Leadership> l(new Leadership(std::move(options), lease, *key));
        return l;
      }
      st = key.status();
      if (absl::IsDeadlineExceeded(st)) {
        // Someone else leads; say who now and then.
        absl::StatusOr<std::string> leader = options.client->Leader(election);
        if (options.on_waiting) {
          options.on_waiting(absl::OkStatus(), leader.ok() ? *leader : std::string());
        }
        pause = absl::Milliseconds(100);
        continue;
      }
    }
    if (options.on_waiting) options.on_waiting(st, "");
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Seconds(1));
  }
  if (lease != 0) options.client->Revoke(lease).IgnoreError();
  return absl::CancelledError("stopped before leading");
}

Leadership::Leadership(LeadershipOptions options, int64_t lease,
                       v3electionpb::LeaderKey key)
    : options_(std::move(options)), lease_(lease), key_(std::move(key)) {
  renewer_ = std::thread([this] { RenewLoop(); });
}

Leadership::~Leadership() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  renewer_.join();
  if (!lost_.load()) {
    // Hand over at once: deleting the key lets the next candidate lead.
    options_.client->Resign(key_).IgnoreError();
    options_.client->Revoke(lease_).IgnoreError();
  }
}

EtcdPlace Leadership::Place() const {
  EtcdPlace place;
  place.client = options_.client;
  place.prefix = options_.prefix;
  place.fence.key = key_.key();
  place.fence.revision = key_.rev();
  Leadership* self = const_cast<Leadership*>(this);
  place.fence.on_refused = [self](const std::string& why) { self->Lose(why); };
  return place;
}

void Leadership::Lose(const std::string& why) {
  if (lost_.exchange(true)) return;
  if (options_.on_lost) options_.on_lost(why);
}

void Leadership::RenewLoop() {
  // Renew four times a lease; lost once a whole lease went by without a
  // renewal (the lease may have expired at etcd: another replica may lead).
  const absl::Duration every = options_.lease / 4;
  absl::Time renewed = absl::Now();
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), every);
    if (stopping_) break;
    mu_.Unlock();
    // A renewal may take longer than the lease: while etcd elects a leader
    // of its own (a second or more on a loaded machine) the renewal waits,
    // and etcd's new leader extends every lease. Writes stay fenced meanwhile.
    absl::StatusOr<absl::Duration> left = options_.client->KeepAlive(lease_);
    const absl::Time now = absl::Now();
    mu_.Lock();
    if (left.ok() && *left > absl::ZeroDuration()) {
      renewed = now;
      continue;
    }
    if (left.ok()) {
      mu_.Unlock();
      Lose(absl::StrCat(options_.client->name(), ": the leader's lease ", lease_,
                        " expired (this replica was paused or cut off from etcd)"));
      mu_.Lock();
      break;
    }
    if (now - renewed >= options_.lease) {
      mu_.Unlock();
      Lose(absl::StrCat("the leader's lease could not be renewed for ",
                        absl::FormatDuration(now - renewed), ": ",
                        left.status().message()));
      mu_.Lock();
      break;
    }
    LOG(WARNING) << "renewing the leader's lease: " << left.status() << " (lost after "
                 << absl::FormatDuration(options_.lease) << " without a renewal)";
  }
}

}  // namespace elastrun::rendezvous
