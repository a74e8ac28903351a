#include "launcher/cli/spec.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/config/config.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/worker_env.h"
#include "google/protobuf/util/time_util.h"
#include "launcher/agent/liveness.h"
#include "rendezvous/types.h"

namespace elastrun::launcher {
namespace {

using config::Node;
using config::Schema;
using config::Type;
using google::protobuf::util::TimeUtil;

// The service's bounds (rendezvous/job_spec.h), repeated here for messages
// that name the job file's own fields. The service remains the authority.
constexpr int kMaxNameLength = 64;
constexpr absl::Duration kMaxTimeout = absl::Hours(24 * 7);

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
         c == '-';
}

bool IsEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Each Check* returns a message without the "where" (a flag name or a
// file position), which the caller adds.
absl::Status CheckName(absl::string_view name) {
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d characters; at most %d", name.size(), kMaxNameLength));
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "\"%s\" has a character outside [A-Za-z0-9._-]", absl::CHexEscape(name)));
    }
  }
  return absl::OkStatus();
}

// Unlike the Check* above, these two name `what` in their messages, as
// ParseRange and ParseDuration do.
absl::StatusOr<IntRange> CheckNnodes(absl::string_view text, absl::string_view what) {
  absl::StatusOr<IntRange> r = ParseRange(text, what);
  if (!r.ok()) return r.status();
  if (r->max > rendezvous::kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: MAX %d is above %d", what, r->max, rendezvous::kMaxNodes));
  }
  return r;
}

absl::Status CheckNproc(int64_t n) {
  if (n < 1 || n > rendezvous::kMaxLocalWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d is out of range; workers per node must be in 1..%d", n,
                        rendezvous::kMaxLocalWorldSize));
  }
  return absl::OkStatus();
}

absl::Status CheckMaxRestarts(int64_t n) {
  if (n < 0 || n > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d must be in 0..%d", n, INT32_MAX));
  }
  return absl::OkStatus();
}

absl::StatusOr<google::protobuf::Duration> CheckTimeout(absl::string_view text,
                                                        absl::string_view what,
                                                        bool positive) {
  ASSIGN_OR_RETURN(absl::Duration d, ParseDuration(text, what));
  if (d > kMaxTimeout) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is too long (at most %s)",
                                                      what, absl::FormatDuration(d),
                                                      absl::FormatDuration(kMaxTimeout)));
  }
  if (positive && d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": must be greater than 0"));
  }
  return TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(d));
}

// A hang timeout (HangTimeout::Parse) of at most kMaxTimeout, in its wire
// form.
absl::StatusOr<google::protobuf::Duration> CheckHangTimeout(absl::string_view text,
                                                            absl::string_view what) {
  ASSIGN_OR_RETURN(launcher::HangTimeout t, launcher::HangTimeout::Parse(text, what));
  if (t.fixed() > kMaxTimeout) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is too long (at most %s)", what, absl::FormatDuration(t.fixed()),
        absl::FormatDuration(kMaxTimeout)));
  }
  return TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(t.ToWire()));
}

// "FILE:LINE:COL: FIELD: why" for a value of the job file.
absl::Status At(const Node& value, absl::string_view field, const absl::Status& why) {
  return config::ErrorAt(value.mark(), field, why.message());
}

absl::Status Flag(absl::string_view flag, const absl::Status& why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why.message()));
}

