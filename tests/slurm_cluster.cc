#include "tests/slurm_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace elastrun::testing {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(60);

// Runs a set-up command that must succeed; the error names it.
absl::Status Sh(const std::vector<std::string>& argv) {
  auto r = Run(argv, {}, absl::Seconds(30));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", absl::StrJoin(argv, " "), "' failed: ", r->output));
  }
  return absl::OkStatus();
}

// Calls `done` until it is true or `timeout` passed (Slurm's daemons and
// commands offer nothing to wait on but their answers).
bool PollUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return done();
}

std::string Tail(const std::string& text, size_t n = 2000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// This machine's short host name: slurmctld runs only where SlurmctldHost
// names it.
std::string ShortHostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string host(name);
  return host.substr(0, host.find('.'));
}

}  // namespace

std::string SlurmCluster::NodeName(int i) { return absl::StrCat("n", i); }
std::string SlurmCluster::NodeAddr(int i) const { return absl::StrCat(subnet_, ".", 10 + i); }

absl::StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(
    const std::string& dir, int nodes, const std::vector<std::string>& daemon_env) {
  for (const char* program : {"munged", "slurmctld", "slurmd", "sbatch", "nsenter", "ip"}) {
    if (Run({"sh", "-c", absl::StrCat("command -v ", program)}, {}).value_or(RunResult{})
            .exit_code != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(program, " is not installed (Debian: slurm-wlm munge; "
                                "scripts/setup.sh installs them)"));
    }
  }
  std::unique_ptr<SlurmCluster> c(new SlurmCluster(dir, nodes));
  if (absl::Status s = c->SetUpNetwork(); !s.ok()) return s;
  if (absl::Status s = c->WriteConfig(); !s.ok()) return s;
  if (absl::Status s = c->StartDaemons(daemon_env); !s.ok()) return s;
  return c;
}

