#include "launcher/cli/command_table.h"

namespace elastrun::launcher::internal {

const char kExitCodesHelp[] = R"(Exit codes of the job commands:
  0  done (wait, submit --wait: the job SUCCEEDED)
  1  the job FAILED or was CANCELLED (wait, submit --wait), or the command
     failed (also: refused by the service: not identified, or not your job)
  2  usage error: bad flags or arguments, or a job spec refused
  3  the service could not be reached or did not answer in time
  4  no such job
  5  wait --timeout passed before the job ended
)";

const char kIntro[] = R"(usage: elastrun COMMAND [ARGS...]

elastrun runs elastic, fault-tolerant distributed PyTorch training: `run`
(torchrun's replacement, on this node or the same command on several), the
job commands through the elastrun-rendezvous service and the node daemons
(elastrund).
)";

const char kServiceNote[] =
    R"(Job commands find the service from --rendezvous HOST:PORT or
$ELASTRUN_RENDEZVOUS (default 127.0.0.1:29400). They identify you with the
cluster token from --token, --token-file, $ELASTRUN_TOKEN, $ELASTRUN_TOKEN_FILE
or the service's default token file (/var/lib/elastrun/token for root, else
$XDG_STATE_HOME/elastrun/token or ~/.local/state/elastrun/token) when you can
read it; else with a credential for your own uid from this node's elastrund
($ELASTRUN_CRED_SOCKET, default /run/elastrund/cred.sock, or
$XDG_RUNTIME_DIR/elastrund-cred.sock for a daemon run by a user). The job you
submit is yours: only you (or root) may cancel it or read its logs. They
speak TLS with --tls-ca or $ELASTRUN_TLS_CA (and a client certificate,
--tls-cert/--tls-key or $ELASTRUN_TLS_CERT and $ELASTRUN_TLS_KEY, for a
service with mutual TLS). `run` needs no service.
)";

const char kMoreHelp[] =
    "`elastrun COMMAND --help` or `elastrun help COMMAND` describes a command.\n";

constexpr FlagInfo kServiceFlagTable[] = {
    {"--rendezvous", "HOST:PORT[,...]",
     "the elastrun-rendezvous service (default\n"
     "$ELASTRUN_RENDEZVOUS, else 127.0.0.1:29400); its\n"
     "replicas comma-separated: the leader is used"},
    {"--token", "TOKEN",
     "sent as \"authorization: Bearer TOKEN\" (default\n"
     "$ELASTRUN_TOKEN; visible in ps: prefer --token-file)"},
    {"--token-file", "FILE",
     "read the token from FILE (yours, mode 0600;\n"
     "default $ELASTRUN_TOKEN_FILE, else the default file)"},
    {"--tls-ca", "FILE",
     "speak TLS and verify the service's certificate\n"
     "against this PEM CA (default $ELASTRUN_TLS_CA)"},
    {"--tls-cert", "FILE",
     "client certificate (PEM) for a service with mutual\n"
     "TLS; needs --tls-key (default $ELASTRUN_TLS_CERT)"},
    {"--tls-key", "FILE", "its PEM private key (default $ELASTRUN_TLS_KEY)"},
    {"--tls-server-name", "NAME",
     "the name the service's certificate carries, when\n"
     "--rendezvous's host is not in it (default\n"
     "$ELASTRUN_TLS_SERVER_NAME)"},
    {"--rpc-timeout", "DUR", "deadline of each call to the service (default 10s)"},
    {"--retry-for", "DUR",
     "all but cancel and nodes drain|remove: retry a\n"
     "service that cannot be reached (restarting) this long\n"
     "before exit 3 (default 60s; 0: never); a submit sent\n"
     "again makes one job (its request id)"},
};

constexpr FlagInfo kOutputFlag = {"--output", "text|json",
                                  "text for people (default), or json for scripts"};

// submit

constexpr FlagInfo kSubmitFlags[] = {
    {"--name", "NAME", "job name ([A-Za-z0-9._-], at most 64); id NAME-N"},
    {"--nnodes", "N|MIN:MAX", "nodes (default 1)"},
    {"--nproc-per-node", "N", "workers per node, one slot each (default 1)"},
    {"--max-restarts", "K", "failure-caused restarts for the job (default 0)"},
    {"--env", "NAME=VALUE", "extra worker environment (repeatable)", true},
    {"--working-dir", "DIR",
     "workers' working folder on their nodes (default: the\n"
     "job file's working_dir, else the current folder)"},
    {"--run-id", "ID",
     "the workers' TORCHELASTIC_RUN_ID, what a training resumes\n"
     "by (default: JOB_ID@CLUSTER, unique to the job); an\n"
     "earlier job's continues its run"},
    {"--pool", "NAME",
     "run only on nodes of this pool (elastrund --pool;\n"
     "default: the default pool, nodes given none)"},
    {"--export", "ALL|NONE|VAR[=VALUE],...",
     "workers' environment, as Slurm's --export: ALL (default)\n"
     "this shell's whole environment, but elastrun's tokens\n"
     "and credentials; NONE the node daemon's; VAR,VAR=VALUE\n"
     "the daemon's plus these (ALL in the list: all plus\n"
     "these). --env and the job file's env come on top"},
    {"--last-call-timeout", "DUR",
     "after MIN nodes joined, wait this long for more (1s)"},
    {"--join-timeout", "DUR", "a round below MIN this long fails the job (600s)"},
    {"--hang-timeout", "DUR|off|derived",
     "a rank without progress this long is hung: stacks\n"
     "to its log, then a restart (default, \"derived\": 10x\n"
     "the median step time, at least 5m)"},
    {"--wait-for-nodes", "",
     "queue the job even if no registered node could\n"
     "hold it yet (default: such a job is refused)"},
    {"--wait", "",
     "then block until the job ends, as `elastrun wait`\n"
     "(sbatch --wait): exit 0 if it SUCCEEDED, 1 if not;\n"
     "its final status line goes to stderr"},
};

