// How the job commands of `elastrun` print what the service returns: text
// for people, JSON (`--output json`) for scripts. Pure functions of the
// protos, so tests feed them hand-made statuses.
//
// JSON keys are a stable interface: keys are only ever added. Times are
// RFC 3339 strings in UTC, or null when unset; states are the names below.
//
// `status --output json` (one object):
//   job_id, name, state ("PENDING", "RUNNING", "SUCCEEDED", "FAILED",
//   "CANCELLED"), phase ("QUEUED", "JOINING", "RUNNING", "DONE"), round,
//   world_size, restarts, max_restarts, min_nodes, max_nodes,
//   nproc_per_node, command (list), submit_time, finish_time, finish_reason,
//   root_cause (failure or null), nodes (list of {node_id, state,
//   group_rank}), last_progress ({node_id, round, rank, step, metrics, time}
//   or null), history (list of {round, end_reason, counted_as_restart,
//   world_size, nodes (node ids by group rank), failures, succeeded,
//   opened_time, closed_time, ended_time}).
//   A failure: {node_id, round, rank, local_rank, exit_code, signal,
//   message, traceback, time}.
// `list --output json`: {"jobs": [...]}, each job the keys of `status`
//   but history (empty from List).
// `nodes --output json`: {"nodes": [{node_id, addr, slots, free_slots,
//   labels, state ("ALIVE", "LOST"), watching, jobs, lost_reason,
//   registered_time, lease_expiry}]}.
#ifndef ELASTRUN_LAUNCHER_CLI_FORMAT_H_
#define ELASTRUN_LAUNCHER_CLI_FORMAT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "elastrun/v1/jobs.pb.h"
#include "elastrun/v1/types.pb.h"

namespace elastrun::launcher {

// Key order follows the documentation above (ordered_json), so that the
// output reads well; scripts must not rely on the order.
using Json = nlohmann::ordered_json;

// "PENDING", ..., "UNSPECIFIED" for an unknown value.
std::string JobStateName(v1::JobState state);
std::string RoundPhaseName(v1::RoundPhase phase);
std::string NodeStateName(v1::NodeState state);

Json FailureJson(const v1::WorkerFailure& f);
Json JobStatusJson(const v1::JobStatus& s);
Json JobListJson(const v1::ListJobsResponse& r);
Json NodeListJson(const v1::ListNodesResponse& r);

// One line: "node n2 rank 3 (local 1), round 2: exit code 1: message"
// (or "killed by signal 9 (SIGKILL)").
std::string FormatFailure(const v1::WorkerFailure& f);

// The multi-line report of `elastrun status`: state, round, world size,
// restarts with their causes per round, per-node state, last progress.
std::string FormatJobStatus(const v1::JobStatus& s);

// One line for `wait` and `cancel`: "JOB STATE (round R, world size W,
// K restarts)" plus, for a failed job, its reason and root cause.
std::string FormatJobLine(const v1::JobStatus& s);

// Tables for `list` and `nodes` (a header line, then one line per item;
// a line saying there are none when empty).
std::string FormatJobList(const v1::ListJobsResponse& r);
std::string FormatNodeList(const v1::ListNodesResponse& r);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_FORMAT_H_
