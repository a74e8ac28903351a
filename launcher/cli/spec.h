// The job spec of `elastrun submit`, from a YAML file or from flags, checked
// locally before anything is sent. The service validates again
// (rendezvous/job_spec.h); the local check exists so that a user sees the
// line of the file to fix, in the file's own field names, without a round
// trip.
//
// The YAML job spec (every key but `command` is optional):
//
//   name: fashion-mnist-mlp     # [A-Za-z0-9._-]{1,64}; job id "<name>-<n>"
//   nnodes: "1:4"               # N or MIN:MAX (default 1)
//   nproc_per_node: 2           # workers per node (default 1)
//   max_restarts: 3             # failure-caused restarts (default 0)
//   command: [elastrun-train, --config, configs/fashion_mnist_mlp.yaml]
//   env: {OMP_NUM_THREADS: "4"} # extra worker environment
//   working_dir: /data/run      # worker's cwd on the node
//   run_id: mlp-a               # TORCHELASTIC_RUN_ID (default: unique to the job)
//   pool: gpu                   # only nodes of this pool (elastrund --pool)
//   last_call_timeout: 1s       # wait for more than MIN nodes (default 1s)
//   join_timeout: 10m           # a round below MIN fails the job (default 600s)
//   wait_for_nodes: true        # queue it even if no registered node is big
//                               # enough (default false: refused at submit)
#ifndef ELASTRUN_LAUNCHER_CLI_SPEC_H_
#define ELASTRUN_LAUNCHER_CLI_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/schema.h"
#include "elastrun/v1/types.pb.h"

namespace elastrun::launcher {

// The Schema of a YAML job spec (name "JobSpec"), for messages and --help.
const config::Schema& JobSpecSchema();

// Loads `path` with `overrides` (Hydra's grammar, as for every config:
// "key=value" sets a key, which may be one the file leaves to its default;
// "+env.NAME=value" adds one; "~key" deletes one), checks
// it against JobSpecSchema() and the value rules, and builds the proto.
// Errors (InvalidArgument unless the file cannot be read) start with
// "FILE:LINE:COL: FIELD:" for a value in the file: unknown key (with the
// accepted ones), wrong type, missing `command`, nnodes MIN > MAX or out of
// range, nproc_per_node < 1, negative max_restarts, an empty program, a bad
// name, env name or duration.
absl::StatusOr<v1::JobSpec> JobSpecFromYaml(const std::string& path,
                                            const std::vector<std::string>& overrides);

// The same from YAML text (`name` stands for the file in messages). For tests.
absl::StatusOr<v1::JobSpec> JobSpecFromYamlString(
    const std::string& text, const std::string& name,
    const std::vector<std::string>& overrides = {});

// What `elastrun submit` flags set; each field remembers whether it was
// given, so that flags may override a job file.
struct SpecFlags {
  std::vector<std::string> name;               // --name (last wins)
  std::vector<std::string> nnodes;             // --nnodes
  std::vector<std::string> nproc_per_node;     // --nproc-per-node
  std::vector<std::string> max_restarts;       // --max-restarts
  std::vector<std::string> env;                // --env K=V, in order
  std::vector<std::string> working_dir;        // --working-dir
  std::vector<std::string> run_id;             // --run-id
  std::vector<std::string> pool;               // --pool
  std::vector<std::string> last_call_timeout;  // --last-call-timeout
  std::vector<std::string> join_timeout;       // --join-timeout
  std::vector<std::string> hang_timeout;       // --hang-timeout (DUR, 0, or off)
  bool wait_for_nodes = false;                 // --wait-for-nodes (only turns it on)
  std::vector<std::string> program;            // after "--"
};

// Applies `flags` over `spec` (a job file's, or an empty spec) and checks
// the result. Errors name the flag ("--nnodes: MIN 3 is greater than MAX 2
// in '3:2'"); a spec without a command says to give one after "--".
absl::StatusOr<v1::JobSpec> ApplySpecFlags(const SpecFlags& flags, v1::JobSpec spec,
                                           bool from_file);

// `elastrun submit --export VALUE` (Slurm's --export): which environment
// the workers get. "ALL" (also "", the default): the submitter's whole
// `environment` ("NAME=value" entries) but elastrun's secrets
// (ELASTRUN_TOKEN, ELASTRUN_TOKEN_FILE, ELASTRUN_CREDENTIAL, any ELASTRUN_*
// naming a TOKEN or CREDENTIAL) and names that are not [A-Za-z_][A-Za-z0-9_]*,
// as the workers' whole environment (spec.replace_env). "NONE": the node
// daemon's environment (spec unchanged). "VAR,VAR=value,...": the daemon's
// environment plus those variables, VAR from `environment` (skipped when
// unset there), VAR=value as given; "ALL" in the list adds the whole
// environment. In every case the spec's own env (job file, --env) wins.
// Errors (InvalidArgument) name --export and the bad item.
absl::Status ApplyExport(const std::string& value,
                         const std::vector<std::string>& environment, v1::JobSpec* spec);

// The defaults a spec built from flags starts from: 1 node, 1 worker, no
// restarts.
v1::JobSpec DefaultJobSpec();

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_SPEC_H_