constexpr char kSubmitIntro[] = R"(usage: elastrun submit [flags] JOB.yaml [KEY=VALUE...]
       elastrun submit [flags] -- PROGRAM [ARGS...]

Submits a job to the service and prints its id (one line, nothing else on
stdout). The spec is checked here first, then by the service; a refused spec
creates nothing. With --wait it then waits for the job to end, as `elastrun
wait` does (a service restart is waited out), and exits with its outcome.

A job file is YAML with the keys name, nnodes ("N" or "MIN:MAX"),
nproc_per_node, max_restarts, command (a list: program and arguments), env
(a mapping), working_dir, last_call_timeout, join_timeout, hang_timeout,
wait_for_nodes;
only command is required. It may inherit with _base_; KEY=VALUE words after
the file override its keys (Hydra's grammar: nnodes=2:4 sets, +env.SEED=1
adds, ~env deletes). Flags override the file too; the words after "--" are
the program's.

A job that no registered node could ever hold (fewer than MIN alive nodes
with NPROC slots, busy or not) is refused (exit 1) with what it needs and
what is registered, unless --wait-for-nodes: then it stays PENDING until
such nodes register, and `elastrun status` says what it waits for. Jobs
start in submission order, but one that must wait does not stop the jobs
behind it from starting where they fit. A job waiting for busy slots holds
them as they free up (the jobs behind it use other slots), so a stream of
smaller jobs cannot starve it.
)";

// status, list, nodes

constexpr FlagInfo kOutputFlags[] = {kOutputFlag};

constexpr char kStatusIntro[] = R"(usage: elastrun status JOB [--output text|json]

Shows the job's state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED), the
current round and its phase, world size, restarts, every round with why it
ended and its root-cause failure (node, rank, exit code or signal, message),
the state of each of its nodes, and the last progress a worker reported.

--output json prints the service's JobStatus (proto/elastrun/v1/jobs.proto)
through protobuf's JSON printer, with the proto's field names and every
field present: job_id, spec {name, min_nodes, max_nodes, nproc_per_node,
max_restarts, argv, env, ...}, state, phase, round, restarts, world_size,
history [{id, end_reason, counted_as_restart, assignment {world_size, nodes
[{node_id, ...}]}, failures, succeeded, opened_time, ...}], nodes [{node_id,
state, group_rank}], last_progress, root_cause {node_id, round, rank,
local_rank, exit_code, signal, message, traceback, time}, finish_reason,
submit_time, finish_time. Enum values are their short names (state
"FAILED", phase "RUNNING"), 64-bit integers are numbers, times RFC 3339 UTC
strings, and an unset message or time is null.
)";

constexpr char kListIntro[] = R"(usage: elastrun list [--output text|json]

Lists every job the service knows, oldest first. --output json prints
{"jobs": [...]}, each job a JobStatus as `elastrun status` prints it.
)";

constexpr FlagInfo kNodesFlags[] = {
    {"--undo", "", "nodes drain: end the drain; new jobs may use the node"},
    {"--force", "",
     "nodes remove: even while jobs hold the node (it is\n"
     "lost for them: their rounds end and re-form without it)"},
    kOutputFlag,
};

constexpr char kNodesIntro[] = R"(usage: elastrun nodes [--output text|json]
       elastrun nodes drain NODE [--undo] [--output text|json]
       elastrun nodes remove NODE [--force] [--output text|json]

Lists the node daemons (elastrund) the service knows: id, address, state
(ALIVE, LOST; with "draining" in brackets when drained), slots and free
slots, the jobs holding its slots, labels. The service answers in pages;
every page is fetched. --output json prints {"nodes": [...]}, each a NodeInfo
(proto/elastrun/v1/types.proto): node_id, addr, slots, free_slots, labels,
state, watching, registered_time, lease_expiry, jobs, lost_reason, draining.

A node that stays LOST for the service's --node-expiry (10m by default) is
forgotten; when its daemon comes back it registers as a fresh node.

