#include "common/config/node.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace elastrun::config {
namespace {

// Misuse of the typed accessors is a bug in the calling code, not in the
// config: crash loudly with the reason (STYLE.md, "cannot happen").
[[noreturn]] void Die(const char* what, Node::Kind kind) {
  std::fprintf(stderr, "elastrun::config::Node::%s called on a %s\n", what,
               KindName(kind));
  std::abort();
}

// The shortest text that reads back as the same double, always with a '.',
// an exponent or a YAML special, so that it reads back as a double and not
// an int.
std::string FormatDouble(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return absl::StrCat(value);  // Cannot happen: 64 > 24.
  std::string text(buf, end);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string Mark::ToString() const {
  if (file.empty()) return "<built-in>";
  if (line <= 0) return file;
  return absl::StrCat(file, ":", line, ":", column);
}

Node Node::Null(Mark mark) {
  Node n;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::Bool(bool value, Mark mark) {
  Node n;
  n.kind_ = Kind::kBool;
  n.bool_ = value;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::Int(int64_t value, Mark mark) {
  Node n;
  n.kind_ = Kind::kInt;
  n.int_ = value;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::Double(double value, Mark mark) {
  Node n;
  n.kind_ = Kind::kDouble;
  n.double_ = value;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::String(std::string value, Mark mark) {
  Node n;
  n.kind_ = Kind::kString;
  n.string_ = std::move(value);
  n.mark_ = std::move(mark);
  return n;
}

Node Node::List(Mark mark) {
  Node n;
  n.kind_ = Kind::kList;
  n.mark_ = std::move(mark);
  return n;
}

Node Node::Map(Mark mark) {
  Node n;
  n.kind_ = Kind::kMap;
  n.mark_ = std::move(mark);
  return n;
}

absl::StatusOr<Node> Node::FromConfigString(std::string text, Mark mark) {
  std::vector<InterpolationPart> parts;
  std::string literal;
  bool has_reference = false;
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 3, "\\${") == 0) {
      literal += "${";
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") == 0) {
      const size_t close = text.find('}', i + 2);
      if (close == std::string::npos) {
        return ErrorAt(mark, "",
                       absl::StrCat("unterminated '${' in \"", text,
                                    "\"; write ${path.to.key}, or \\${ for a "
                                    "literal '${'"));
      }
      std::string path = text.substr(i + 2, close - i - 2);
      if (absl::StripAsciiWhitespace(path).empty()) {
        return ErrorAt(mark, "", absl::StrCat("empty '${}' in \"", text, "\""));
      }
      if (!literal.empty()) parts.push_back({false, std::move(literal)});
      literal.clear();
      parts.push_back({true, std::string(absl::StripAsciiWhitespace(path))});
      has_reference = true;
      i = close + 1;
      continue;
    }
    literal += text[i++];
  }
  if (!has_reference) return String(std::move(literal), std::move(mark));
  if (!literal.empty()) parts.push_back({false, std::move(literal)});
  Node n;
  n.kind_ = Kind::kInterpolation;
  n.string_ = std::move(text);
  n.parts_ = std::move(parts);
  n.mark_ = std::move(mark);
  return n;
}

bool Node::as_bool() const {
  if (kind_ != Kind::kBool) Die("as_bool", kind_);
  return bool_;
}

int64_t Node::as_int() const {
  if (kind_ != Kind::kInt) Die("as_int", kind_);
  return int_;
}

double Node::as_double() const {
  if (kind_ == Kind::kInt) return static_cast<double>(int_);
  if (kind_ != Kind::kDouble) Die("as_double", kind_);
  return double_;
}

const std::string& Node::as_string() const {
  if (kind_ != Kind::kString && kind_ != Kind::kInterpolation) {
    Die("as_string", kind_);
  }
  return string_;
}

std::string Node::ScalarText() const {
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return bool_ ? "true" : "false";
    case Kind::kInt:
      return absl::StrCat(int_);
    case Kind::kDouble:
      return FormatDouble(double_);
    case Kind::kString:
    case Kind::kInterpolation:
      return string_;
    case Kind::kList:
    case Kind::kMap:
      return "";
  }
  return "";
}

const Node* Node::Find(absl::string_view key) const {
  for (const MapEntry& e : entries_) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

Node* Node::Find(absl::string_view key) {
  for (MapEntry& e : entries_) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

Node& Node::Set(std::string key, Node value, Mark key_mark) {
  if (kind_ != Kind::kMap) Die("Set", kind_);
  if (Node* existing = Find(key)) {
    *existing = std::move(value);
    return *existing;
  }
  entries_.push_back({std::move(key), std::move(key_mark), std::move(value)});
  return entries_.back().value;
}

bool Node::Erase(absl::string_view key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->key == key) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

int64_t Node::CountNodes() const {
  int64_t n = 1;
  for (const Node& item : items_) n += item.CountNodes();
  for (const MapEntry& e : entries_) n += e.value.CountNodes();
  return n;
}

int Node::Depth() const {
  int child = 0;
  for (const Node& item : items_) child = std::max(child, item.Depth());
  for (const MapEntry& e : entries_) child = std::max(child, e.value.Depth());
  return child + 1;
}

bool operator==(const Node& a, const Node& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Node::Kind::kNull:
      return true;
    case Node::Kind::kBool:
      return a.bool_ == b.bool_;
    case Node::Kind::kInt:
      return a.int_ == b.int_;
    case Node::Kind::kDouble:
      // NaN equals NaN here: a config holding .nan round-trips to itself.
      return a.double_ == b.double_ ||
             (std::isnan(a.double_) && std::isnan(b.double_));
    case Node::Kind::kString:
    case Node::Kind::kInterpolation:
      return a.string_ == b.string_;
    case Node::Kind::kList:
      return a.items_ == b.items_;
    case Node::Kind::kMap:
      if (a.entries_.size() != b.entries_.size()) return false;
      for (size_t i = 0; i < a.entries_.size(); ++i) {
        if (a.entries_[i].key != b.entries_[i].key ||
            a.entries_[i].value != b.entries_[i].value) {
          return false;
        }
      }
      return true;
  }
  return false;
}

const char* KindName(Node::Kind kind) {
  switch (kind) {
    case Node::Kind::kNull:
      return "null";
    case Node::Kind::kBool:
      return "bool";
    case Node::Kind::kInt:
      return "int";
    case Node::Kind::kDouble:
      return "double";
    case Node::Kind::kString:
      return "string";
    case Node::Kind::kInterpolation:
      return "interpolation";
    case Node::Kind::kList:
      return "list";
    case Node::Kind::kMap:
      return "map";
  }
  return "?";
}

std::string Describe(const Node& node) {
  switch (node.kind()) {
    case Node::Kind::kNull:
      return "null";
    case Node::Kind::kList:
      return absl::StrCat("list of ", node.items().size());
    case Node::Kind::kMap:
      return absl::StrCat("map of ", node.entries().size());
    case Node::Kind::kString:
    case Node::Kind::kInterpolation: {
      std::string s = node.as_string();
      if (s.size() > 40) s = s.substr(0, 37) + "...";
      return absl::StrCat(KindName(node.kind()), " \"", s, "\"");
    }
    default:
      return absl::StrCat(KindName(node.kind()), " ", node.ScalarText());
  }
}

std::string JoinPath(absl::string_view path, absl::string_view key) {
  if (path.empty()) return std::string(key);
  return absl::StrCat(path, ".", key);
}

std::string IndexPath(absl::string_view path, size_t index) {
  return absl::StrCat(path, "[", index, "]");
}

absl::Status ErrorAt(const Mark& mark, absl::string_view path,
                     absl::string_view message) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(mark.ToString(), ": ", message));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(mark.ToString(), ": ", path, ": ", message));
}

