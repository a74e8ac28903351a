#include "launcher/cli/format.h"

#include <string.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "launcher/protocol/failure.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {
namespace {

bool IsSet(const google::protobuf::Timestamp& t) {
  return t.seconds() != 0 || t.nanos() != 0;
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
      // An older service, or one just restarted, gives no reason.
      return absl::StrCat("queued: ", s.pending_reason().empty()
                                          ? "waiting for nodes with free slots"
                                          : s.pending_reason());
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

// "JOB_STATE_" for JobState, whose zero value is JOB_STATE_UNSPECIFIED;
// "" for an enum without such a value (its names are kept whole).
std::string EnumPrefix(const google::protobuf::EnumDescriptor& e) {
  constexpr absl::string_view kUnspecified = "UNSPECIFIED";
  const std::string& zero = e.value(0)->name();
  if (!absl::EndsWith(zero, kUnspecified)) return "";
  return zero.substr(0, zero.size() - kUnspecified.size());
}

void Simplify(const google::protobuf::Descriptor& d, Json& j);

// One value of field `f` (an element, for a repeated field).
Json SimplifyValue(const google::protobuf::FieldDescriptor& f, Json v) {
  using google::protobuf::FieldDescriptor;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_ENUM:
      if (v.is_string()) {
        const std::string name = v.get<std::string>();
        const std::string prefix = EnumPrefix(*f.enum_type());
        if (!prefix.empty() && absl::StartsWith(name, prefix)) return name.substr(prefix.size());
      }
      return v;
    case FieldDescriptor::CPPTYPE_INT64:
      if (v.is_string()) return std::stoll(v.get<std::string>());
      return v;
    case FieldDescriptor::CPPTYPE_UINT64:
      if (v.is_string()) return std::stoull(v.get<std::string>());
      return v;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (f.message_type()->full_name() == "google.protobuf.Timestamp") {
        // A time set to the epoch is a time nobody set.
        if (v == "1970-01-01T00:00:00Z") return nullptr;
        return v;
      }
      if (absl::StartsWith(f.message_type()->full_name(), "google.protobuf.")) return v;
      Simplify(*f.message_type(), v);
      return v;
    default:
      return v;
  }
}

// Rewrites the printer's object `j` of message type `d` in place.
void Simplify(const google::protobuf::Descriptor& d, Json& j) {
  Json out = Json::object();
  for (int i = 0; i < d.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& f = *d.field(i);
    auto it = j.find(f.name());
    if (it == j.end()) {
      // The printer leaves out unset messages; the other fields are there.
      out[f.name()] = f.is_repeated() ? (f.is_map() ? Json::object() : Json::array())
                                      : Json(nullptr);
      continue;
    }
    Json& v = *it;
    if (f.is_map()) {
      const google::protobuf::FieldDescriptor& value = *f.message_type()->map_value();
      for (auto& [key, entry] : v.items()) entry = SimplifyValue(value, entry);
    } else if (f.is_repeated()) {
      for (Json& e : v) e = SimplifyValue(f, e);
    } else {
      v = SimplifyValue(f, v);
    }
    out[f.name()] = std::move(v);
  }
  j = std::move(out);
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

Json ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  if (auto st = google::protobuf::util::MessageToJsonString(message, &text, options);
      !st.ok()) {
    // Only an Any of an unknown type fails, and these protos have none.
    std::fprintf(stderr, "elastrun: cannot print %s as JSON: %s\n",
                 message.GetTypeName().c_str(), st.ToString().c_str());
    std::abort();
  }
  Json j = Json::parse(text);
  Simplify(*message.GetDescriptor(), j);
  return j;
}

std::string FormatFailure(const v1::WorkerFailure& f) {
  std::string out = absl::StrFormat("node %s rank %d (local %d), round %d: ", f.node_id(),
                                    f.rank(), f.local_rank(), f.round());
  // A hang is its own cause: how the stopped worker then died is not.
  if (f.hung()) return absl::StrCat(out, f.message());
  if (f.signal() != 0) {
    absl::StrAppend(&out, "killed by signal ", SignalName(f.signal()));
  } else {
    absl::StrAppend(&out, "exit code ", f.exit_code());
  }
  if (!f.message().empty()) absl::StrAppend(&out, ": ", f.message());
  return out;
}

std::string FormatRootCauseBlock(const v1::WorkerFailure& f, const std::string& attempt_dir) {
  return FormatRootCause(rendezvous::FromProto(f), f.node_id(), attempt_dir);
}

std::string FormatJobLine(const v1::JobStatus& s) {
  std::string out =
      absl::StrFormat("%s %s (round %d, world size %d, %d restart%s)", s.job_id(),
                      JobStateName(s.state()), s.round(), s.world_size(), s.restarts(),
                      s.restarts() == 1 ? "" : "s");
  if (!s.finish_reason().empty() && s.state() != v1::JOB_STATE_SUCCEEDED) {
    absl::StrAppend(&out, ": ", s.finish_reason());
  }
  if (!s.pending_reason().empty()) absl::StrAppend(&out, ": ", s.pending_reason());
  if (s.state() == v1::JOB_STATE_FAILED && s.has_root_cause()) {
    absl::StrAppend(&out, "; root cause: ", FormatFailure(s.root_cause()));
  }
  return out;
}

namespace {

// "alice (uid 1000)", or "-" for a job without an owner (submitted with
// the token and no stated owner, or before owners were kept).
std::string OwnerText(const v1::JobSpec& spec, bool with_uid) {
  if (!spec.has_owner()) return "-";
  const std::string name =
      spec.owner().user().empty() ? absl::StrCat("uid", spec.owner().uid()) : spec.owner().user();
  return with_uid ? absl::StrFormat("%s (uid %d)", name, spec.owner().uid()) : name;
}

}  // namespace

std::string FormatJobStatus(const v1::JobStatus& s) {
  std::string state = JobStateName(s.state());
  if (const std::string phase = PhaseText(s); !phase.empty()) {
    absl::StrAppend(&state, " (", phase, ")");
  }
  std::vector<std::vector<std::string>> rows = {
      {"job:", s.job_id()},
      {"state:", state},
      {"owner:", OwnerText(s.spec(), /*with_uid=*/true)},
      {"round:", absl::StrCat(s.round())},
      {"world size:", absl::StrCat(s.world_size())},
      {"nodes:",
       absl::StrFormat("%s x %d worker%s", Nnodes(s.spec()), s.spec().nproc_per_node(),
                       s.spec().nproc_per_node() == 1 ? "" : "s")},
      {"restarts:", absl::StrFormat("%d of %d", s.restarts(), s.spec().max_restarts())},
      {"command:", absl::StrJoin(s.spec().argv(), " ")},
      {"submitted:", TimeText(s.submit_time())},
  };
  if (!s.spec().run_id().empty())
    rows.insert(rows.begin() + 1, {"run id:", s.spec().run_id()});
  if (!s.spec().pool().empty()) rows.push_back({"pool:", s.spec().pool()});
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
      {"JOB", "OWNER", "STATE", "ROUND", "WORLD", "RESTARTS", "NNODES", "NPROC", "SUBMITTED"}};
  for (const v1::JobStatus& s : r.jobs()) {
    rows.push_back({s.job_id(), OwnerText(s.spec(), /*with_uid=*/false),
                    JobStateName(s.state()), absl::StrCat(s.round()),
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
    std::vector<std::string> notes;
    if (n.state() == v1::NODE_STATE_LOST && !n.lost_reason().empty()) {
      notes.push_back(n.lost_reason());
    }
    if (n.draining()) notes.push_back("draining");
    if (!n.pool().empty()) notes.push_back(absl::StrCat("pool ", n.pool()));
    if (!notes.empty()) absl::StrAppend(&state, " (", absl::StrJoin(notes, "; "), ")");
    rows.push_back({n.node_id(), n.addr(), state, absl::StrCat(n.slots()),
                    absl::StrCat(n.free_slots()),
                    n.jobs().empty() ? "-" : absl::StrJoin(n.jobs(), ","),
                    labels.empty() ? "-" : absl::StrJoin(labels, ",")});
  }
  return Table(rows);
}

std::string FormatEvents(const v1::EventsResponse& r) {
  if (r.events().empty()) return "no events\n";
  std::vector<std::vector<std::string>> rows = {
      {"TIME", "KIND", "ROUND", "NODE", "RANK", "MESSAGE"}};
  for (const v1::JobEvent& e : r.events()) {
    const absl::Time t = absl::FromUnixSeconds(e.time().seconds()) +
                         absl::Nanoseconds(e.time().nanos());
    rows.push_back({absl::FormatTime("%Y-%m-%d %H:%M:%E3S", t, absl::UTCTimeZone()),
                    e.kind(), absl::StrCat(e.round()),
                    e.node_id().empty() ? "-" : e.node_id(),
                    e.rank() < 0 ? "-" : absl::StrCat(e.rank()),
                    e.message().empty() ? "-" : e.message()});
  }
  return Table(rows);
}

std::string RankPrefixer::Prefix(int rank, std::string_view stream,
                                 std::string_view data) {
  if (data.empty()) return "";
  Key key(rank, std::string(stream));
  std::string out;
  if (open_ && *open_ != key) {
    out += '\n';  // another's half line must not run into this output
    cut_.insert(*std::move(open_));
    open_.reset();
  }
  // Continuing its own half line: the first piece gets no prefix.
  bool mid_line = open_.has_value();
  // Its half line was ended for it: a bare '\n' finishing it is printed already.
  if (cut_.erase(key) > 0 && data.front() == '\n') data.remove_prefix(1);
  const std::string prefix = absl::StrCat("[rank", rank, "]:");
  size_t pos = 0;
  while (pos < data.size()) {
    if (!mid_line) out += prefix;
    const size_t nl = data.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? data.size() : nl + 1;
    out.append(data.substr(pos, end - pos));
    mid_line = nl == std::string_view::npos;
    pos = end;
  }
  if (mid_line) {
    open_ = std::move(key);
  } else {
    open_.reset();
  }
  return out;
}

}  // namespace elastrun::launcher