absl::Status SlurmCluster::SetUpNetwork() {
  // Names unique per test process (interface names: at most 15 bytes).
  id_ = absl::StrCat(getpid() % 100000);
  subnet_ = absl::StrCat("10.215.", getpid() % 200 + 20);
  bridge_ = "elsl" + id_ + "b";
  if (!Sh({"ip", "link", "add", bridge_, "type", "bridge"}).ok()) {
    return absl::FailedPreconditionError(
        "cannot create network devices here (needs root and CAP_NET_ADMIN)");
  }
  made_bridge_ = true;
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"ip", "addr", "add", subnet_ + ".1/24", "dev", bridge_},
           {"ip", "link", "set", bridge_, "up"}}) {
    if (absl::Status s = Sh(argv); !s.ok()) return s;
  }
  for (int h = 0; h < nodes_; ++h) {
    const std::string ns = absl::StrCat("elsl", id_, "n", h);
    const std::string outer = absl::StrCat("elsl", id_, "o", h);
    const std::string inner = absl::StrCat("elsl", id_, "i", h);
    if (absl::Status s = Sh({"ip", "netns", "add", ns}); !s.ok()) return s;
    namespaces_.push_back(ns);
    for (const auto& argv : std::vector<std::vector<std::string>>{
             {"ip", "link", "add", outer, "type", "veth", "peer", "name", inner},
             {"ip", "link", "set", inner, "netns", ns},
             {"ip", "link", "set", outer, "master", bridge_},
             {"ip", "link", "set", outer, "up"},
             // The same name on every node, as on real clusters, so that one
             // GLOO_SOCKET_IFNAME fits all (the nodes share one host name,
             // which Gloo would otherwise resolve to loopback).
             {"ip", "netns", "exec", ns, "ip", "link", "set", inner, "name", kInterface},
             {"ip", "netns", "exec", ns, "ip", "addr", "add", NodeAddr(h) + "/24", "dev",
              kInterface},
             {"ip", "netns", "exec", ns, "ip", "link", "set", kInterface, "up"},
             {"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"}}) {
      if (absl::Status s = Sh(argv); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status SlurmCluster::WriteConfig() {
  std::error_code ec;
  for (const char* sub : {"munge", "ctld", "spool", "log"}) {
    std::filesystem::create_directories(absl::StrCat(dir_, "/", sub), ec);
  }
  for (int h = 0; h < nodes_; ++h) {
    std::filesystem::create_directories(absl::StrCat(dir_, "/spool/", NodeName(h)), ec);
  }
  chmod((dir_ + "/munge").c_str(), 0700);  // munged refuses a folder open to others
  // munged's key: 1 KiB of random bytes, readable by its owner only.
  const std::string key = dir_ + "/munge/key";
  if (absl::Status s = Sh({"dd", "if=/dev/urandom", "of=" + key, "bs=1024", "count=1"});
      !s.ok()) {
    return s;
  }
  chmod(key.c_str(), 0400);

  const int ctld_port = FreeLoopbackPort(), slurmd_port = FreeLoopbackPort();
  if (ctld_port < 0 || slurmd_port < 0) return absl::FailedPreconditionError("no free port");
  conf_ = dir_ + "/slurm.conf";
  std::ofstream conf(conf_);
  // Root runs everything; no cgroups (ProctrackType linuxproc tracks a
  // job's processes by parentage, TaskPlugin none binds nothing), so it
  // works in containers; config_overrides lets each node claim 4 CPUs on
  // a smaller machine.
  conf << "ClusterName=elastrun-test\n"
       << "SlurmctldHost=" << ShortHostName() << "(" << subnet_ << ".1)\n"
       << "SlurmUser=root\nSlurmdUser=root\n"
       << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << slurmd_port << "\n"
       << "AuthType=auth/munge\nCredType=cred/munge\n"
       << "AuthInfo=socket=" << dir_ << "/munge/sock\n"
       << "StateSaveLocation=" << dir_ << "/ctld\n"
       << "SlurmdSpoolDir=" << dir_ << "/spool/%n\n"
       << "SlurmctldPidFile=" << dir_ << "/ctld/slurmctld.pid\n"
       << "SlurmdPidFile=" << dir_ << "/spool/%n/slurmd.pid\n"
       << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\n"
       << "SlurmdLogFile=" << dir_ << "/log/slurmd-%n.log\n"
       << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
       << "JobAcctGatherType=jobacct_gather/none\n"
       << "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
       << "SchedulerType=sched/backfill\nSelectType=select/cons_tres\n"
       << "SelectTypeParameters=CR_Core\nSlurmdParameters=config_overrides\n"
       << "MpiDefault=none\nSwitchType=switch/none\nMailProg=/bin/true\n"
       << "ReturnToService=2\nKillWait=30\nMinJobAge=600\n";
  std::vector<std::string> names;
  for (int h = 0; h < nodes_; ++h) {
    conf << "NodeName=" << NodeName(h) << " NodeAddr=" << NodeAddr(h)
         << " CPUs=4 State=UNKNOWN\n";
    names.push_back(NodeName(h));
  }
  conf << "PartitionName=test Nodes=" << absl::StrJoin(names, ",")
       << " Default=YES MaxTime=INFINITE State=UP\n";
  conf.close();
  return conf ? absl::OkStatus() : absl::InternalError("cannot write " + conf_);
}

absl::Status SlurmCluster::StartDaemons(const std::vector<std::string>& daemon_env) {
  daemon_marker_ = absl::StrCat("ELASTRUN_TEST_SLURM_DAEMON=", getpid(), "-", dir_);
  std::vector<std::string> env = daemon_env;
  env.push_back(daemon_marker_);
  env.push_back("SLURM_CONF=" + conf_);
  auto start = [&](std::vector<std::string> argv) -> absl::StatusOr<std::unique_ptr<Subprocess>> {
    return Subprocess::Start(argv, env);
  };
  const std::string socket = dir_ + "/munge/sock";
  auto munged = start({"munged", "--foreground", "--force", "--socket=" + socket,
                       "--key-file=" + dir_ + "/munge/key",
                       "--pid-file=" + dir_ + "/munge/pid",
                       "--seed-file=" + dir_ + "/munge/seed",
                       "--log-file=" + dir_ + "/munge/log"});
  if (!munged.ok()) return munged.status();
  munged_ = *std::move(munged);
  if (!PollUntil([&] { return FileExists(socket); }, kStartTimeout)) {
    return absl::FailedPreconditionError("munged did not start: " + Tail(munged_->Output()));
  }
  auto ctld = start({"slurmctld", "-D", "-i", "-f", conf_});
  if (!ctld.ok()) return ctld.status();
  slurmctld_ = *std::move(ctld);
  for (int h = 0; h < nodes_; ++h) {
    // nsenter enters only the network namespace: `ip netns exec` would also
    // remount /sys, hiding the cgroup folders slurmd looks into.
    auto d = start({"nsenter", "--net=/run/netns/" + namespaces_[h], "slurmd", "-D", "-N",
                    NodeName(h), "-f", conf_});
    if (!d.ok()) return d.status();
    slurmds_.push_back(*std::move(d));
  }
  const bool idle = PollUntil(
      [&] {
        RunResult r = Command({"sinfo", "-h", "-N", "-o", "%T"});
        if (r.exit_code != 0) return false;
        std::vector<std::string> states = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
        int n = 0;
        for (const std::string& s : states) n += s == "idle" ? 1 : 0;
        return n == nodes_;
      },
      kStartTimeout);
  if (!idle) {
    return absl::FailedPreconditionError(
        absl::StrCat("Slurm's nodes did not come up (sinfo: ",
                     Command({"sinfo", "-N"}).output, ")\n", DaemonLogs()));
  }
  return absl::OkStatus();
}

SlurmCluster::~SlurmCluster() {
  // The daemons, then what slurmstepd and the jobs left: by environment
  // entry, never by name.
  slurmds_.clear();
  slurmctld_.reset();
  munged_.reset();
  for (const std::string& marker : {daemon_marker_, job_marker_}) {
    if (marker.empty()) continue;
    for (pid_t pid : ProcessesWithEnv(marker)) kill(pid, SIGKILL);
  }
  for (const std::string& ns : namespaces_) (void)Sh({"ip", "netns", "del", ns});
  if (made_bridge_) (void)Sh({"ip", "link", "del", bridge_});
}

RunResult SlurmCluster::Command(std::vector<std::string> argv,
                                std::vector<std::string> env) const {
  env.push_back("SLURM_CONF=" + conf_);
  auto r = Run(argv, env, absl::Seconds(60));
  if (!r.ok()) return RunResult{-1, std::string(r.status().message())};
  return *r;
}

namespace {
// The value of `key` ("JobState=") in `scontrol show job -o` output.
std::string Field(const std::string& text, const std::string& key) {
  const size_t at = text.find(" " + key);
  if (at == std::string::npos) return "";
  const size_t start = at + 1 + key.size();
  return text.substr(start, text.find_first_of(" \n", start) - start);
}
}  // namespace

std::string SlurmCluster::JobState(const std::string& job) const {
  RunResult r = Command({"scontrol", "-o", "show", "job", job});
  return r.exit_code == 0 ? Field(r.output, "JobState=") : "";
}

int SlurmCluster::JobRestarts(const std::string& job) const {
  RunResult r = Command({"scontrol", "-o", "show", "job", job});
  int n = -1;
  if (r.exit_code != 0 || !absl::SimpleAtoi(Field(r.output, "Restarts="), &n)) return -1;
  return n;
}

std::string SlurmCluster::WaitFinished(const std::string& job, absl::Duration timeout) const {
  std::string state;
  const bool finished = PollUntil(
      [&] {
        state = JobState(job);
        return !state.empty() && state != "PENDING" && state != "RUNNING" &&
               state != "CONFIGURING" && state != "COMPLETING" && state != "REQUEUED";
      },
      timeout);
  return finished ? state : "";
}

std::string SlurmCluster::DaemonLogs() const {
  std::string out;
  auto add = [&](const std::string& name, const std::string& text) {
    absl::StrAppend(&out, "--- ", name, ":\n", Tail(text), "\n");
  };
  if (munged_) add("munged", munged_->Output());
  if (slurmctld_) add("slurmctld", ReadFile(dir_ + "/log/slurmctld.log"));
  for (int h = 0; h < static_cast<int>(slurmds_.size()); ++h) {
    add("slurmd " + NodeName(h), ReadFile(absl::StrCat(dir_, "/log/slurmd-", NodeName(h), ".log")) +
                                     slurmds_[h]->Output());
  }
  return out;
}

}  // namespace elastrun::testing
