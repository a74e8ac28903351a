#include "launcher/cli/format.h"

#include <string.h>

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/util/time_util.h"

namespace elastrun::launcher {
namespace {

using google::protobuf::util::TimeUtil;

bool IsSet(const google::protobuf::Timestamp& t) {
  return t.seconds() != 0 || t.nanos() != 0;
}

// RFC 3339 in UTC, or null for an unset time.
Json TimeJson(const google::protobuf::Timestamp& t) {
  if (!IsSet(t)) return nullptr;
  return TimeUtil::ToString(t);
}

// To the second, for people; JSON keeps the full RFC 3339 time.
std::string TimeText(const google::protobuf::Timestamp& t) {
  if (!IsSet(t)) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixSeconds(t.seconds()),
                          absl::UTCTimeZone());
}

// What the current round of a not-finished job is doing.
std::string PhaseText(const v1::JobStatus& s) {
  switch (s.phase()) {
    case v1::ROUND_PHASE_QUEUED:
      return "queued: waiting for nodes with free slots";
    case v1::ROUND_PHASE_JOINING:
      return absl::StrCat("nodes joining round ", s.round());
    case v1::ROUND_PHASE_RUNNING:
      return absl::StrCat("round ", s.round(), " running");
    default:
      return "";
  }
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev == nullptr ? absl::StrCat(sig) : absl::StrCat(sig, " (SIG", abbrev, ")");
}

std::string Nnodes(const v1::JobSpec& spec) {
  if (spec.min_nodes() == spec.max_nodes()) return absl::StrCat(spec.min_nodes());
  return absl::StrCat(spec.min_nodes(), ":", spec.max_nodes());
}

// Keys shared by `status` and `list`; `history` is added by the caller.
Json JobSummaryJson(const v1::JobStatus& s) {
  Json j;
  j["job_id"] = s.job_id();
  j["name"] = s.spec().name();
  j["state"] = JobStateName(s.state());
  j["phase"] = RoundPhaseName(s.phase());
  j["round"] = s.round();
  j["world_size"] = s.world_size();
  j["restarts"] = s.restarts();
  j["max_restarts"] = s.spec().max_restarts();
  j["min_nodes"] = s.spec().min_nodes();
  j["max_nodes"] = s.spec().max_nodes();
  j["nproc_per_node"] = s.spec().nproc_per_node();
  j["command"] = std::vector<std::string>(s.spec().argv().begin(), s.spec().argv().end());
  j["submit_time"] = TimeJson(s.submit_time());
  j["finish_time"] = TimeJson(s.finish_time());
  j["finish_reason"] = s.finish_reason();
  j["root_cause"] = s.has_root_cause() ? FailureJson(s.root_cause()) : Json(nullptr);
  Json nodes = Json::array();
  for (const v1::JobNode& n : s.nodes()) {
    nodes.push_back(
        {{"node_id", n.node_id()}, {"state", n.state()}, {"group_rank", n.group_rank()}});
  }
  j["nodes"] = std::move(nodes);
  if (s.has_last_progress()) {
    const v1::Progress& p = s.last_progress();
    Json metrics = Json::object();
    // Sorted: a proto map has no order, and stable output diffs well.
    for (const auto& [k, v] :
         std::map<std::string, double>(p.metrics().begin(), p.metrics().end())) {
      metrics[k] = v;
    }
    j["last_progress"] = {{"node_id", p.node_id()}, {"round", p.round()},
                          {"rank", p.rank()},       {"step", p.step()},
                          {"metrics", metrics},     {"time", TimeJson(p.time())}};
  } else {
    j["last_progress"] = nullptr;
  }
  return j;
}

std::string Pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

// Left-aligned columns, each as wide as its longest cell.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i)
      width[i] = std::max(width[i], row[i].size() + 2);
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 == row.size() ? row[i] : Pad(row[i], width[i]);
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace

std::string JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_PENDING:
      return "PENDING";
    case v1::JOB_STATE_RUNNING:
      return "RUNNING";
    case v1::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case v1::JOB_STATE_FAILED:
      return "FAILED";
    case v1::JOB_STATE_CANCELLED:
      return "CANCELLED";
    default:
      return "UNSPECIFIED";
  }
}

std::string RoundPhaseName(v1::RoundPhase phase) {
  switch (phase) {
    case v1::ROUND_PHASE_QUEUED:
      return "QUEUED";
    case v1::ROUND_PHASE_JOINING:
      return "JOINING";
    case v1::ROUND_PHASE_RUNNING:
      return "RUNNING";
    case v1::ROUND_PHASE_DONE:
      return "DONE";
    default:
      return "UNSPECIFIED";
  }
}

