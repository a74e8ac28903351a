#include "common/config/emitter.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/config/loader.h"

namespace elastrun::config {
namespace {

// True if `text` can be written unquoted and reads back as the same text.
// Deliberately conservative: anything with YAML indicators is quoted.
bool PlainSafe(const std::string& text) {
  if (text.empty()) return false;
  if (text.front() == ' ' || text.back() == ' ') return false;
  static constexpr absl::string_view kBadFirst = "-?:,[]{}#&*!|>'\"%@`\\=~";
  if (kBadFirst.find(text.front()) != absl::string_view::npos) return false;
  // A whitelist: yaml-cpp 0.7 misreads some characters that YAML allows
  // inside plain scalars (`a?b` in a flow list is "unknown token").
  static constexpr absl::string_view kSafe = "_-./+ ()$\\~=;^<";
  for (char c : text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        kSafe.find(c) == absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

std::string DoubleQuoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", u);
          out += buf;
        } else {
          out += c;  // Bytes >= 0x80 pass through: YAML text is UTF-8.
        }
    }
  }
  out += "\"";
  return out;
}

// `text` as a YAML string that our loader reads back as a string holding
// exactly `text` (kString) or the same interpolation (kInterpolation).
std::string StringOut(const std::string& text, Node::Kind kind) {
  if (PlainSafe(text)) {
    absl::StatusOr<Node> back = ResolvePlainScalar(text, Mark{});
    if (back.ok() && back->kind() == kind) return text;
  }
  return DoubleQuoted(text);
}

std::string KeyOut(const std::string& key) {
  // Keys are never interpolated or typed, but a null-looking key would not
  // read back as a key.
  if (PlainSafe(key)) {
    absl::StatusOr<Node> back = ResolvePlainScalar(key, Mark{});
    if (back.ok() && !back->is_null()) return key;
  }
  return DoubleQuoted(key);
}

std::string ScalarOut(const Node& node) {
  switch (node.kind()) {
    case Node::Kind::kString:
      // A literal "${" must not read back as a reference.
      return StringOut(absl::StrReplaceAll(node.as_string(), {{"${", "\\${"}}),
                       Node::Kind::kString);
    case Node::Kind::kInterpolation:
      return StringOut(node.as_string(), Node::Kind::kInterpolation);
    default:
      return node.ScalarText();
  }
}

bool AllScalars(const Node& list) {
  for (const Node& item : list.items()) {
    if (!item.is_scalar()) return false;
  }
  return true;
}

void EmitMap(const Node& map, int indent, std::string* out);
void EmitList(const Node& list, int indent, std::string* out);

// Writes what follows "key:" (or "-") for `value`, whose children indent
// to `indent`.
void EmitAfterIndicator(const Node& value, int indent, std::string* out) {
  if (value.is_scalar() || (value.entries().empty() && value.items().empty()) ||
      (value.is_list() && AllScalars(value))) {
    absl::StrAppend(out, " ", ToFlowYaml(value), "\n");
    return;
  }
  out->push_back('\n');
  if (value.is_map()) {
    EmitMap(value, indent, out);
  } else {
    EmitList(value, indent, out);
  }
}

void EmitMap(const Node& map, int indent, std::string* out) {
  for (const MapEntry& e : map.entries()) {
    absl::StrAppend(out, std::string(indent, ' '), KeyOut(e.key), ":");
    EmitAfterIndicator(e.value, indent + 2, out);
  }
}

void EmitList(const Node& list, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  for (const Node& item : list.items()) {
    const bool block = item.is_map() ? !item.entries().empty()
                                     : item.is_list() && !AllScalars(item) &&
                                           !item.items().empty();
    if (!block) {
      absl::StrAppend(out, pad, "-");
      EmitAfterIndicator(item, indent + 2, out);
      continue;
    }
    // A nested block starts on the dash's line: "- key: v" / "  key2: v".
    std::string body;
    if (item.is_map()) {
      EmitMap(item, indent + 2, &body);
    } else {
      EmitList(item, indent + 2, &body);
    }
    absl::StrAppend(out, pad, "- ", absl::string_view(body).substr(indent + 2));
  }
}

}  // namespace

std::string ToFlowYaml(const Node& node) {
  if (node.is_list()) {
    std::vector<std::string> items;
    for (const Node& item : node.items()) items.push_back(ToFlowYaml(item));
    return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
  }
  if (node.is_map()) {
    std::vector<std::string> entries;
    for (const MapEntry& e : node.entries()) {
      entries.push_back(absl::StrCat(KeyOut(e.key), ": ", ToFlowYaml(e.value)));
    }
    return absl::StrCat("{", absl::StrJoin(entries, ", "), "}");
  }
  return ScalarOut(node);
}

std::string ToYaml(const Node& node) {
  std::string out;
  if (node.is_map() && !node.entries().empty()) {
    EmitMap(node, 0, &out);
  } else if (node.is_list() && !node.items().empty() && !AllScalars(node)) {
    EmitList(node, 0, &out);
  } else {
    absl::StrAppend(&out, ToFlowYaml(node), "\n");
  }
  return out;
}

}  // namespace elastrun::config
