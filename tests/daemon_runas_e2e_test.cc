// End to end: the real elastrun-rendezvous, a real elastrund and shell
// workers (no torch). The daemon's state folder (refused when another user
// made it or it is a link, nobody's plants in a sticky folder included, as
// the service's is; a link planted where a log goes is never followed),
// workers run as the job's owner (a root daemon), and `elastrun submit`
// sending its working folder and environment. Snapshots go to the test's
// own temporary folder, never the real /dev/shm.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::ClusterTest;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;
using testing::BinDir;
using testing::FileExists;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

// The root-only cases need the unprivileged user the hostile cases use.
bool HaveNobody() {
  passwd* pw = getpwuid(kNobody);
  return geteuid() == 0 && pw != nullptr;
}

class DaemonRunAsE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    MakeCluster("daemon_runas_e2e");
    // Workers of another user pass through the test's folder to theirs.
    ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
    base_ = Subfolder("base");
    state_ = dir_ + "/daemon-state";  // dir_/state is the service's
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
  }

  // Starts elastrund "n1" with --state-dir `state_` (logs inside).
  void StartDaemon() {
    daemon_ = cluster_->StartOwnDaemon(
        {BinDir() + "/elastrund", "--rendezvous", cluster_->address(), "--node-id", "n1",
         "--slots", "2", "--state-dir", state_, "--shutdown-timeout", "10s",
         "--token-file", cluster_->token_file(), "--cred-socket", "none"},
        {"ELASTRUN_SNAPSHOT_BASE=" + base_});
    ASSERT_NE(daemon_, nullptr);
  }
  void StartDaemonAndWait() {
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }))
        << daemon_->Output();
  }
  // Expects the daemon to exit 1 before it registers; returns its output.
  std::string DaemonRefuses() {
    absl::StatusOr<int> code = daemon_->Wait(kDeadline);
    EXPECT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(daemon_->exit_code(), 1) << daemon_->Output();
    return daemon_->Output();
  }

  // A one-worker job running `sh -c script`.
  v1::JobSpec ShellJob(const std::string& name, const std::string& script) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.set_min_nodes(1);
    spec.set_max_nodes(1);
    spec.set_nproc_per_node(1);
    for (const char* a : {"/bin/sh", "-c"}) spec.add_argv(a);
    spec.add_argv(script);
    return spec;
  }

  // `spec` as submitted by the user nobody.
  static void OwnedByNobody(v1::JobSpec& spec) {
    spec.mutable_owner()->set_uid(kNobody);
    spec.mutable_owner()->set_gid(getpwuid(kNobody)->pw_gid);
    spec.mutable_owner()->set_user("nobody");
  }

  std::string Stdout(const std::string& job) {
    return testing::ReadFile(
        absl::StrCat(state_, "/logs/", job, "/attempt_0/0/stdout.log"));
  }

  std::string base_, state_;
  testing::Subprocess* daemon_ = nullptr;  // the cluster's
};

TEST_F(DaemonRunAsE2eTest, StateFolderOfAnotherUserIsRefused) {
  if (!HaveNobody()) GTEST_SKIP() << "needs root and the user nobody (uid 65534)";
  ASSERT_EQ(mkdir(state_.c_str(), 0700), 0);
  ASSERT_EQ(chown(state_.c_str(), kNobody, kNobody), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string out = DaemonRefuses();
  EXPECT_THAT(out, HasSubstr("--state-dir: folder " + state_ + " belongs to uid 65534"));
  EXPECT_FALSE(FileExists(state_ + "/logs"));
}

TEST_F(DaemonRunAsE2eTest, StateFolderThatIsALinkIsNotFollowed) {
  const std::string target = dir_ + "/elsewhere";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), state_.c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  EXPECT_THAT(DaemonRefuses(), HasSubstr("folder " + state_ + " is a symlink"));
  EXPECT_FALSE(FileExists(target + "/logs"));
  EXPECT_FALSE(FileExists(target + "/agent.sock"));
}

