// Command-line overrides in Hydra's grammar:
//
//   key.sub=VALUE     change an existing key (error if it does not exist,
//                     naming the closest existing keys)
//   +key.sub=VALUE    add a new key (error if it exists); missing parent
//                     mappings are created
//   ++key.sub=VALUE   add or change
//   ~key.sub          delete an existing key (error if it does not exist)
//
// VALUE is one YAML flow value: `0.02`, `[256,256]`, `{a: 1}`, `'a b'`,
// `"1"` (a string), `null`, `${data.batch_size}`. An empty VALUE is the
// empty string, as in Hydra. A top-level ',' must be quoted. A numeric
// segment indexes an existing list item (`model.hidden.0=128`).
#ifndef ELASTRUN_COMMON_CONFIG_OVERRIDE_H_
#define ELASTRUN_COMMON_CONFIG_OVERRIDE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/node.h"

namespace elastrun::config {

struct Override {
  enum class Op { kSet, kAdd, kUpsert, kDelete };
  Op op = Op::kSet;
  // Dotted key as written ("model.hidden") and split into segments.
  std::string key;
  std::vector<std::string> path;
  // The new value (null for kDelete). Its marks point into the override:
  // file "override #N", line 1, the column within the argument.
  Node value;
  // The argument as given, and its 1-based position among the overrides,
  // both for messages.
  std::string text;
  int index = 0;
};

// Parses one override argument. Errors name the override and its column:
// missing '=', empty or malformed key, a value that is not one YAML flow
// value, `~key=value`, `_base_` (only files may set it).
absl::StatusOr<Override> ParseOverride(absl::string_view text, int index,
                                       const Limits& limits = {});

// Applies one parsed override to `root` (a map). Errors: a key that must
// exist does not (with the closest existing keys), a key to add exists, a
// path through a value that is not a map/list, an index out of range.
absl::Status ApplyOverride(const Override& override, Node* root,
                           const Limits& limits = {});

// Parses and applies `overrides` in order (later ones see earlier ones);
// stops at the first error. Fails if the result exceeds limits.max_nodes.
absl::Status ApplyOverrides(const std::vector<std::string>& overrides,
                            Node* root, const Limits& limits = {});

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_OVERRIDE_H_
