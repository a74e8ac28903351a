#include "common/config/override.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/config/loader.h"
#include "common/config/suggest.h"
#include "common/status_macros.h"

namespace elastrun::config {
namespace {

bool IsKeyChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         c == '-' || c == '/' || c == '@';
}

std::string Label(absl::string_view text, int index) {
  std::string shown(text.substr(0, 60));
  if (text.size() > 60) shown += "...";
  return absl::StrCat("override #", index, " '", shown, "'");
}

bool IsIndex(absl::string_view segment, size_t* index) {
  if (segment.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(segment[0]))) {
    return false;
  }
  return absl::SimpleAtoi(segment, index);
}

// `{` and `}` are flow indicators, so `[${a}, 1]` is not valid YAML. Outside
// quotes, `${` and its `}` are swapped for two private-use characters before
// parsing and swapped back (RestoreReferences) after.
constexpr absl::string_view kOpen = "\xee\x80\x80";   // U+E000
constexpr absl::string_view kClose = "\xee\x80\x81";  // U+E001

std::string HideReferences(absl::string_view value) {
  std::string out;
  char quote = 0;  // The open quote, or 0.
  char prev = 0;   // Last non-space character outside quotes.
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (quote != 0) {
      out += c;
      if (quote == '"' && c == '\\' && i + 1 < value.size()) {
        out += value[++i];
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if ((c == '\'' || c == '"') &&
        (prev == 0 || prev == '[' || prev == '{' || prev == ',' || prev == ':')) {
      quote = c;
      out += c;
      continue;
    }
    if (c == '$' && i + 1 < value.size() && value[i + 1] == '{') {
      const size_t close = value.find('}', i + 2);
      if (close != absl::string_view::npos) {
        absl::StrAppend(&out, kOpen, value.substr(i + 2, close - i - 2), kClose);
        i = close;
        prev = '}';
        continue;
      }
    }
    out += c;
    if (c != ' ') prev = c;
  }
  return out;
}

absl::Status RestoreReferences(Node* node) {
  if (node->kind() == Node::Kind::kString &&
      absl::StrContains(node->as_string(), kOpen)) {
    std::string text = absl::StrReplaceAll(node->as_string(),
                                           {{kOpen, "${"}, {kClose, "}"}});
    ASSIGN_OR_RETURN(*node, Node::FromConfigString(std::move(text), node->mark()));
  }
  for (Node& item : node->mutable_items()) RETURN_IF_ERROR(RestoreReferences(&item));
  for (MapEntry& e : node->mutable_entries()) {
    e.key = absl::StrReplaceAll(e.key, {{kOpen, "${"}, {kClose, "}"}});
    RETURN_IF_ERROR(RestoreReferences(&e.value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Override> ParseOverride(absl::string_view text, int index,
                                       const Limits& limits) {
  Override o;
  o.text = std::string(text);
  o.index = index;
  const std::string label = Label(text, index);
  auto error = [&](size_t column, absl::string_view message) {
    return ErrorAt(Mark{label, 1, static_cast<int>(column) + 1}, "",
                   absl::StrCat(message,
                                "; expected key=value, +key=value, ++key=value "
                                "or ~key"));
  };
  if (static_cast<int64_t>(text.size()) > limits.max_file_bytes) {
    return error(0, absl::StrCat("longer than ", limits.max_file_bytes, " bytes"));
  }
  size_t pos = 0;
  if (absl::StartsWith(text, "~")) {
    o.op = Override::Op::kDelete;
    pos = 1;
  } else if (absl::StartsWith(text, "++")) {
    o.op = Override::Op::kUpsert;
    pos = 2;
  } else if (absl::StartsWith(text, "+")) {
    o.op = Override::Op::kAdd;
    pos = 1;
  }
  const size_t eq = text.find('=', pos);
  const size_t key_end = eq == absl::string_view::npos ? text.size() : eq;
  o.key = std::string(text.substr(pos, key_end - pos));
  if (o.key.empty()) return error(pos, "empty key");
  if (static_cast<int>(o.key.size()) > limits.max_key_bytes) {
    return error(pos, absl::StrCat("key longer than ", limits.max_key_bytes, " bytes"));
  }
  for (size_t i = 0; i < o.key.size(); ++i) {
    const char c = o.key[i];
    if (!IsKeyChar(c) && c != '.' && c != '[' && c != ']') {
      return error(pos + i, absl::StrCat("unexpected character '",
                                         absl::CEscape(std::string(1, c)),
                                         "' in key '", o.key, "'"));
    }
  }
  absl::StatusOr<std::vector<std::string>> path = SplitPath(o.key);
  if (!path.ok()) return error(pos, path.status().message());
  o.path = *std::move(path);
  for (const std::string& segment : o.path) {
    if (segment == "_base_") {
      return error(pos, "_base_ cannot be overridden; it is read from files only");
    }
  }
  if (o.op == Override::Op::kDelete) {
    if (eq != absl::string_view::npos) {
      return error(eq, "'~key' deletes a key and takes no value");
    }
    return o;
  }
  if (eq == absl::string_view::npos) return error(text.size(), "missing '='");

  const Mark value_mark{label, 1, static_cast<int>(eq) + 2};
  absl::string_view value = text.substr(eq + 1);
  if (value.empty()) {
    o.value = Node::String("", value_mark);
    return o;
  }
  // Parsed inside "[...]" so that it is read as a flow value (`a: b` is not
  // turned into a block mapping), padded so YAML's columns are the
  // argument's columns.
  std::string wrapped(eq, ' ');
  absl::StrAppend(&wrapped, "[", HideReferences(value), "]");
  ASSIGN_OR_RETURN(Node list, ParseYamlValue(wrapped, label, limits));
  if (!list.is_list() || list.items().size() != 1) {
    return error(eq + 1,
                 "the value must be one YAML value; quote a string holding ',' "
                 "('a,b'), or use [a,b] for a list");
  }
  o.value = std::move(list.mutable_items()[0]);
  RETURN_IF_ERROR(RestoreReferences(&o.value));
  return o;
}

// The override's last segment names item `index` of the list `node`.
absl::Status ApplyToListItem(const Override& o, const Mark& mark, Node* node, size_t index) {
  if (o.op == Override::Op::kAdd) {
    return ErrorAt(mark, o.key, "list item exists; to change it, drop the '+'");
  }
  if (o.op == Override::Op::kDelete) {
    node->mutable_items().erase(node->mutable_items().begin() + index);
  } else {
    node->mutable_items()[index] = o.value;
  }
  return absl::OkStatus();
}

// The override's last segment names key `segment` of the mapping `node`
// (`child`: its value, null when absent); `root` for "did you mean".
absl::Status ApplyToMapKey(const Override& o, const Mark& mark, const Node& root, Node* node,
                           const std::string& segment, Node* child) {
  switch (o.op) {
    case Override::Op::kSet:
    case Override::Op::kDelete:
      if (child == nullptr) {
        const std::vector<std::string> all = AllPaths(root);
        return ErrorAt(
            mark, o.key,
            absl::StrCat(
                "no such key to ",
                o.op == Override::Op::kSet ? "override" : "delete",
                DidYouMean(o.key, all),
                o.op == Override::Op::kSet
                    ? absl::StrCat(" (write +", o.key, "=... to add it)")
                    : ""));
      }
      if (o.op == Override::Op::kDelete) {
        node->Erase(segment);
      } else {
        *child = o.value;
      }
      return absl::OkStatus();
    case Override::Op::kAdd:
      if (child != nullptr) {
        return ErrorAt(mark, o.key,
                       absl::StrCat("key exists (", Describe(*child),
                                    " from ", child->mark().ToString(),
                                    "); to change it write ", o.key,
                                    "=... without '+'"));
      }
      node->Set(segment, o.value, o.value.mark());
      return absl::OkStatus();
    case Override::Op::kUpsert:
      node->Set(segment, o.value, o.value.mark());
      return absl::OkStatus();
  }
  return absl::OkStatus();  // Not reached: every op returns above.
}

absl::Status ApplyOverride(const Override& o, Node* root, const Limits& limits) {
  const Mark mark{Label(o.text, o.index), 1, 1};
  Node* node = root;
  std::string walked;
  for (size_t i = 0; i < o.path.size(); ++i) {
    const std::string& segment = o.path[i];
    const bool last = i + 1 == o.path.size();
    const std::string here = walked.empty() ? segment : JoinPath(walked, segment);
    size_t index = 0;
    if (node->is_list()) {
      if (!IsIndex(segment, &index) || index >= node->items().size()) {
        return ErrorAt(mark, here,
                       absl::StrCat("'", walked, "' is a list of ",
                                    node->items().size(), "; '", segment,
                                    "' is not an index into it"));
      }
      if (last) return ApplyToListItem(o, mark, node, index);
      node = &node->mutable_items()[index];
    } else if (node->is_map()) {
      Node* child = node->Find(segment);
      if (last) return ApplyToMapKey(o, mark, *root, node, segment, child);
      if (child == nullptr) {
        if (o.op == Override::Op::kAdd || o.op == Override::Op::kUpsert) {
          child = &node->Set(segment, Node::Map(o.value.mark()), o.value.mark());
        } else {
          return ErrorAt(mark, o.key,
                         absl::StrCat("no key '", here, "'",
                                      DidYouMean(here, AllPaths(*root))));
        }
      }
      node = child;
    } else {
      return ErrorAt(mark, o.key,
                     absl::StrCat("'", walked, "' is a ", Describe(*node),
                                  " (", node->mark().ToString(),
                                  "), not a mapping or list"));
    }
    walked = here;
  }
  return absl::OkStatus();  // Not reached: the last segment returns above.
}

absl::Status ApplyOverrides(const std::vector<std::string>& overrides,
                            Node* root, const Limits& limits) {
  for (size_t i = 0; i < overrides.size(); ++i) {
    const int index = static_cast<int>(i) + 1;
    ASSIGN_OR_RETURN(Override o, ParseOverride(overrides[i], index, limits));
    RETURN_IF_ERROR(ApplyOverride(o, root, limits));
    if (root->CountNodes() > limits.max_nodes) {
      return ErrorAt(Mark{Label(o.text, index), 1, 1}, o.key,
                     absl::StrCat("the config now has more than ",
                                  limits.max_nodes, " values"));
    }
    if (root->Depth() > limits.max_depth + 1) {
      return ErrorAt(Mark{Label(o.text, index), 1, 1}, o.key,
                     absl::StrCat("the config is now nested deeper than ",
                                  limits.max_depth, " levels"));
    }
  }
  return absl::OkStatus();
}

}  // namespace elastrun::config
