#include "rendezvous/job_spec.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "rendezvous/codec.h"

namespace elastrun::rendezvous {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat("spec.%s: %s", field, why));
}

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
         c == '-';
}

// OK for an empty `value` or one of [A-Za-z0-9._-]{1,64}; else
// InvalidArgument naming `field`.
absl::Status CheckName(absl::string_view field, const std::string& value) {
  if (value.size() > static_cast<size_t>(kMaxJobNameLength)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d characters; at most %d", field, value.size(), kMaxJobNameLength));
  }
  for (char c : value) {
    if (!IsNameChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: \"%s\" has a character outside [A-Za-z0-9._-]", field,
                          absl::CHexEscape(value)));
    }
  }
  return absl::OkStatus();
}

bool IsEnvName(const std::string& name) {
  if (name.empty()) return false;
  if (absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Unset is fine (a default applies); otherwise 0 <= d <= max.
absl::Status CheckDuration(const google::protobuf::Duration& d, bool set,
                           absl::string_view field, absl::Duration max) {
  if (!set) return absl::OkStatus();
  if (d.seconds() < 0 || d.nanos() < 0 || d.nanos() >= 1000000000) {
    return Bad(field, "must be a non-negative duration");
  }
  if (FromProto(d) > max) {
    return Bad(field, absl::StrFormat("%s is too long (at most %s)",
                                      absl::FormatDuration(FromProto(d)),
                                      absl::FormatDuration(max)));
  }
  return absl::OkStatus();
}

// The job's name and shape: nodes, workers per node.
absl::Status CheckShape(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(CheckName("spec.name", spec.name()));
  if (spec.min_nodes() < 1 || spec.min_nodes() > kMaxNodes) {
    return Bad("min_nodes", absl::StrFormat("%d is out of range; nnodes MIN must be in "
                                            "1..%d",
                                            spec.min_nodes(), kMaxNodes));
  }
  if (spec.max_nodes() < 1 || spec.max_nodes() > kMaxNodes) {
    return Bad("max_nodes", absl::StrFormat("%d is out of range; nnodes MAX must be in "
                                            "1..%d",
                                            spec.max_nodes(), kMaxNodes));
  }
  if (spec.min_nodes() > spec.max_nodes()) {
    return Bad("min_nodes", absl::StrFormat("nnodes MIN (%d) is greater than MAX (%d)",
                                            spec.min_nodes(), spec.max_nodes()));
  }
  if (spec.nproc_per_node() < 1 || spec.nproc_per_node() > kMaxLocalWorldSize) {
    return Bad("nproc_per_node", absl::StrFormat("%d is out of range; must be in 1..%d",
                                                 spec.nproc_per_node(),
                                                 kMaxLocalWorldSize));
  }
  return absl::OkStatus();
}

// What runs: restarts, the command, its environment and folder.
absl::Status CheckCommand(const v1::JobSpec& spec) {
  if (spec.max_restarts() < 0) {
    return Bad("max_restarts",
               absl::StrFormat("%d is negative; must be >= 0", spec.max_restarts()));
  }
  if (spec.argv().empty()) {
    return Bad("argv", "no command: give the program to run and its arguments");
  }
  if (spec.argv(0).empty()) return Bad("argv[0]", "the program name is empty");
  if (spec.argv_size() > kMaxArgs) {
    return Bad("argv", absl::StrFormat("%d arguments; at most %d", spec.argv_size(),
                                       kMaxArgs));
  }
  // exec takes C strings: a NUL would cut the value short on the node.
  constexpr absl::string_view kNul = "contains a NUL byte, which exec would cut it at";
  // What exec copies: every string with its NUL and its pointer.
  size_t exec_bytes = 0;
  for (int i = 0; i < spec.argv_size(); ++i) {
    if (spec.argv(i).size() > kMaxSpecStringLength) {
      return Bad(absl::StrFormat("argv[%d]", i), "too long");
    }
    if (spec.argv(i).find('\0') != std::string::npos) {
      return Bad(absl::StrFormat("argv[%d]", i), kNul);
    }
    exec_bytes += spec.argv(i).size() + 1 + sizeof(char*);
  }
  if (spec.env_size() > kMaxEnv) {
    return Bad("env", absl::StrFormat("%d variables; at most %d", spec.env_size(), kMaxEnv));
  }
  for (const auto& [name, value] : spec.env()) {
    if (!IsEnvName(name)) {
      return Bad("env", absl::StrFormat("\"%s\" is not a variable name "
                                        "([A-Za-z_][A-Za-z0-9_]*)",
                                        absl::CHexEscape(name)));
    }
    if (value.size() > kMaxSpecStringLength) {
      return Bad(absl::StrCat("env.", name), "value too long");
    }
    if (value.find('\0') != std::string::npos) return Bad(absl::StrCat("env.", name), kNul);
    exec_bytes += name.size() + value.size() + 2 + sizeof(char*);
  }
  if (exec_bytes > kMaxExecBytes) {
    return Bad("argv", absl::StrFormat("%d bytes of arguments and environment; a worker "
                                       "could never start (exec takes at most %d here, "
                                       "with the daemon's own variables)",
                                       exec_bytes, kMaxExecBytes));
  }
  if (spec.working_dir().size() > kMaxSpecStringLength) {
    return Bad("working_dir", "too long");
  }
  if (spec.working_dir().find('\0') != std::string::npos) return Bad("working_dir", kNul);
  if (spec.run_id().size() > 256) {
    return Bad("run_id",
               absl::StrFormat("%d characters; at most 256", spec.run_id().size()));
  }
  for (unsigned char c : spec.run_id()) {
    if (c < 0x20 || c == 0x7f) {
      return Bad("run_id", absl::StrFormat("\"%s\" has a control character",
                                           absl::CHexEscape(spec.run_id())));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTimeouts(const v1::JobSpec& spec) {
  const absl::Duration kWeek = absl::Hours(24 * 7);
  if (absl::Status st = CheckDuration(spec.last_call_timeout(),
                                      spec.has_last_call_timeout(), "last_call_timeout",
                                      kWeek);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckDuration(spec.join_timeout(), spec.has_join_timeout(),
                                      "join_timeout", kWeek);
      !st.ok()) {
    return st;
  }
  if (spec.has_join_timeout() && FromProto(spec.join_timeout()) <= absl::ZeroDuration()) {
    return Bad("join_timeout", "must be greater than 0");
  }
  // Negative turns hang detection off; otherwise a week at most.
  if (const google::protobuf::Duration& h = spec.hang_timeout();
      spec.has_hang_timeout() &&
      ((h.seconds() > 0 && h.nanos() < 0) || (h.seconds() < 0 && h.nanos() > 0) ||
       h.nanos() <= -1000000000 || h.nanos() >= 1000000000 || FromProto(h) > kWeek)) {
    return Bad("hang_timeout", absl::StrFormat("%s is not a duration of at most %s (negative: "
                                               "off)",
                                               absl::FormatDuration(FromProto(h)),
                                               absl::FormatDuration(kWeek)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRequestId(const std::string& request_id) {
  return CheckName("request_id", request_id);
}

absl::Status ValidatePool(const std::string& pool) { return CheckName("pool", pool); }

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(CheckShape(spec));
  RETURN_IF_ERROR(CheckCommand(spec));
  RETURN_IF_ERROR(CheckName("spec.pool", spec.pool()));
  return CheckTimeouts(spec);
}

v1::JobSpec WithDefaults(v1::JobSpec spec) {
  if (spec.name().empty()) spec.set_name("job");
  if (!spec.has_last_call_timeout()) {
    *spec.mutable_last_call_timeout() = ToProto(kDefaultLastCallTimeout);
  }
  if (!spec.has_join_timeout()) *spec.mutable_join_timeout() = ToProto(kDefaultJoinTimeout);
  return spec;
}

RoundConfig RoundConfigFromSpec(const v1::JobSpec& spec) {
  const v1::JobSpec s = WithDefaults(spec);
  RoundConfig c;
  c.min_nodes = s.min_nodes();
  c.max_nodes = s.max_nodes();
  c.max_restarts = s.max_restarts();
  c.last_call_timeout = FromProto(s.last_call_timeout());
  c.join_timeout = FromProto(s.join_timeout());
  return c;
}

}  // namespace elastrun::rendezvous
