#include "launcher/daemon/attempt_start.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "launcher/agent/attempt.h"
#include "launcher/agent/output.h"
#include "launcher/protocol/context.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {
namespace {

// The user `uid`'s account on this node; NotFound when it has none.
absl::StatusOr<passwd> LookUpUid(uid_t uid, std::vector<char>* buffer) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  buffer->resize(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc;
  while ((rc = getpwuid_r(uid, &pw, buffer->data(), buffer->size(), &found)) == ERANGE) {
    buffer->resize(buffer->size() * 2);
  }
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot look up uid ", uid, ": ", strerror(rc)));
  }
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("uid ", uid));
  return pw;
}

// The supplementary groups of `user` (with `gid`), as initgroups would set.
std::vector<gid_t> GroupsOf(const char* user, gid_t gid) {
  int n = 32;
  std::vector<gid_t> groups(n);
  while (getgrouplist(user, gid, groups.data(), &n) < 0) groups.resize(n);
  groups.resize(n);
  return groups;
}

}  // namespace

absl::StatusOr<WorkerUser> ResolveWorkerUser(const v1::JobSpec& spec,
                                             const std::string& job_id,
                                             const std::string& node_id, uid_t self_uid,
                                             gid_t self_gid) {
  WorkerUser self;
  self.uid = self_uid;
  self.gid = self_gid;
  if (!spec.has_owner() || spec.owner().uid() == self_uid) return self;
  const v1::JobOwner& owner = spec.owner();
  if (self_uid != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("elastrund on node ", node_id, " runs as uid ", self_uid, "; job ",
                     job_id, " belongs to uid ", owner.uid(),
                     " (only a root elastrund runs other users' jobs)"));
  }
  std::vector<char> buffer;
  absl::StatusOr<passwd> pw = LookUpUid(owner.uid(), &buffer);
  if (absl::IsNotFound(pw.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " belongs to uid ", owner.uid(),
        owner.user().empty() ? "" : absl::StrCat(" (", owner.user(), ")"),
        ", which is unknown on node ", node_id, "; its workers cannot start there"));
  }
  if (!pw.ok()) return pw.status();
  WorkerUser user;
  user.uid = owner.uid();
  user.gid = owner.gid();
  user.run_as = ProcessCredentials{user.uid, user.gid, GroupsOf(pw->pw_name, user.gid)};
  user.env = {absl::StrCat("HOME=", pw->pw_dir), absl::StrCat("USER=", pw->pw_name),
              absl::StrCat("LOGNAME=", pw->pw_name)};
  return user;
}

