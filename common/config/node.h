// The config value tree. Every value remembers where it came from (file,
// line, column), so that any later error — a bad override, a wrong type for
// a factory argument — can point at the line the user has to edit.
//
// A Node is a plain value type (deep copies, no sharing), unlike YAML::Node,
// whose reference semantics make merges and overrides alias each other.
#ifndef ELASTRUN_COMMON_CONFIG_NODE_H_
#define ELASTRUN_COMMON_CONFIG_NODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::config {

// Where a value was written. Lines and columns are 1-based; line 0 means
// "unknown" (values built in code, such as schema defaults).
struct Mark {
  std::string file;
  int line = 0;
  int column = 0;

  // "file:line:col", "file" when the line is unknown, "<built-in>" when the
  // file is too.
  std::string ToString() const;
};

// Bounds on everything an input can make the library do, so that a hostile
// or broken config gets a clear error rather than exhausting memory, stack
// or time. Defaults are far above any real config.
struct Limits {
  // Nesting of mappings and sequences.
  int max_depth = 64;
  // Values in one config, counted after merging and interpolation.
  int64_t max_nodes = 200000;
  // Length of one `_base_` chain (a.yaml -> b.yaml -> ...).
  int max_base_depth = 16;
  // Files read for one config, all `_base_` branches together.
  int max_files = 64;
  // Length of one key. YAML caps implicit keys at 1024 characters, and the
  // emitter may escape a byte as 4 ("\\x12"), so keys stay well below.
  int max_key_bytes = 200;
  // Size of one file or one command-line override.
  int64_t max_file_bytes = 4 << 20;
  // Length of one interpolation chain (${a} -> ${b} -> ...).
  int max_interpolation_depth = 32;
  // Length of one string after interpolation.
  int64_t max_string_bytes = 1 << 20;
};

// One piece of a string with interpolations: literal text or the dotted
// path of a referenced value.
struct InterpolationPart {
  bool is_reference = false;
  std::string text;  // Literal text (escapes removed), or the path.
};

struct MapEntry;

class Node {
 public:
  enum class Kind {
    kNull,
    kBool,
    kInt,
    kDouble,
    kString,
    // A string with `${...}` still to resolve (see interpolate.h).
    kInterpolation,
    kList,
    kMap,
  };

  Node() = default;  // A null with an unknown mark.

  static Node Null(Mark mark = {});
  static Node Bool(bool value, Mark mark = {});
  static Node Int(int64_t value, Mark mark = {});
  static Node Double(double value, Mark mark = {});
  // A literal string: `${` in `value` is text, never a reference.
  static Node String(std::string value, Mark mark = {});
  static Node List(Mark mark = {});
  static Node Map(Mark mark = {});
  // A string as written in a config: `${path}` references make it a
  // kInterpolation, `\${` is a literal `${`. Fails on an unterminated or
  // empty `${`.
  static absl::StatusOr<Node> FromConfigString(std::string text, Mark mark = {});

  Kind kind() const { return kind_; }
  const Mark& mark() const { return mark_; }
  void set_mark(Mark mark) { mark_ = std::move(mark); }

  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_map() const { return kind_ == Kind::kMap; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_scalar() const { return kind_ != Kind::kList && kind_ != Kind::kMap; }

  // Typed reads. Each requires the matching kind (as_double also accepts
  // kInt); calling one on another kind is a programming error and aborts.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  // The string of a kString, the source text of a kInterpolation.
  const std::string& as_string() const;
  // The scalar as text: the string itself, or the canonical YAML form of a
  // number, bool or null. Lists and maps give "".
  std::string ScalarText() const;
  // The parts of a kInterpolation.
  const std::vector<InterpolationPart>& parts() const { return parts_; }

  // Sequence items (kList only; empty otherwise).
  const std::vector<Node>& items() const { return items_; }
  std::vector<Node>& mutable_items() { return items_; }

  // Mapping entries in file order (kMap only; empty otherwise).
  const std::vector<MapEntry>& entries() const { return entries_; }
  std::vector<MapEntry>& mutable_entries() { return entries_; }
  // The value under `key`, or nullptr (also when this is not a map).
  const Node* Find(absl::string_view key) const;
  Node* Find(absl::string_view key);
  // Sets `key` (replacing in place, or appending). Requires a map.
  Node& Set(std::string key, Node value, Mark key_mark = {});
  // Removes `key`; false if it was not there.
  bool Erase(absl::string_view key);

  // Values in this tree, this one included.
  int64_t CountNodes() const;
  // Nesting depth: 1 for a scalar or empty container.
  int Depth() const;

  // Deep equality of values; marks are ignored. Int 1 != Double 1.0, so a
  // round trip through ToYaml must keep the type, not just the number.
  friend bool operator==(const Node& a, const Node& b);
  friend bool operator!=(const Node& a, const Node& b) { return !(a == b); }

 private:
  Kind kind_ = Kind::kNull;
  Mark mark_;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::vector<InterpolationPart> parts_;
  std::vector<Node> items_;
  std::vector<MapEntry> entries_;
};

struct MapEntry {
  std::string key;
  Mark key_mark;
  Node value;
};

// "null", "bool", "int", "double", "string", "interpolation", "list", "map".
const char* KindName(Node::Kind kind);

// A short description of a value for messages: `string "abc"`, `int 3`,
// `list of 2`, ... (long strings are cut).
std::string Describe(const Node& node);

// Appends `key` to a dotted path ("" + "a" = "a", "a" + "b" = "a.b").
std::string JoinPath(absl::string_view path, absl::string_view key);
// Appends a sequence index ("a" + 2 = "a[2]").
std::string IndexPath(absl::string_view path, size_t index);

// An error at `mark` about the value at dotted `path`:
// "file:line:col: path: message" (InvalidArgument).
absl::Status ErrorAt(const Mark& mark, absl::string_view path,
                     absl::string_view message);

// Splits a dotted path ("a.b[0].c", "a.b.0.c") into segments; a numeric
// segment indexes a list. Fails on empty segments or stray brackets.
absl::StatusOr<std::vector<std::string>> SplitPath(absl::string_view path);

// Every dotted path in `root` (maps and their keys; list items are not
// listed), for "closest key" suggestions. Stops after `max` paths.
std::vector<std::string> AllPaths(const Node& root, size_t max = 10000);

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_NODE_H_
