#include "launcher/daemon/job_snapshots.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "launcher/agent/snapshot_dir.h"

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
  if (auto it = folders_.find(job); it != folders_.end()) return it->second;
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, FolderName(job), uid, gid);
  if (!dir.ok()) {
    LOG(WARNING) << "job " << job << ": workers run without ELASTRUN_SNAPSHOT (no in-memory "
                 << "snapshots): " << dir.status().message();
    return "";
  }
  LOG(INFO) << "job " << job << ": snapshots in " << *dir;
  folders_[job] = *dir;
  return *dir;
}

void JobSnapshots::Remove(const std::string& job) {
  auto it = folders_.find(job);
  if (it == folders_.end()) return;
  if (absl::Status st = RemoveSnapshotDir(it->second); !st.ok()) {
    LOG(WARNING) << "job " << job << ": " << st.message();
  } else {
    LOG(INFO) << "job " << job << ": removed " << it->second;
  }
  folders_.erase(it);
}

std::vector<std::string> JobSnapshots::Jobs() const {
  std::vector<std::string> jobs;
  for (const auto& [job, path] : folders_) jobs.push_back(job);
  return jobs;
}

absl::StatusOr<std::vector<std::string>> JobSnapshots::RemoveLeftovers() {
  if (base_.empty()) return std::vector<std::string>();
  std::map<std::string, bool> mine;
  for (const auto& [job, path] : folders_) mine[FolderName(job)] = true;
  auto is_leftover = [&](absl::string_view name) {
    return absl::EndsWith(name, node_suffix_) && !mine.count(std::string(name));
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
    absl::StatusOr<std::vector<std::string>> r =
        RemoveLeftoverSnapshotDirs(base_, uid, is_leftover);
    if (r.ok()) {
      removed.insert(removed.end(), r->begin(), r->end());
    } else {
      failed.Update(r.status());
    }
  }
  if (!failed.ok()) return failed;
  return removed;
}

}  // namespace elastrun::launcher