bool IsPassedToOtherUsers(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "PATH",       "LANG",        "TZ",       "TMPDIR",     "LD_LIBRARY_PATH",
      "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
      "no_proxy"};
  static constexpr std::string_view kPrefixes[] = {
      "LC_", "CUDA_", "NVIDIA_", "NCCL_", "GLOO_", "OMP_", "MKL_", "OPENBLAS_"};
  for (std::string_view n : kNames) {
    if (name == n) return true;
  }
  for (std::string_view p : kPrefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

std::vector<std::string> WorkerBaseEnv(const std::vector<std::string>& base_env,
                                       const v1::JobSpec& spec, const WorkerUser& user) {
  std::vector<std::string> env;
  std::map<std::string, size_t> index;  // name -> position in env
  auto set = [&](const std::string& entry) {
    const std::string name = entry.substr(0, entry.find('='));
    auto [it, added] = index.emplace(name, env.size());
    if (added) {
      env.push_back(entry);
    } else {
      env[it->second] = entry;
    }
  };
  if (!spec.replace_env()) {
    for (const std::string& e : base_env) {
      if (!user.run_as ||
          IsPassedToOtherUsers(std::string_view(e).substr(0, e.find('=')))) {
        set(e);
      }
    }
  }
  // Sorted by name (the map's order): the same environment gives the same
  // list, so a standby set started for it matches the next attempt.
  std::map<std::string, std::string> sorted(spec.env().begin(), spec.env().end());
  for (const auto& [name, value] : sorted) set(absl::StrCat(name, "=", value));
  for (const std::string& e : user.env) set(e);
  return env;
}

namespace {

constexpr char kJobMarker[] = ".job";

// The job whose folder `job_dir` is: its .job file's text ("" when there is
// none, as in folders made before it was written).
std::string JobOfFolder(const std::string& job_dir) {
  const int fd =
      open((job_dir + "/" + kJobMarker).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// Makes (or keeps) the private folder `job_dir` of job `job_key`; false in
// *ours when it exists and is another job's.
absl::Status MakeJobFolder(const std::string& job_dir, const std::string& job_key,
                           mode_t mode, bool* ours) {
  struct stat st;
  const bool existed = lstat(job_dir.c_str(), &st) == 0;
  if (existed && !job_key.empty() && JobOfFolder(job_dir) != job_key) {
    *ours = false;
    return absl::OkStatus();
  }
  *ours = true;
  if (absl::Status made = MakePrivateDir(job_dir, mode, /*must_be_new=*/false);
      !made.ok()) {
    return made;
  }
  if (existed || job_key.empty()) return absl::OkStatus();
  absl::StatusOr<int> fd = CreateNewFile(job_dir + "/" + kJobMarker, 0644);
  if (!fd.ok()) return fd.status();
  const bool written = WriteAll(*fd, job_key);
  close(*fd);
  if (!written) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", job_dir, "/", kJobMarker, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> MakeAttemptFolders(const std::string& log_dir,
                                               const std::string& job_id,
                                               const std::string& job_key, int64_t round,
                                               int nproc, const WorkerUser& user) {
  const mode_t mode = geteuid() == 0 ? 0711 : 0700;
  if (absl::Status st = MakeDirs(log_dir); !st.ok()) return st;
  std::string job_dir = absl::StrCat(log_dir, "/", job_id);
  bool ours = false;
  if (absl::Status st = MakeJobFolder(job_dir, job_key, mode, &ours); !st.ok()) return st;
  if (!ours) {
    // Another job of the same id (another cluster's, or a fresh service's
    // whose ids began at 1 again): its logs stay; this job's go beside.
    job_dir = absl::StrCat(log_dir, "/", job_key);
    if (absl::Status st = MakeJobFolder(job_dir, job_key, mode, &ours); !st.ok())
      return st;
    if (!ours) {
      return absl::FailedPreconditionError(absl::StrCat("folder ", job_dir,
                                                        " belongs to another job (its ",
                                                        kJobMarker, " says otherwise)"));
    }
  }
  const std::string attempt_dir = absl::StrCat(job_dir, "/attempt_", round);
  if (absl::Status st = MakePrivateDir(attempt_dir, mode, /*must_be_new=*/true);
      !st.ok()) {
    return st;
  }
  for (int local = 0; local < nproc; ++local) {
    const std::string dir = absl::StrCat(attempt_dir, "/", local);
    if (absl::Status st = MakePrivateDir(dir, 0700, /*must_be_new=*/true); !st.ok())
      return st;
    // Made just now in a folder only the daemon writes to: no link there.
    if (user.run_as && lchown(dir.c_str(), user.uid, user.gid) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot give folder ", dir, " to uid ", user.uid, ": ", strerror(errno)));
    }
  }
  return attempt_dir;
}

absl::Status CheckWorkingDir(const std::string& dir, const std::string& job_id,
                             const std::string& node_id) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("working folder ", dir, " of job ",
                                                      job_id, " is missing on node ",
                                                      node_id, ": ", strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("working folder ", dir, " of job ",
                                                      job_id, " is not a folder on node ",
                                                      node_id));
  }
  return absl::OkStatus();
}

std::string WorkingDirOf(const v1::StartAttempt& start, const NodeSettings& node) {
  return start.spec().working_dir().empty() ? node.working_dir
                                            : start.spec().working_dir();
}

absl::StatusOr<std::string> PrepareAttemptFolders(const v1::StartAttempt& start,
                                                  const NodeSettings& node,
                                                  const std::string& job_key,
                                                  const WorkerUser& user) {
  if (absl::Status st =
          CheckWorkingDir(WorkingDirOf(start, node), start.job_id(), node.node_id);
      !st.ok()) {
    return st;
  }
  int nproc = 0;
  for (const v1::NodeAssignment& n : start.assignment().nodes()) {
    if (n.node_id() == node.node_id) nproc = n.local_world_size();
  }
  return MakeAttemptFolders(node.log_dir, start.job_id(), job_key,
                            start.assignment().round(), nproc, user);
}

AttemptSpec BuildNodeAttempt(const v1::StartAttempt& start, const NodeSettings& node,
                             const WorkerUser& user, const std::string& attempt_dir,
                             const std::string& snapshot_dir) {
  const rendezvous::RoundAssignment round = rendezvous::FromProto(start.assignment());
  const rendezvous::NodeAssignment& me = *round.Find(node.node_id);
  GroupSpec group;
  group.argv.assign(start.spec().argv().begin(), start.spec().argv().end());
  group.nproc_per_node = me.local_world_size;
  group.max_restarts = start.max_restarts();
  group.agent_socket = node.agent_socket;
  // rendezvous/job_spec.cc checked it.
  group.hang_timeout =
      HangTimeout::FromWire(rendezvous::FromProto(start.spec().hang_timeout()));
  group.python_path = FindPythonHelperDir();
  group.snapshot_dir = snapshot_dir;
  // The job's run id (the service sets one unique to the job; an older
  // service none: the job id).
  const std::string& run_id =
      start.spec().run_id().empty() ? start.job_id() : start.spec().run_id();
  const AttemptContext ctx = ContextFor(run_id, round, me, attempt_dir);
  AttemptSpec spec =
      BuildAttempt(group, ctx, WorkerBaseEnv(node.base_env, start.spec(), user));
  const std::string cwd = WorkingDirOf(start, node);
  for (WorkerSpec& w : spec.workers) {
    w.process.cwd = cwd;
    w.process.run_as = user.run_as;
  }
  spec.standby_cwd = cwd;
  spec.standby_run_as = user.run_as;
  spec.job_id = start.job_id();
  spec.new_log_files = true;  // in folders made just now: nothing may be there
  return spec;
}

}  // namespace elastrun::launcher