TEST_F(DaemonRunAsE2eTest, GroupWritableStateFolderIsRefused) {
  ASSERT_EQ(mkdir(state_.c_str(), 0700), 0);
  ASSERT_EQ(chmod(state_.c_str(), 0770), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  EXPECT_THAT(DaemonRefuses(), HasSubstr("has mode 0770: others may write to it"));
}

TEST_F(DaemonRunAsE2eTest, StateFoldersPlantedByNobodyAreRefused) {
  if (!HaveNobody() || !FileExists("/usr/sbin/runuser")) {
    GTEST_SKIP() << "needs root, runuser and the user nobody (uid 65534)";
  }
  // A sticky folder anyone may write to, as /tmp is: nobody plants there
  // the state folders a root daemon and a root service are then told to
  // use: a folder of nobody's, and nobody's link to a folder of root's.
  const std::string tmp = dir_ + "/tmp", victim = dir_ + "/victim";
  ASSERT_EQ(mkdir(tmp.c_str(), 0700), 0);
  ASSERT_EQ(chmod(tmp.c_str(), 01777), 0);
  ASSERT_EQ(mkdir(victim.c_str(), 0700), 0);
  const std::string planted = tmp + "/planted", link = tmp + "/link";
  for (const std::vector<std::string>& plant :
       {std::vector<std::string>{"mkdir", planted}, {"ln", "-s", victim, link}}) {
    std::vector<std::string> argv = {"/usr/sbin/runuser", "-u", "nobody", "--"};
    argv.insert(argv.end(), plant.begin(), plant.end());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, {marker_}, kDeadline);
    ASSERT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
  }
  const std::pair<std::string, std::string> cases[] = {
      {planted, "belongs to uid 65534, not to this process (uid 0)"},
      {link, "is a symlink; refusing to follow it (remove it)"}};
  for (const auto& [folder, why] : cases) {
    state_ = folder;
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
    EXPECT_THAT(DaemonRefuses(), HasSubstr("--state-dir: folder " + folder + " " + why));
    // The service's token file in it too, as the systemd unit has it: not
    // made there either.
    absl::StatusOr<testing::RunResult> service =
        testing::Run({BinDir() + "/elastrun-rendezvous", "--listen", "127.0.0.1:0",
                      "--state-dir", folder, "--token-file", folder + "/token"},
                     {marker_}, kDeadline);
    ASSERT_TRUE(service.ok()) << service.status();
    EXPECT_EQ(service->exit_code, 1) << service->output;
    EXPECT_THAT(service->output, HasSubstr("elastrun-rendezvous: --state-dir: folder " +
                                           folder + " " + why));
  }
  // Nothing was written through them.
  EXPECT_THAT(testing::ListFiles(planted), ::testing::IsEmpty());
  EXPECT_THAT(testing::ListFiles(victim), ::testing::IsEmpty());
}

TEST_F(DaemonRunAsE2eTest, LinkPlantedWhereALogGoesIsNotFollowed) {
  ASSERT_NO_FATAL_FAILURE(StartDaemonAndWait());
  // The first job of this service will be plant-1: a plant-1 folder that is
  // not its own (no .job naming it) holds, in rank 0's log folder, a link to
  // a file that must stay as it is.
  const std::string victim = dir_ + "/victim";
  ASSERT_NO_FATAL_FAILURE(WriteFile(victim, "precious\n"));
  const std::string rank_dir = state_ + "/logs/plant-1/attempt_0/0";
  ASSERT_EQ(testing::Run({"mkdir", "-p", rank_dir})->exit_code, 0);
  ASSERT_EQ(symlink(victim.c_str(), (rank_dir + "/stdout.log").c_str()), 0);

  const std::string job = cluster_->SubmitSpec(ShellJob("plant", "echo overwritten"));
  ASSERT_EQ(job, "plant-1");
  v1::JobStatus st = cluster_->WaitFinished(job);
  // Its logs went beside, into a folder of its own.
  EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << daemon_->Output();
  EXPECT_EQ(testing::ReadFile(victim), "precious\n");
  const std::vector<std::string> own = testing::ListFiles(state_ + "/logs", "plant-1@");
  ASSERT_EQ(own.size(), 1u) << daemon_->Output();
  EXPECT_EQ(testing::ReadFile(state_ + "/logs/" + own[0] + "/attempt_0/0/stdout.log"),
            "overwritten\n");
}