std::string NodeStateName(v1::NodeState state) {
  switch (state) {
    case v1::NODE_STATE_ALIVE:
      return "ALIVE";
    case v1::NODE_STATE_LOST:
      return "LOST";
    default:
      return "UNSPECIFIED";
  }
}

Json FailureJson(const v1::WorkerFailure& f) {
  return {{"node_id", f.node_id()},     {"round", f.round()},
          {"rank", f.rank()},           {"local_rank", f.local_rank()},
          {"exit_code", f.exit_code()}, {"signal", f.signal()},
          {"message", f.message()},     {"traceback", f.traceback()},
          {"time", TimeJson(f.time())}};
}

Json JobStatusJson(const v1::JobStatus& s) {
  Json j = JobSummaryJson(s);
  Json history = Json::array();
  for (const v1::RoundRecord& r : s.history()) {
    Json failures = Json::array();
    for (const v1::WorkerFailure& f : r.failures()) failures.push_back(FailureJson(f));
    std::vector<std::string> nodes;
    for (const v1::NodeAssignment& n : r.assignment().nodes())
      nodes.push_back(n.node_id());
    history.push_back({{"round", r.id()},
                       {"end_reason", r.end_reason()},
                       {"counted_as_restart", r.counted_as_restart()},
                       {"world_size", r.assignment().world_size()},
                       {"nodes", nodes},
                       {"failures", failures},
                       {"succeeded", std::vector<std::string>(r.succeeded().begin(),
                                                              r.succeeded().end())},
                       {"opened_time", TimeJson(r.opened_time())},
                       {"closed_time", TimeJson(r.closed_time())},
                       {"ended_time", TimeJson(r.ended_time())}});
  }
  j["history"] = std::move(history);
  return j;
}

Json JobListJson(const v1::ListJobsResponse& r) {
  Json jobs = Json::array();
  for (const v1::JobStatus& s : r.jobs()) jobs.push_back(JobSummaryJson(s));
  return {{"jobs", jobs}};
}

Json NodeListJson(const v1::ListNodesResponse& r) {
  Json nodes = Json::array();
  for (const v1::NodeInfo& n : r.nodes()) {
    nodes.push_back({{"node_id", n.node_id()},
                     {"addr", n.addr()},
                     {"slots", n.slots()},
                     {"free_slots", n.free_slots()},
                     {"labels", std::map<std::string, std::string>(n.labels().begin(),
                                                                   n.labels().end())},
                     {"state", NodeStateName(n.state())},
                     {"watching", n.watching()},
                     {"jobs", std::vector<std::string>(n.jobs().begin(), n.jobs().end())},
                     {"lost_reason", n.lost_reason()},
                     {"registered_time", TimeJson(n.registered_time())},
                     {"lease_expiry", TimeJson(n.lease_expiry())}});
  }
  return {{"nodes", nodes}};
}

std::string FormatFailure(const v1::WorkerFailure& f) {
  std::string out = absl::StrFormat("node %s rank %d (local %d), round %d: ", f.node_id(),
                                    f.rank(), f.local_rank(), f.round());
  if (f.signal() != 0) {
    absl::StrAppend(&out, "killed by signal ", SignalName(f.signal()));
  } else {
    absl::StrAppend(&out, "exit code ", f.exit_code());
  }
  if (!f.message().empty()) absl::StrAppend(&out, ": ", f.message());
  return out;
}

std::string FormatJobLine(const v1::JobStatus& s) {
  std::string out =
      absl::StrFormat("%s %s (round %d, world size %d, %d restart%s)", s.job_id(),
                      JobStateName(s.state()), s.round(), s.world_size(), s.restarts(),
                      s.restarts() == 1 ? "" : "s");
  if (!s.finish_reason().empty() && s.state() != v1::JOB_STATE_SUCCEEDED) {
    absl::StrAppend(&out, ": ", s.finish_reason());
  }
  if (s.state() == v1::JOB_STATE_FAILED && s.has_root_cause()) {
    absl::StrAppend(&out, "; root cause: ", FormatFailure(s.root_cause()));
  }
  return out;
}

