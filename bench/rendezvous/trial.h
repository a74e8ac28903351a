// One trial of the rendezvous bench: a fresh service, N simulated daemons, a
// job, and the scenario's figure (see bench/README.md).
//
//   join        nnodes N:N job: first JoinRound sent -> every node holds its
//               StartAttempt (assignment checked: ranks 0..N-1 unique, one
//               round, one MASTER_ADDR/MASTER_PORT, the rank-0 node's port).
//   loss-close  nnodes (N-1):N job running on N nodes: one node stops
//               heartbeating and closes its Watch stream (a crashed daemon)
//               -> every survivor holds the next round's StartAttempt.
//   loss-lease  as loss-close, but the node only goes silent (network cut):
//               timed from its last heartbeat, so the lease is included.
//   submit      Options::submits jobs submitted through Jobs.Submit, 32 calls
//               in flight (as many CLIs at once): first sent -> last
//               answered. Each job asks for more nodes than exist and waits
//               for them (wait_for_nodes), so it stays queued: the figure is
//               the service's cost of accepting and storing a job.
#ifndef ELASTRUN_BENCH_RENDEZVOUS_TRIAL_H_
#define ELASTRUN_BENCH_RENDEZVOUS_TRIAL_H_

#include <string>
#include <vector>

namespace elastrun::bench {

enum class Scenario { kJoin, kLossClose, kLossLease, kSubmit };
const char* ScenarioName(Scenario s);

struct Options {
  std::string service;  // the elastrun-rendezvous binary
  std::vector<int> ns = {10, 100, 1000};
  std::vector<Scenario> scenarios = {Scenario::kJoin, Scenario::kLossClose,
                                     Scenario::kLossLease};
  // Where the service keeps its state: "memory", "sqlite" (--state-dir) or
  // "etcd" (--store etcd://etcd_endpoints, a fresh --etcd-prefix per trial:
  // one replica, which leads at once).
  std::vector<std::string> states = {"memory", "sqlite"};
  std::string etcd_endpoints;
  int reps = 3;
  int submits = 1000;  // jobs of the submit scenario
  int channels = 8;
  double timeout_s = 60;
  bool keep = false;
  bool verbose = false;
  bool pin = false;  // service on CPU 0, this process on the others
};

struct Trial {
  bool ok = false;
  std::string error;
  double setup_s = 0;   // N RegisterNode + N Watch (Welcome)
  double value_s = 0;   // the scenario's figure
  double submit_s = 0;  // join: Submit sent -> all assigned
  double cpu_s = 0;     // service CPU over the measured interval
  double bench_cpu_s = 0;  // this process (the N simulated daemons), same interval
  double hwm_mib = 0;   // service peak RSS over the whole trial
  // From the figure's start: every JoinRound command received, every
  // JoinRound answered, the first StartAttempt received.
  double cmds_s = 0, joined_s = 0, first_start_s = 0;
};

// Runs one trial of `sc` with `n` nodes; the service keeps its state in
// `state` (Options::states). Never throws; t.ok says how it went.
Trial RunTrial(const Options& o, int n, Scenario sc, const std::string& state);

}  // namespace elastrun::bench

#endif  // ELASTRUN_BENCH_RENDEZVOUS_TRIAL_H_
