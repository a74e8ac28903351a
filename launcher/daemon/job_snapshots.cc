#include "launcher/daemon/job_snapshots.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace elastrun::launcher {

JobSnapshots::JobSnapshots(std::string base, std::string node_id)
    : base_(std::move(base)), node_suffix_(absl::StrCat("@", SnapshotFolderName(node_id))) {}

std::string JobSnapshots::FolderName(const std::string& job) const {
  return absl::StrCat(SnapshotFolderName(job), node_suffix_);
}

std::string JobSnapshots::FolderFor(const std::string& job) {
  return FolderFor(job, geteuid(), getegid());
}

std::string JobSnapshots::FolderFor(const std::string& job, uid_t uid, gid_t gid) {
  if (base_.empty()) return "";
  if (auto it = folders_.find(job); it != folders_.end()) return it->second->path();
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> dir =
      HeldSnapshotDir::Create(base_, FolderName(job), uid, gid);
  if (!dir.ok()) {
    LOG(WARNING) << "job " << job << ": workers run without ELASTRUN_SNAPSHOT (no in-memory "
                 << "snapshots): " << dir.status().message();
    return "";
  }
  const std::string path = (*dir)->path();
  LOG(INFO) << "job " << job << ": snapshots in " << path;
  folders_[job] = *std::move(dir);
  return path;
}

void JobSnapshots::Remove(const std::string& job) {
  auto it = folders_.find(job);
  if (it == folders_.end()) return;
  if (absl::Status st = it->second->Remove(); !st.ok()) {
    LOG(WARNING) << "job " << job << ": " << st.message();
  } else {
    LOG(INFO) << "job " << job << ": removed " << it->second->path();
  }
  folders_.erase(it);
}

std::vector<std::string> JobSnapshots::Jobs() const {
  std::vector<std::string> jobs;
  for (const auto& [job, dir] : folders_) jobs.push_back(job);
  return jobs;
}

absl::StatusOr<std::vector<std::string>> JobSnapshots::RemoveLeftovers() {
  if (base_.empty()) return std::vector<std::string>();
  // This daemon's own folders are held, so they are never taken.
  auto is_leftover = [&](absl::string_view name) {
    return absl::EndsWith(name, node_suffix_);
  };
  std::vector<uid_t> users = {geteuid()};
  if (geteuid() == 0) {
    for (uid_t uid : SnapshotUsers(base_)) {
      if (uid != 0) users.push_back(uid);
    }
  }
  std::vector<std::string> removed;
  absl::Status failed;
  for (uid_t uid : users) {
    absl::StatusOr<std::vector<RemovedSnapshotDir>> r =
        RemoveLeftoverSnapshotDirs(base_, uid, is_leftover);
    if (r.ok()) {
      for (const RemovedSnapshotDir& dir : *r) removed.push_back(dir.path);
    } else {
      failed.Update(r.status());
    }
  }
  if (!failed.ok()) return failed;
  return removed;
}

}  // namespace elastrun::launcher
