// elastrun-rendezvous-bench: rendezvous at scale. Starts the real
// `elastrun-rendezvous` as a subprocess and simulates N node daemons in this
// process through the real gRPC API (sim.h), then times the scenarios of
// trial.h, plus the service's CPU time over the measured interval
// (/proc/PID/stat utime+stime) and its peak RSS (/proc/PID/status VmHWM).
// Every trial starts a fresh service (in memory, and with --state-dir for
// SQLite), every wait has a deadline, and the service is stopped by its pid
// (SIGTERM, then SIGKILL). See bench/README.md.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "bench/rendezvous/trial.h"

namespace elastrun::bench {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string Fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", x);
  return b;
}

struct Row {
  int n;
  Scenario sc;
  std::string state;
  std::vector<Trial> trials;
};

// Parses the flags into `o`; returns -1 to go on, else the exit code.
int ParseFlags(int argc, char** argv, Options& o) {
  CLI::App app(
      "Simulates N node daemons against a real elastrun-rendezvous (started here\n"
      "on 127.0.0.1:0, a fresh one per trial) through the gRPC API and times the\n"
      "rendezvous. See bench/README.md.",
      "elastrun-rendezvous-bench");
  std::vector<std::string> scenarios = {"join", "loss-close", "loss-lease"};
  std::vector<std::string> states = {"memory", "sqlite"};
  app.add_option("--n", o.ns, "node counts, each >= 2")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--scenarios", scenarios,
                 "join,loss-close,loss-lease (default), submit (--submits queued jobs)")
      ->delimiter(',')
      ->check(CLI::IsMember({"join", "loss-close", "loss-lease", "submit"}))
      ->capture_default_str();
  app.add_option("--submits", o.submits, "jobs of the submit scenario")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--state", states,
                 "memory,sqlite,etcd (sqlite: the service's --state-dir; etcd: its\n"
                 "--store, with --etcd)")
      ->delimiter(',')
      ->check(CLI::IsMember({"memory", "sqlite", "etcd"}))
      ->capture_default_str();
  app.add_option("--reps", o.reps, "trials per cell")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--channels", o.channels, "gRPC channels (connections) for the N nodes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "deadline of each wait, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--service", o.service, "elastrun-rendezvous (default: next to this binary)")
      ->check(CLI::ExistingFile);
  app.add_option("--etcd", o.etcd_endpoints,
                 "HOST:PORT[,...] of a running etcd for --state etcd (each trial\n"
                 "under a prefix of its own)");
  app.add_flag("--pin", o.pin,
               "run the service on CPU 0 and the simulated daemons on the other CPUs");
  app.add_flag("--keep", o.keep, "keep every trial's folder (service log, state)");
  app.add_flag("--verbose", o.verbose, "one line per trial");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a hint
    return code == 0 ? 0 : 2;      // usage errors exit 2, as every binary here
  }
  o.scenarios.clear();
  for (const std::string& s : scenarios) {
    o.scenarios.push_back(s == "join"         ? Scenario::kJoin
                          : s == "loss-close" ? Scenario::kLossClose
                          : s == "submit"     ? Scenario::kSubmit
                                              : Scenario::kLossLease);
  }
  o.states = states;
  if (o.etcd_endpoints.empty() &&
      std::find(states.begin(), states.end(), "etcd") != states.end()) {
    std::fprintf(stderr,
                 "elastrun-rendezvous-bench: --state etcd needs --etcd HOST:PORT\n");
    return 2;
  }
  return -1;
}

void PrintVerbose(const Row& row, int rep, const Trial& t) {
  std::fprintf(stderr,
               "N=%d %s %s rep %d: %s value %.3f s submit %.3f s cpu %.3f s "
               "bench cpu %.3f s hwm %.1f MiB setup %.3f s%s%s\n",
               row.n, ScenarioName(row.sc), row.state.c_str(), rep,
               t.ok ? "ok" : "FAILED", t.value_s, t.submit_s, t.cpu_s, t.bench_cpu_s,
               t.hwm_mib, t.setup_s, t.ok ? "" : ": ", t.error.c_str());
}