TEST_F(DaemonRunAsE2eTest, RootDaemonRunsWorkersAsTheJobsOwner) {
  if (!HaveNobody()) GTEST_SKIP() << "needs root and the user nobody (uid 65534)";
  // A secret in the root daemon's environment (it inherits the test's):
  // another user's workers must not see it; PATH they get.
  setenv("DAEMON_TEST_SECRET", "hunter2", 1);
  ASSERT_NO_FATAL_FAILURE(StartDaemonAndWait());
  unsetenv("DAEMON_TEST_SECRET");
  const std::string project = dir_ + "/project";
  ASSERT_EQ(mkdir(project.c_str(), 0755), 0);
  // What the owner needs: its snapshot folder, the agent socket, the
  // folder of its error file, its working folder.
  const std::string script =
      "id -u; pwd; stat -c %u:%a \"$ELASTRUN_SNAPSHOT\"; echo \"home=$HOME\"; "
      "[ -w \"$ELASTRUN_AGENT_SOCKET\" ] && echo socket-reachable; "
      "touch \"$(dirname \"$TORCHELASTIC_ERROR_FILE\")/probe\" && echo "
      "error-folder-writable; echo \"secret=${DAEMON_TEST_SECRET:-none} "
      "path=${PATH:+set}\"";
  v1::JobSpec spec = ShellJob("owned", script);
  spec.set_working_dir(project);
  OwnedByNobody(spec);
  const std::string job = cluster_->SubmitSpec(spec);
  v1::JobStatus st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString() << daemon_->Output();
  const std::string out = Stdout(job);
  EXPECT_THAT(out, HasSubstr("65534\n" + project + "\n65534:700\n"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat("home=", getpwuid(kNobody)->pw_dir, "\n")));
  EXPECT_THAT(out, HasSubstr("socket-reachable\nerror-folder-writable\n"));
  EXPECT_THAT(out, HasSubstr("secret=none path=set\n"));

  // No owner: the daemon's own user, as before, with its environment.
  const std::string mine = cluster_->SubmitSpec(
      ShellJob("mine", "id -u; echo \"secret=${DAEMON_TEST_SECRET:-none}\""));
  ASSERT_EQ(cluster_->WaitFinished(mine).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Stdout(mine), "0\nsecret=hunter2\n");
}

// A hung worker of nobody's job: its native stacks (eu-stack) are taken
// by a tool running as nobody, not as root, and still reach its log.
TEST_F(DaemonRunAsE2eTest, AHungWorkersStacksAreTakenAsItsUser) {
  if (!HaveNobody()) GTEST_SKIP() << "needs root and the user nobody (uid 65534)";
  if (system("command -v eu-stack >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "eu-stack is not installed (elfutils): no native stacks to take";
  }
  ASSERT_NO_FATAL_FAILURE(StartDaemonAndWait());
  v1::JobSpec spec = ShellJob("stuck", "exec sleep 600");
  spec.mutable_hang_timeout()->set_seconds(2);
  OwnedByNobody(spec);
  const std::string job = cluster_->SubmitSpec(spec);
  v1::JobStatus st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_FAILED) << st.DebugString() << daemon_->Output();
  EXPECT_TRUE(st.root_cause().hung()) << st.DebugString();
  const std::string err =
      testing::ReadFile(absl::StrCat(state_, "/logs/", job, "/attempt_0/0/stderr.log"));
  EXPECT_THAT(err, HasSubstr("hung before reporting a step")) << err;
  EXPECT_THAT(err, HasSubstr("TID ")) << "no native stacks:\n" << err;
}

