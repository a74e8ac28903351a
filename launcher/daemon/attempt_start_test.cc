#include "launcher/daemon/attempt_start.h"

#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec Owned(uint32_t uid, uint32_t gid) {
  v1::JobSpec spec;
  spec.mutable_owner()->set_uid(uid);
  spec.mutable_owner()->set_gid(gid);
  return spec;
}

TEST(WorkerUserTest, NoOwnerOrTheDaemonsOwnUserRunsAsTheDaemon) {
  for (const v1::JobSpec& spec : {v1::JobSpec(), Owned(1000, 1000)}) {
    absl::StatusOr<WorkerUser> u = ResolveWorkerUser(spec, "j-1", "n1", 1000, 100);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_FALSE(u->run_as);
    EXPECT_EQ(u->uid, 1000u);
    EXPECT_EQ(u->gid, 100u);
    EXPECT_TRUE(u->env.empty());
  }
  // Root's own job (only root can submit as root) stays root.
  absl::StatusOr<WorkerUser> root = ResolveWorkerUser(Owned(0, 0), "j-1", "n1", 0, 0);
  ASSERT_TRUE(root.ok());
  EXPECT_FALSE(root->run_as);
}

TEST(WorkerUserTest, NonRootDaemonRefusesAnotherUsersJob) {
  absl::StatusOr<WorkerUser> u =
      ResolveWorkerUser(Owned(1001, 1001), "j-7", "n1", 1000, 1000);
  ASSERT_FALSE(u.ok());
  EXPECT_THAT(
      u.status().message(),
      HasSubstr("elastrund on node n1 runs as uid 1000; job j-7 belongs to uid 1001"));
}

TEST(WorkerUserTest, RootDaemonRunsAsTheOwnerWithItsAccount) {
  passwd* pw = getpwuid(65534);
  if (pw == nullptr) GTEST_SKIP() << "needs the user nobody (uid 65534)";
  const std::string home = pw->pw_dir;
  const std::string name = pw->pw_name;
  absl::StatusOr<WorkerUser> u =
      ResolveWorkerUser(Owned(65534, 65534), "j-1", "n1", 0, 0);
  ASSERT_TRUE(u.ok()) << u.status();
  ASSERT_TRUE(u->run_as);
  EXPECT_EQ(u->run_as->uid, 65534u);
  EXPECT_EQ(u->run_as->gid, 65534u);
  EXPECT_THAT(u->run_as->groups, ::testing::Contains(65534u));
  EXPECT_THAT(u->env, ElementsAre("HOME=" + home, "USER=" + name, "LOGNAME=" + name));

  absl::StatusOr<WorkerUser> ghost =
      ResolveWorkerUser(Owned(3999999, 1), "j-2", "n9", 0, 0);
  ASSERT_FALSE(ghost.ok());
  EXPECT_THAT(ghost.status().message(),
              HasSubstr("job j-2 belongs to uid 3999999, which is unknown on node n9"));
}

TEST(WorkerUserTest, EnvironmentLayersReplaceByName) {
  v1::JobSpec spec;
  (*spec.mutable_env())["B"] = "spec";
  (*spec.mutable_env())["HOME"] = "/spec-home";
  WorkerUser user;
  user.env = {"HOME=/home/u"};
  EXPECT_THAT(WorkerBaseEnv({"A=daemon", "B=daemon", "HOME=/root"}, spec, user),
              ElementsAre("A=daemon", "B=spec", "HOME=/home/u"));
  // replace_env: the daemon's environment is not the workers'.
  spec.set_replace_env(true);
  EXPECT_THAT(WorkerBaseEnv({"A=daemon"}, spec, WorkerUser()),
              ElementsAre("B=spec", "HOME=/spec-home"));
}

// A root daemon running another user's job hands that user only the
// documented allow-list of its own environment (PATH, locale, time zone,
// temporary folder, the GPU and library settings a node needs), never the
// rest (a secret of the daemon's, systemd's variables).
TEST(WorkerUserTest, AnotherUsersWorkersGetOnlyTheAllowListOfTheDaemonsEnvironment) {
  v1::JobSpec spec;
  (*spec.mutable_env())["MINE"] = "job";
  WorkerUser other;
  other.run_as = ProcessCredentials{65534, 65534, {}};
  other.uid = other.gid = 65534;
  other.env = {"HOME=/nonexistent"};
  const std::vector<std::string> daemon = {"PATH=/usr/bin:/bin",
                                           "LANG=C.UTF-8",
                                           "LC_ALL=C",
                                           "TZ=UTC",
                                           "TMPDIR=/scratch",
                                           "CUDA_VISIBLE_DEVICES=0,1",
                                           "LD_LIBRARY_PATH=/opt/lib",
                                           "NCCL_SOCKET_IFNAME=eth0",
                                           "DB_PASSWORD=hunter2",
                                           "INVOCATION_ID=abc",
                                           "AWS_SECRET_ACCESS_KEY=x",
                                           "HOME=/root"};
  EXPECT_THAT(WorkerBaseEnv(daemon, spec, other),
              ElementsAre("PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C", "TZ=UTC",
                          "TMPDIR=/scratch", "CUDA_VISIBLE_DEVICES=0,1",
                          "LD_LIBRARY_PATH=/opt/lib", "NCCL_SOCKET_IFNAME=eth0",
                          "MINE=job", "HOME=/nonexistent"));
  // The daemon's own user's workers keep the whole environment.
  EXPECT_EQ(WorkerBaseEnv(daemon, v1::JobSpec(), WorkerUser()), daemon);
}