drain NODE: no new job is placed on the node; the jobs running there go on
(as Slurm's DRAIN or kubectl cordon), also through their restarts. The
drain outlives the daemon's and the service's restarts. --undo ends it.

remove NODE: the service forgets the node. Refused (exit 1, naming the
jobs) while jobs hold its slots, unless --force: the node is then lost for
those jobs, which re-form without it. A daemon of the node that still runs
is told the node is unknown and registers again as a fresh, undrained node
(as a kubelet does after kubectl delete node): to take a machine out, drain
it, or stop its daemon and then remove it. Exit 4 when there is no such node.
)";

// cancel

constexpr FlagInfo kCancelFlags[] = {
    {"--reason", "TEXT", "why, kept as the job's finish reason"},
    kOutputFlag,
};

constexpr char kCancelIntro[] =
    R"(usage: elastrun cancel JOB [--reason TEXT] [--output text|json]

Cancels a job that has not finished: every node stops its workers and the
job ends CANCELLED. Cancelling a finished job changes nothing. Prints the
job's status line (or JSON, as `status`) afterwards; exits 0 when the call
succeeded.
)";

// wait

constexpr FlagInfo kWaitFlags[] = {
    {"--timeout", "DUR", "give up after DUR and exit 5 (default: never)"},
    {"--poll-interval", "DUR", "time between two looks (default 250ms)"},
    kOutputFlag,
};

constexpr char kWaitIntro[] =
    R"(usage: elastrun wait JOB [--timeout DUR] [--poll-interval DUR] [--output text|json]

Blocks until the job ends, then prints its final status line (or JSON, as
`status`) and exits 0 if it SUCCEEDED, 1 if it FAILED or was CANCELLED, 5 if
--timeout passed first. A failed job's root cause follows on stderr, in the
block `elastrun run` prints (torchrun's layout). A service that stays unreachable for 60s
(--retry-for) exits 3; a shorter outage (a restart) is waited out.
)";

// logs

constexpr FlagInfo kLogsFlags[] = {
    {"-f,--follow", "", "keep printing new lines until the job has ended"},
    {"--rank", "R", "only rank R's lines, unprefixed"},
};

constexpr char kLogsIntro[] = R"(usage: elastrun logs JOB [-f] [--rank R]

Prints the worker output the node daemons forwarded to the service, every
line prefixed [rankN]: (with --rank R: only that rank, unprefixed). The
service keeps the newest 8 MiB per job (in its --state-dir, so they survive
its restart); the complete logs stay on each node under the daemon's
--log-dir (default STATE_DIR/logs, STATE_DIR being the daemon's --state-dir),
as LOG_DIR/JOB/attempt_ROUND/LOCAL_RANK/{stdout,stderr}.log. With -f it
follows until the job ends and exits as `wait` does: 0 when it SUCCEEDED,
1 (its status line on stderr) when it FAILED or was CANCELLED.
)";

// events

constexpr FlagInfo kEventsFlags[] = {
    {"--json", "", "print one JSON array of events (as --output json)"},
    kOutputFlag,
};

constexpr char kEventsIntro[] = R"(usage: elastrun events JOB [--json]

Prints the job's timeline, oldest first, one aligned line per event: TIME
(UTC), KIND, ROUND, NODE, RANK, MESSAGE. Kinds: submitted, round_opened,
round_closed (nodes and world size), node_lost (why), worker_failed (exit
code or signal and the worker's message), hang (a worker declared hung),
restart (the cause: failure, node lost, scale-up; failures count against
--max-restarts), job_finished (final state and why). The service keeps the
newest 1000 events per job, with the job's state.

--json (or --output json) prints one JSON array, each element an object with
the JobEvent fields (proto/elastrun/v1/jobs.proto): time (RFC 3339 UTC),
kind, round, node_id, rank (-1: none), message.
)";

// The job commands, in the order `elastrun --help` lists them (after run).
constexpr CommandInfo kCommandTable[] = {
    {"submit", "submit a job (a YAML job spec, or flags and -- PROGRAM ARGS)",
     kSubmitFlags, /*takes_words=*/true, kSubmitIntro},
    {"status", "show a job: state, round, world size, restarts and causes, nodes",
     kOutputFlags, /*takes_words=*/true, kStatusIntro},
    {"list", "list jobs, oldest first", kOutputFlags, /*takes_words=*/false, kListIntro},
    {"nodes", "list the node daemons; drain or remove one", kNodesFlags,
     /*takes_words=*/true, kNodesIntro},
    {"cancel", "cancel a job; every node stops its workers", kCancelFlags,
     /*takes_words=*/true, kCancelIntro},
    {"wait", "block until a job ends; exit 0 only if it succeeded", kWaitFlags,
     /*takes_words=*/true, kWaitIntro},
    {"logs", "print a job's worker output (-f: follow until the job ends)", kLogsFlags,
     /*takes_words=*/true, kLogsIntro},
    {"events", "print a job's timeline: rounds, failures, node losses, restarts",
     kEventsFlags, /*takes_words=*/true, kEventsIntro},
};

absl::Span<const FlagInfo> ServiceFlags() { return kServiceFlagTable; }
absl::Span<const CommandInfo> JobCommands() { return kCommandTable; }

}  // namespace elastrun::launcher::internal