TEST_F(DaemonRunAsE2eTest, UnknownOwnerOrMissingFolderCannotStart) {
  if (geteuid() != 0) GTEST_SKIP() << "a root daemon resolves owners";
  ASSERT_NO_FATAL_FAILURE(StartDaemonAndWait());
  v1::JobSpec spec = ShellJob("ghost", "true");
  spec.mutable_owner()->set_uid(3999999);  // no such account here
  spec.mutable_owner()->set_gid(3999999);
  const std::string ghost = cluster_->SubmitSpec(spec);
  v1::JobStatus st = cluster_->WaitFinished(ghost);
  EXPECT_EQ(st.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(
      st.root_cause().message(),
      HasSubstr("belongs to uid 3999999 (uid3999999), which is unknown on node n1"));

  v1::JobSpec lost = ShellJob("lost", "true");
  lost.set_working_dir(dir_ + "/no-such-folder");
  const std::string lost_id = cluster_->SubmitSpec(lost);
  st = cluster_->WaitFinished(lost_id);
  EXPECT_EQ(st.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(st.DebugString(),
              HasSubstr(absl::StrCat("working folder ", dir_, "/no-such-folder of job ",
                                     lost_id, " is missing on node n1")));
}

TEST_F(DaemonRunAsE2eTest, NonRootDaemonRunsOnlyItsOwnUsersJobs) {
  if (!HaveNobody() || !FileExists("/usr/sbin/runuser")) {
    GTEST_SKIP() << "needs root, runuser and the user nobody (uid 65534)";
  }
  // The daemon runs as nobody, in folders of nobody's.
  const std::string home = dir_ + "/nobody";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  ASSERT_EQ(chown(home.c_str(), kNobody, kNobody), 0);
  state_ = home + "/state";
  daemon_ = cluster_->StartOwnDaemon(
      {"/usr/sbin/runuser", "-u", "nobody", "--", BinDir() + "/elastrund", "--rendezvous",
       cluster_->address(), "--node-id", "n1", "--slots", "1", "--state-dir", state_,
       "--shutdown-timeout", "10s", "--cred-socket", "none"},
      // The token file is root's (0600): nobody gets the token itself.
      {"ELASTRUN_SNAPSHOT_BASE=" + home,
       "ELASTRUN_TOKEN=" + std::string(absl::StripAsciiWhitespace(
                               testing::ReadFile(cluster_->token_file())))});
  ASSERT_NE(daemon_, nullptr);
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }))
      << daemon_->Output();

  v1::JobSpec roots = ShellJob("roots", "id -u");
  roots.mutable_owner()->set_uid(0);
  const std::string refused = cluster_->SubmitSpec(roots);
  v1::JobStatus st = cluster_->WaitFinished(refused);
  EXPECT_EQ(st.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(st.DebugString(),
              HasSubstr(absl::StrCat("elastrund on node n1 runs as uid 65534; job ",
                                     refused, " belongs to uid 0")));
  // The daemon's token (its environment) is not passed on to the workers.
  v1::JobSpec own = ShellJob("own", "id -u; echo \"${ELASTRUN_TOKEN-no token}\"");
  own.mutable_owner()->set_uid(kNobody);
  own.mutable_owner()->set_gid(kNobody);
  const std::string ran = cluster_->SubmitSpec(own);
  ASSERT_EQ(cluster_->WaitFinished(ran).state(), v1::JOB_STATE_SUCCEEDED)
      << daemon_->Output();
  EXPECT_EQ(Stdout(ran), "65534\nno token\n");
}

TEST_F(DaemonRunAsE2eTest, SubmitSendsItsFolderAndEnvironment) {
  ASSERT_NO_FATAL_FAILURE(StartDaemonAndWait());
  const std::string project = dir_ + "/project";
  ASSERT_EQ(mkdir(project.c_str(), 0755), 0);
  // `elastrun submit` run from the project folder, MYVAR in its
  // environment only (the daemon has none).
  auto submit = [&](const std::string& flags) {
    absl::StatusOr<testing::RunResult> r = testing::Run(
        {"/bin/sh", "-c",
         absl::StrCat("cd '", project, "' && exec '", BinDir(), "/elastrun' submit ",
                      "--rendezvous ", cluster_->address(), " ", flags,
                      " -- sh -c 'pwd; echo \"MYVAR=${MYVAR-unset}\"'")},
        {marker_, "MYVAR=from the submitter",
         "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()});
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
    return r.ok() ? std::string(absl::StripTrailingAsciiWhitespace(r->output)) : "";
  };
  const std::string all = submit("");
  ASSERT_EQ(cluster_->WaitFinished(all).state(), v1::JOB_STATE_SUCCEEDED)
      << daemon_->Output();
  EXPECT_EQ(Stdout(all), project + "\nMYVAR=from the submitter\n");

  const std::string none = submit("--export NONE");
  ASSERT_EQ(cluster_->WaitFinished(none).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Stdout(none), project + "\nMYVAR=unset\n");

  const std::string listed = submit("--export MYVAR,OTHER=x --working-dir /");
  ASSERT_EQ(cluster_->WaitFinished(listed).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Stdout(listed), "/\nMYVAR=from the submitter\n");
}

}  // namespace
}  // namespace elastrun