TEST(WorkerUserTest, AttemptFoldersAreNewAndTheRanksAreTheWorkers) {
  char tmpl[] = "/tmp/worker_user_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string logs = std::string(tmpl) + "/logs";
  const std::string attempt = logs + "/j-1/attempt_0";
  WorkerUser user;
  user.uid = geteuid();
  user.gid = getegid();
  if (geteuid() == 0) {
    user.run_as = ProcessCredentials{65534, 65534, {}};
    user.uid = user.gid = 65534;
  }
  absl::StatusOr<std::string> made =
      MakeAttemptFolders(logs, "j-1", "j-1@c1", 0, 2, user);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(*made, attempt);
  struct stat st;
  ASSERT_EQ(stat((attempt + "/1").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, user.uid);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Never reused: an attempt folder that exists is an error naming it.
  absl::StatusOr<std::string> again =
      MakeAttemptFolders(logs, "j-1", "j-1@c1", 0, 2, user);
  EXPECT_THAT(again.status().message(),
              HasSubstr("folder " + attempt + " exists already"));
  // A later round of the job goes into the same job folder.
  EXPECT_EQ(MakeAttemptFolders(logs, "j-1", "j-1@c1", 1, 1, user).value_or(""),
            logs + "/j-1/attempt_1");
  // j-1 of another cluster (a fresh service numbers from 1 again) is another
  // job: beside, the first one's logs as they were.
  EXPECT_EQ(MakeAttemptFolders(logs, "j-1", "j-1@c2", 0, 1, user).value_or(""),
            logs + "/j-1@c2/attempt_0");
  EXPECT_EQ(MakeAttemptFolders(logs, "j-1", "j-1@c2", 1, 1, user).value_or(""),
            logs + "/j-1@c2/attempt_1");
  EXPECT_EQ(stat((logs + "/j-1/attempt_1/0").c_str(), &st), 0);
  EXPECT_NE(stat((logs + "/j-1/attempt_2").c_str(), &st), 0);
  EXPECT_EQ(std::system(("rm -rf " + std::string(tmpl)).c_str()), 0);
}

TEST(WorkerUserTest, MissingWorkingFolderNamesFolderJobAndNode) {
  EXPECT_TRUE(CheckWorkingDir("", "j-1", "n1").ok());
  EXPECT_TRUE(CheckWorkingDir("/", "j-1", "n1").ok());
  EXPECT_THAT(
      CheckWorkingDir("/nonexistent/p", "j-1", "n1").message(),
      HasSubstr("working folder /nonexistent/p of job j-1 is missing on node n1"));
}

// This node's part of a two-node round: its ranks, torchrun's environment,
// the job's folder, snapshot folder and hang timeout, all from the one
// StartAttempt.
TEST(BuildNodeAttemptTest, TheNodesRanksEnvironmentFolderAndHangTimeout) {
  v1::StartAttempt start;
  start.set_job_id("j-7");
  start.mutable_spec()->add_argv("train");
  start.mutable_spec()->set_working_dir("/");
  start.mutable_spec()->set_run_id("run-xyz");
  start.mutable_spec()->mutable_hang_timeout()->set_seconds(90);
  start.set_max_restarts(3);
  v1::Assignment* a = start.mutable_assignment();
  a->set_round(2);
  a->set_restart_count(1);
  a->set_master_addr("10.0.0.1");
  a->set_master_port(29500);
  a->set_world_size(4);
  a->set_group_world_size(2);
  for (int g = 0; g < 2; ++g) {
    v1::NodeAssignment* n = a->add_nodes();
    n->set_node_id(g == 0 ? "a" : "b");
    n->set_group_rank(g);
    n->set_local_world_size(2);
    n->set_rank_offset(2 * g);
  }
  NodeSettings node;
  node.node_id = "b";
  node.base_env = {"PATH=/usr/bin"};
  node.working_dir = "/tmp";
  const AttemptSpec spec =
      BuildNodeAttempt(start, node, WorkerUser(), "/logs/j-7/attempt_2", "/snap/j-7");
  ASSERT_EQ(spec.workers.size(), 2u);
  EXPECT_EQ(spec.workers[0].rank, 2);
  EXPECT_EQ(spec.workers[1].rank, 3);
  EXPECT_THAT(
      spec.workers[1].process.env,
      ::testing::IsSupersetOf(
          {"PATH=/usr/bin", "RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=4", "GROUP_RANK=1",
           "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "TORCHELASTIC_RESTART_COUNT=1",
           "TORCHELASTIC_RUN_ID=run-xyz", "ELASTRUN_SNAPSHOT=/snap/j-7"}));
  EXPECT_EQ(spec.workers[0].process.cwd, "/") << "the job's folder, not the node's";
  EXPECT_FALSE(spec.workers[0].process.run_as.has_value());
  EXPECT_EQ(spec.hang_timeout, HangTimeout::After(absl::Seconds(90)));
  EXPECT_EQ(spec.job_id, "j-7");
  EXPECT_TRUE(spec.new_log_files);
}

}  // namespace
}  // namespace elastrun::launcher