absl::StatusOr<v1::JobSpec> SpecFromNode(const Node& raw) {
  ASSIGN_OR_RETURN(Node n, JobSpecSchema().Apply(raw, ""));
  v1::JobSpec spec;

  const Node& name = *n.Find("name");
  if (absl::Status st = CheckName(name.ScalarText()); !st.ok())
    return At(name, "name", st);
  spec.set_name(name.ScalarText());

  const Node& nnodes = *n.Find("nnodes");
  absl::StatusOr<IntRange> range = CheckNnodes(nnodes.ScalarText(), "nnodes");
  if (!range.ok()) return config::ErrorAt(nnodes.mark(), "", range.status().message());
  spec.set_min_nodes(range->min);
  spec.set_max_nodes(range->max);

  const Node& nproc = *n.Find("nproc_per_node");
  if (absl::Status st = CheckNproc(nproc.as_int()); !st.ok()) {
    return At(nproc, "nproc_per_node", st);
  }
  spec.set_nproc_per_node(static_cast<int>(nproc.as_int()));

  const Node& restarts = *n.Find("max_restarts");
  if (absl::Status st = CheckMaxRestarts(restarts.as_int()); !st.ok()) {
    return At(restarts, "max_restarts", st);
  }
  spec.set_max_restarts(static_cast<int>(restarts.as_int()));

  const Node& command = *n.Find("command");
  if (command.items().empty()) {
    return At(
        command, "command",
        absl::InvalidArgumentError("no command: list the program and its arguments"));
  }
  for (const Node& word : command.items()) spec.add_argv(word.ScalarText());
  if (spec.argv(0).empty()) {
    return At(command.items()[0], "command[0]",
              absl::InvalidArgumentError("the program name is empty"));
  }

  for (const config::MapEntry& e : n.Find("env")->entries()) {
    if (!IsEnvName(e.key)) {
      return config::ErrorAt(
          e.key_mark, config::JoinPath("env", e.key),
          absl::StrFormat("\"%s\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                          absl::CHexEscape(e.key)));
    }
    (*spec.mutable_env())[e.key] = e.value.ScalarText();
  }

  spec.set_working_dir(n.Find("working_dir")->ScalarText());
  spec.set_run_id(n.Find("run_id")->ScalarText());
  const Node& pool = *n.Find("pool");
  if (absl::Status st = CheckName(pool.ScalarText()); !st.ok())
    return At(pool, "pool", st);
  spec.set_pool(pool.ScalarText());
  spec.set_wait_for_nodes(n.Find("wait_for_nodes")->as_bool());

  for (const char* field : {"last_call_timeout", "join_timeout"}) {
    const Node& value = *n.Find(field);
    if (value.is_null()) continue;
    absl::StatusOr<google::protobuf::Duration> d =
        CheckTimeout(value.ScalarText(), field, std::string(field) == "join_timeout");
    if (!d.ok()) {
      // CheckTimeout's message starts with the field already.
      return config::ErrorAt(value.mark(), "", d.status().message());
    }
    *(std::string(field) == "join_timeout" ? spec.mutable_join_timeout()
                                           : spec.mutable_last_call_timeout()) = *d;
  }
  if (const Node& value = *n.Find("hang_timeout"); !value.is_null()) {
    absl::StatusOr<google::protobuf::Duration> d =
        CheckHangTimeout(value.ScalarText(), "hang_timeout");
    if (!d.ok()) return config::ErrorAt(value.mark(), "", d.status().message());
    *spec.mutable_hang_timeout() = *d;
  }
  return spec;
}

}  // namespace

const Schema& JobSpecSchema() {
  static const Schema* const schema = new Schema(
      Schema("JobSpec")
          .Optional(
              "name", Type::String(), "''",
              "Job name, [A-Za-z0-9._-]{0,64}; the job id is NAME-N ('job' if empty).")
          .Optional("nnodes", Type::String(), "'1'", "Node count N or range MIN:MAX.")
          .Optional("nproc_per_node", Type::Int(), "1", "Workers per node (1 slot each).")
          .Optional("max_restarts", Type::Int(), "0",
                    "Failure-caused restarts allowed for the whole job.")
          .Required("command", Type::List(Type::String()),
                    "The worker command: program and arguments.")
          .Optional("env", Type::Map(Type::String()), "{}",
                    "Extra environment for every worker.")
          .Optional("working_dir", Type::String(), "''",
                    "Worker's working directory on the node; empty: the daemon's.")
          .Optional("run_id", Type::String(), "''",
                    "The workers' TORCHELASTIC_RUN_ID, what a training resumes by; "
                    "empty: JOB_ID@CLUSTER, unique to the job. Give an earlier job's "
                    "to continue its run.")
          .Optional("pool", Type::String(), "''",
                    "Run only on nodes of this pool (elastrund --pool), "
                    "[A-Za-z0-9._-]{0,64}; empty: the default pool.")
          .Optional("last_call_timeout", Type::String().OrNull(), "null",
                    "After MIN nodes joined a round, wait this long for more (1s).")
          .Optional("join_timeout", Type::String().OrNull(), "null",
                    "A round still below MIN this long fails the job (600s).")
          .Optional("hang_timeout", Type::String().OrNull(), "null",
                    "A rank without progress this long is hung (a restart); "
                    "off, or null: derived (10x the median step, at least 5m).")
          .Optional("wait_for_nodes", Type::Bool(), "false",
                    "Queue the job even if no registered node could hold it yet."));
  return *schema;
}

namespace {

// LoadConfig's steps (file, overrides, interpolation) with the schema's
// defaults added in between, so that `nnodes=2` overrides a key the file
// leaves to its default instead of failing with "no key 'nnodes'".
absl::StatusOr<v1::JobSpec> Load(const std::string& path,
                                 const std::vector<std::string>& overrides,
                                 const config::LoadOptions& options) {
  ASSIGN_OR_RETURN(Node root, config::LoadFile(path, options));
  if (root.is_map()) {
    for (const config::Field& f : JobSpecSchema().fields()) {
      if (!f.required && root.Find(f.name) == nullptr) root.Set(f.name, f.default_value);
    }
  }
  RETURN_IF_ERROR(config::ApplyOverrides(overrides, &root, options.limits));
  RETURN_IF_ERROR(config::ResolveInterpolations(&root, options.limits));
  return SpecFromNode(root);
}

}  // namespace

absl::StatusOr<v1::JobSpec> JobSpecFromYaml(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  return Load(path, overrides, config::LoadOptions());
}

absl::StatusOr<v1::JobSpec> JobSpecFromYamlString(
    const std::string& text, const std::string& name,
    const std::vector<std::string>& overrides) {
  config::LoadOptions options;
  // LoadFile asks for the normalized path; `_base_` files come from disk.
  const std::string key = std::filesystem::path(name).lexically_normal().string();
  options.read_file = [&](const std::string& path) -> absl::StatusOr<std::string> {
    if (path == key) return text;
    return config::ReadFileFromDisk(path, options.limits.max_file_bytes);
  };
  return Load(name, overrides, options);
}

v1::JobSpec DefaultJobSpec() {
  v1::JobSpec spec;
  spec.set_min_nodes(1);
  spec.set_max_nodes(1);
  spec.set_nproc_per_node(1);
  spec.set_max_restarts(0);
  return spec;
}

absl::StatusOr<v1::JobSpec> ApplySpecFlags(const SpecFlags& flags, v1::JobSpec spec,
                                           bool from_file) {
  if (!flags.name.empty()) {
    const std::string& name = flags.name.back();
    if (absl::Status st = CheckName(name); !st.ok()) return Flag("--name", st);
    spec.set_name(name);
  }
  if (!flags.nnodes.empty()) {
    absl::StatusOr<IntRange> r = CheckNnodes(flags.nnodes.back(), "--nnodes");
    if (!r.ok()) return r.status();
    spec.set_min_nodes(r->min);
    spec.set_max_nodes(r->max);
  }
  if (!flags.nproc_per_node.empty()) {
    absl::StatusOr<int64_t> n = ParseInt(flags.nproc_per_node.back(), "--nproc-per-node");
    if (!n.ok()) return n.status();
    if (absl::Status st = CheckNproc(*n); !st.ok()) return Flag("--nproc-per-node", st);
    spec.set_nproc_per_node(static_cast<int>(*n));
  }
  if (!flags.max_restarts.empty()) {
    absl::StatusOr<int64_t> n = ParseInt(flags.max_restarts.back(), "--max-restarts");
    if (!n.ok()) return n.status();
    if (absl::Status st = CheckMaxRestarts(*n); !st.ok())
      return Flag("--max-restarts", st);
    spec.set_max_restarts(static_cast<int>(*n));
  }
  for (const std::string& kv : flags.env) {
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    if (eq == std::string::npos || !IsEnvName(key)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--env: \"%s\" is not NAME=VALUE with NAME in [A-Za-z_][A-Za-z0-9_]*",
          absl::CHexEscape(kv)));
    }
    (*spec.mutable_env())[key] = kv.substr(eq + 1);
  }
  if (!flags.working_dir.empty()) spec.set_working_dir(flags.working_dir.back());
  if (!flags.run_id.empty()) spec.set_run_id(flags.run_id.back());
  if (!flags.pool.empty()) {
    if (absl::Status st = CheckName(flags.pool.back()); !st.ok())
      return Flag("--pool", st);
    spec.set_pool(flags.pool.back());
  }
  if (!flags.last_call_timeout.empty()) {
    absl::StatusOr<google::protobuf::Duration> d =
        CheckTimeout(flags.last_call_timeout.back(), "--last-call-timeout", false);
    if (!d.ok()) return d.status();
    *spec.mutable_last_call_timeout() = *d;
  }
  if (!flags.join_timeout.empty()) {
    absl::StatusOr<google::protobuf::Duration> d =
        CheckTimeout(flags.join_timeout.back(), "--join-timeout", true);
    if (!d.ok()) return d.status();
    *spec.mutable_join_timeout() = *d;
  }
  if (!flags.hang_timeout.empty()) {
    absl::StatusOr<google::protobuf::Duration> d =
        CheckHangTimeout(flags.hang_timeout.back(), "--hang-timeout");
    if (!d.ok()) return d.status();
    *spec.mutable_hang_timeout() = *d;
  }
  if (flags.wait_for_nodes) spec.set_wait_for_nodes(true);
  if (!flags.program.empty()) {
    if (from_file) {
      return absl::InvalidArgumentError(
          "give the command in the job file or after \"--\", not both");
    }
    spec.clear_argv();
    for (const std::string& word : flags.program) spec.add_argv(word);
  }
  if (spec.argv().empty()) {
    return absl::InvalidArgumentError(
        "no command: give a job file or the program after \"--\" "
        "(elastrun submit [flags] -- PROGRAM ARGS)");
  }
  if (spec.argv(0).empty()) {
    return absl::InvalidArgumentError(
        "the program name (the word after \"--\") is empty");
  }
  return spec;
}

