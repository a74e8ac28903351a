// How the job commands of `elastrun` print what the service returns: text
// for people, JSON (`--output json`) for scripts. Pure functions of the
// protos, so tests feed them hand-made statuses.
//
// The JSON is the proto itself, printed by protobuf's JSON printer
// (google::protobuf::util::MessageToJsonString) with the proto's field
// names and every field present, so a field added to the proto shows up
// with no change here. Three adjustments make it easy to read from a script
// (jq, Python): enum values by their short names ("FAILED", not
// "JOB_STATE_FAILED"), 64-bit integers as JSON numbers (proto3 JSON quotes
// them), and an unset message or time as null instead of absent.
//
// `status --output json`: a JobStatus (proto/elastrun/v1/jobs.proto).
// `list --output json`: a ListJobsResponse, {"jobs": [JobStatus...]}.
// `nodes --output json`: a ListNodesResponse, {"nodes": [NodeInfo...]}.
#ifndef ELASTRUN_LAUNCHER_CLI_FORMAT_H_
#define ELASTRUN_LAUNCHER_CLI_FORMAT_H_

#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "elastrun/v1/jobs.pb.h"
#include "google/protobuf/message.h"
#include "elastrun/v1/types.pb.h"

namespace elastrun::launcher {

// Keys in the proto's field order (ordered_json), so that the output reads
// well; scripts must not rely on the order.
using Json = nlohmann::ordered_json;

// "PENDING", ..., "UNSPECIFIED" for an unknown value.
std::string JobStateName(v1::JobState state);
std::string RoundPhaseName(v1::RoundPhase phase);
std::string NodeStateName(v1::NodeState state);

// `message` as the JSON described above.
Json ProtoJson(const google::protobuf::Message& message);

// One line: "node n2 rank 3 (local 1), round 2: exit code 1: message"
// (or "killed by signal 9 (SIGKILL)").
std::string FormatFailure(const v1::WorkerFailure& f);

// The root-cause block of launcher/protocol/failure.h (torchrun's layout) for
// a failure the service reported; `attempt_dir` is where that attempt's
// log folders are on the failed worker's node.
std::string FormatRootCauseBlock(const v1::WorkerFailure& f, const std::string& attempt_dir);

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
// A job's timeline, one aligned line per event: TIME (UTC, milliseconds),
// KIND, ROUND, NODE, RANK, MESSAGE ("-" where none applies).
std::string FormatEvents(const v1::EventsResponse& r);

// Puts "[rankN]:" before every line of forwarded worker output, as
// `elastrun run`'s console does. A chunk may hold several lines or end in
// the middle of one, and chunks of several ranks and of a rank's stdout and
// stderr interleave: a half line is continued, unprefixed, only by the next
// chunk of the same rank and stream. When another's output comes first, the
// half line is ended there (a '\n' of ours) and its rest is printed later
// as a prefixed line of its own; a rest that is only its '\n' is dropped.
// So every printed line has one prefix and holds one rank's one stream.
// Not thread-safe: one per `logs` command.
class RankPrefixer {
 public:
  // `data` of `rank`'s `stream` ("stdout" or "stderr"), every line that
  // starts in it prefixed.
  std::string Prefix(int rank, std::string_view stream, std::string_view data);

 private:
  using Key = std::pair<int, std::string>;  // rank, stream
  // The rank and stream whose half line ends the output so far, if any.
  std::optional<Key> open_;
  // Ranks and streams whose half line was ended early by another's output.
  std::set<Key> cut_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_FORMAT_H_