std::string FormatJobStatus(const v1::JobStatus& s) {
  std::string state = JobStateName(s.state());
  if (const std::string phase = PhaseText(s); !phase.empty()) {
    absl::StrAppend(&state, " (", phase, ")");
  }
  std::vector<std::vector<std::string>> rows = {
      {"job:", s.job_id()},
      {"state:", state},
      {"round:", absl::StrCat(s.round())},
      {"world size:", absl::StrCat(s.world_size())},
      {"nodes:",
       absl::StrFormat("%s x %d worker%s", Nnodes(s.spec()), s.spec().nproc_per_node(),
                       s.spec().nproc_per_node() == 1 ? "" : "s")},
      {"restarts:", absl::StrFormat("%d of %d", s.restarts(), s.spec().max_restarts())},
      {"command:", absl::StrJoin(s.spec().argv(), " ")},
      {"submitted:", TimeText(s.submit_time())},
  };
  if (IsSet(s.finish_time())) rows.push_back({"finished:", TimeText(s.finish_time())});
  if (!s.finish_reason().empty()) rows.push_back({"reason:", s.finish_reason()});
  if (s.has_root_cause()) rows.push_back({"root cause:", FormatFailure(s.root_cause())});
  if (s.has_last_progress()) {
    const v1::Progress& p = s.last_progress();
    std::string text = absl::StrFormat("step %d (rank %d on %s, round %d", p.step(),
                                       p.rank(), p.node_id(), p.round());
    if (IsSet(p.time())) absl::StrAppend(&text, ", at ", TimeText(p.time()));
    absl::StrAppend(&text, ")");
    for (const auto& [k, v] :
         std::map<std::string, double>(p.metrics().begin(), p.metrics().end())) {
      absl::StrAppend(&text, " ", k, "=", absl::StrFormat("%.6g", v));
    }
    rows.push_back({"progress:", text});
  } else {
    rows.push_back({"progress:", "-"});
  }
  std::string out = Table(rows);

  if (!s.nodes().empty()) {
    std::vector<std::vector<std::string>> nodes = {{"  NODE", "STATE", "GROUP_RANK"}};
    for (const v1::JobNode& n : s.nodes()) {
      nodes.push_back({"  " + n.node_id(), n.state(),
                       n.group_rank() < 0 ? "-" : absl::StrCat(n.group_rank())});
    }
    absl::StrAppend(&out, "nodes of the job:\n", Table(nodes));
  }
  if (!s.history().empty()) {
    absl::StrAppend(&out, "rounds:\n");
    for (const v1::RoundRecord& r : s.history()) {
      std::string why = r.end_reason().empty() ? "open or running" : r.end_reason();
      if (r.counted_as_restart()) absl::StrAppend(&why, " (counted as a restart)");
      absl::StrAppendFormat(&out, "  round %d: %s", r.id(), why);
      if (r.has_assignment()) {
        std::vector<std::string> ids;
        for (const v1::NodeAssignment& n : r.assignment().nodes())
          ids.push_back(n.node_id());
        absl::StrAppendFormat(&out, "; world size %d on %s", r.assignment().world_size(),
                              absl::StrJoin(ids, ","));
      }
      absl::StrAppend(&out, "\n");
      for (int i = 0; i < r.failures_size(); ++i) {
        absl::StrAppend(&out, "    ",
                        i == 0 ? "root cause: " : "also: ", FormatFailure(r.failures(i)),
                        "\n");
      }
    }
  }
  return out;
}

std::string FormatJobList(const v1::ListJobsResponse& r) {
  if (r.jobs().empty()) return "no jobs\n";
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "ROUND", "WORLD", "RESTARTS", "NNODES", "NPROC", "SUBMITTED"}};
  for (const v1::JobStatus& s : r.jobs()) {
    rows.push_back({s.job_id(), JobStateName(s.state()), absl::StrCat(s.round()),
                    absl::StrCat(s.world_size()),
                    absl::StrCat(s.restarts(), "/", s.spec().max_restarts()),
                    Nnodes(s.spec()), absl::StrCat(s.spec().nproc_per_node()),
                    TimeText(s.submit_time())});
  }
  return Table(rows);
}

std::string FormatNodeList(const v1::ListNodesResponse& r) {
  if (r.nodes().empty()) return "no nodes registered\n";
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "ADDRESS", "STATE", "SLOTS", "FREE", "JOBS", "LABELS"}};
  for (const v1::NodeInfo& n : r.nodes()) {
    std::vector<std::string> labels;
    for (const auto& [k, v] :
         std::map<std::string, std::string>(n.labels().begin(), n.labels().end())) {
      labels.push_back(absl::StrCat(k, "=", v));
    }
    std::string state = NodeStateName(n.state());
    if (n.state() == v1::NODE_STATE_LOST && !n.lost_reason().empty()) {
      absl::StrAppend(&state, " (", n.lost_reason(), ")");
    }
    rows.push_back({n.node_id(), n.addr(), state, absl::StrCat(n.slots()),
                    absl::StrCat(n.free_slots()),
                    n.jobs().empty() ? "-" : absl::StrJoin(n.jobs(), ","),
                    labels.empty() ? "-" : absl::StrJoin(labels, ",")});
  }
  return Table(rows);
}

}  // namespace elastrun::launcher