absl::StatusOr<std::vector<std::string>> SplitPath(absl::string_view path) {
  std::vector<std::string> segments;
  std::string current;
  bool after_bracket = false;  // "a[0]" may be followed by "." or "[" only.
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad key path '", path, "': ", why));
  };
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '.') {
      if (current.empty() && !after_bracket) return bad("empty segment");
      if (!current.empty()) segments.push_back(std::move(current));
      current.clear();
      after_bracket = false;
      if (i + 1 == path.size()) return bad("ends with '.'");
    } else if (c == '[') {
      if (current.empty() && !after_bracket) return bad("'[' without a key");
      if (!current.empty()) segments.push_back(std::move(current));
      current.clear();
      const size_t close = path.find(']', i);
      if (close == absl::string_view::npos) return bad("unclosed '['");
      absl::string_view index = path.substr(i + 1, close - i - 1);
      if (index.empty() || !std::all_of(index.begin(), index.end(),
                                        [](char d) { return absl::ascii_isdigit(d); })) {
        return bad("list index must be a number");
      }
      segments.emplace_back(index);
      i = close;
      after_bracket = true;
    } else if (c == ']') {
      return bad("stray ']'");
    } else {
      if (after_bracket) return bad("expected '.' or '[' after ']'");
      current += c;
    }
  }
  if (!current.empty()) segments.push_back(std::move(current));
  if (segments.empty()) return bad("empty");
  return segments;
}

namespace {
void CollectPaths(const Node& node, const std::string& path, size_t max,
                  std::vector<std::string>* out) {
  for (const MapEntry& e : node.entries()) {
    if (out->size() >= max) return;
    std::string child = JoinPath(path, e.key);
    out->push_back(child);
    CollectPaths(e.value, child, max, out);
  }
}
}  // namespace

std::vector<std::string> AllPaths(const Node& root, size_t max) {
  std::vector<std::string> out;
  CollectPaths(root, "", max, &out);
  return out;
}

}  // namespace elastrun::config