absl::Status ApplyExport(const std::string& value,
                         const std::vector<std::string>& environment, v1::JobSpec* spec) {
  std::map<std::string, std::string> submitter;  // the submitter's, by name
  for (const std::string& e : environment) {
    const size_t eq = e.find('=');
    if (eq != std::string::npos) submitter.emplace(e.substr(0, eq), e.substr(eq + 1));
  }
  std::map<std::string, std::string> exported;
  bool all = value.empty();
  if (value == "NONE") return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    const std::string name(item.substr(0, eq));
    if (name == "ALL" && eq == absl::string_view::npos) {
      all = true;
      continue;
    }
    if (!IsEnvName(name) || name == "NONE") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--export: \"%s\" is not ALL, NONE (alone), VAR or VAR=VALUE with VAR in "
          "[A-Za-z_][A-Za-z0-9_]*",
          absl::CHexEscape(item)));
    }
    if (eq != absl::string_view::npos) {
      exported[name] = std::string(item.substr(eq + 1));
    } else if (auto it = submitter.find(name); it != submitter.end()) {
      exported[name] = it->second;
    }
  }
  if (all) {
    for (const auto& [name, v] : submitter) {
      if (IsEnvName(name) && !elastrun::env::IsLauncherSetting(name)) exported.emplace(name, v);
    }
    spec->set_replace_env(true);
  }
  for (const auto& [name, v] : spec->env()) exported[name] = v;  // the spec's own win
  spec->mutable_env()->clear();
  spec->mutable_env()->insert(exported.begin(), exported.end());
  return absl::OkStatus();
}

}  // namespace elastrun::launcher
