// elastrund's snapshot folders (launcher/agent/snapshot_dir.h): one per job
// this node runs, <base>/elastrun-<uid>/<job>@<node>/, kept across the job's
// rounds here so that a restarted worker finds what the failed one left,
// removed when the job ends or leaves the node. The node id in the name
// keeps daemons that share a host (and `elastrun run`, whose folders have
// no '@') out of each other's folders. Each folder is held
// (HeldSnapshotDir) while the daemon has it, so that no cleaner takes it
// for a dead run's; when the daemon dies its folders are free to remove.
//
// Not thread-safe: the Daemon calls it under its mutex.
#ifndef ELASTRUN_LAUNCHER_DAEMON_JOB_SNAPSHOTS_H_
#define ELASTRUN_LAUNCHER_DAEMON_JOB_SNAPSHOTS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/agent/snapshot_dir.h"

namespace elastrun::launcher {

class JobSnapshots {
 public:
  // `base`: where snapshot folders go (SnapshotBase()); empty: none, and
  // every method does nothing.
  JobSnapshots(std::string base, std::string node_id);

  // The folder name of `job` on this node: "<job>@<node>", each part
  // sanitized (SnapshotFolderName).
  std::string FolderName(const std::string& job) const;

  // The folder of `job`, created and held at the first call; empty (after a
  // warning in the log saying why) when it cannot be had: the job's workers
  // then run without ELASTRUN_SNAPSHOT, and the next call tries again.
  std::string FolderFor(const std::string& job);
  // The same for a job whose workers run as uid:gid (a root daemon running
  // another user's job): <base>/elastrun-<uid>/<job>@<node>, theirs.
  std::string FolderFor(const std::string& job, uid_t uid, gid_t gid);

  // Removes the folder of `job`, if it has one (a failure is logged).
  void Remove(const std::string& job);

  // The jobs that have a folder now.
  std::vector<std::string> Jobs() const;

  // For a daemon starting up: removes every folder of this node (name
  // ending "@<node>") that nobody holds: the leftovers of an earlier daemon
  // of this node that died without cleaning up (RemoveLeftoverSnapshotDirs:
  // trash folders go too). Only real folders owned by this user; for a root
  // daemon, also those of every user it may have run jobs for (each under
  // its own elastrun-<uid>). Returns the paths removed; an error names the
  // path (the other users' folders are still tried).
  absl::StatusOr<std::vector<std::string>> RemoveLeftovers();

 private:
  const std::string base_;
  const std::string node_suffix_;  // "@<node>"
  std::map<std::string, std::unique_ptr<HeldSnapshotDir>> folders_;  // by job
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_JOB_SNAPSHOTS_H_