// One table row; appends the row's phases to `phase_lines`.
void PrintRow(const Row& row, int submits, std::vector<std::string>& phase_lines) {
  std::vector<double> v, sub, cpu, bcpu, setup, cmds, joined, first;
  double hwm = 0;
  int ok = 0;
  for (const Trial& t : row.trials) {
    hwm = std::max(hwm, t.hwm_mib);
    if (!t.ok) continue;
    ++ok;
    v.push_back(t.value_s);
    sub.push_back(t.submit_s);
    cpu.push_back(t.cpu_s);
    bcpu.push_back(t.bench_cpu_s);
    cmds.push_back(t.cmds_s);
    joined.push_back(t.joined_s);
    first.push_back(t.first_start_s);
    setup.push_back(t.setup_s);
  }
  char time[96] = "-", submit[32] = "-";
  if (!v.empty()) {
    std::snprintf(time, sizeof time, "%.3f (%.3f-%.3f)", Median(v),
                  *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  }
  if (row.sc == Scenario::kJoin && !sub.empty()) {
    std::snprintf(submit, sizeof submit, "%.3f", Median(sub));
  }
  if (row.sc == Scenario::kSubmit) {
    phase_lines.push_back(
        std::to_string(row.n) + " submit " + row.state + ": " +
        (v.empty() ? std::string("-")
                   : Fmt(submits / Median(v)) + " jobs/s accepted and stored"));
  } else {
    phase_lines.push_back(std::to_string(row.n) + " " + ScenarioName(row.sc) + " " +
                          row.state + ": last JoinRound command " + Fmt(Median(cmds)) +
                          ", last JoinRound answered " + Fmt(Median(joined)) +
                          ", first StartAttempt " + Fmt(Median(first)) +
                          ", last StartAttempt " + Fmt(Median(v)));
  }
  const int total = static_cast<int>(row.trials.size());
  std::printf("| %d | %s | %s | %s | %s | %.2f | %.2f | %.0f | %.3f | %d/%d%s |\n", row.n,
              ScenarioName(row.sc), row.state.c_str(), time, submit, Median(cpu),
              Median(bcpu), hwm, Median(setup), ok, total, ok == total ? "" : " FAILED");
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  // As the service does: absl's lock-order graph (on in Debian's build)
  // would cost every lock of N simulated daemons the CPUs the service
  // shares with them.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  Options o;
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  o.service = self.substr(0, self.rfind('/') + 1) + "elastrun-rendezvous";
  if (int code = ParseFlags(argc, argv, o); code >= 0) return code;
  if (o.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 1; c < ncpu; ++c) CPU_SET(c, &set);
    if (ncpu < 2 || sched_setaffinity(0, sizeof set, &set) != 0) {
      std::fprintf(stderr, "elastrun-rendezvous-bench: --pin needs at least 2 CPUs\n");
      return 2;
    }
  }
  if (access(o.service.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "elastrun-rendezvous-bench: no executable service at %s (--service)\n",
                 o.service.c_str());
    return 2;
  }
  std::vector<Row> rows;
  for (int n : o.ns) {
    for (Scenario sc : o.scenarios) {
      for (const std::string& state : o.states) {
        Row row{n, sc, state, {}};
        for (int r = 0; r < o.reps; ++r) {
          Trial t = RunTrial(o, n, sc, state);
          if (o.verbose || !t.ok) PrintVerbose(row, r, t);
          row.trials.push_back(std::move(t));
          if (!row.trials.back().ok) break;  // a failed cell stops early
        }
        rows.push_back(std::move(row));
      }
    }
  }
  std::printf("\n| N | scenario | state | time s, median (min-max) | submit->all s | "
              "service CPU s | daemons' CPU s | service peak RSS MiB | register+watch s | "
              "ok |\n");
  std::printf("|---:|---|---|---|---:|---:|---:|---:|---:|---|\n");
  std::vector<std::string> phase_lines;
  bool all_ok = true;
  for (const Row& row : rows) {
    PrintRow(row, o.submits, phase_lines);
    for (const Trial& t : row.trials) all_ok = all_ok && t.ok;
  }
  std::printf("\nPhases, s from the figure's start (medians; loss-lease from the last "
              "heartbeat, so they include the lease):\n");
  for (const std::string& l : phase_lines) std::printf("  %s\n", l.c_str());
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace elastrun::bench

int main(int argc, char** argv) { return elastrun::bench::Main(argc, argv); }
