// Reading YAML into config trees: scalar typing, positions, and `_base_`
// inheritance.
//
// Scalars follow the YAML 1.2 core schema: plain `1` is an int, `1.0`,
// `1e-3` and `.inf` are doubles, `true`/`false` bools, `null`/`~`/empty
// null; anything quoted (or tagged `!!str`) is a string. Strings may hold
// `${path}` interpolations (see interpolate.h). Anchors and aliases are
// expanded (within Limits).
#ifndef ELASTRUN_COMMON_CONFIG_LOADER_H_
#define ELASTRUN_COMMON_CONFIG_LOADER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/node.h"

namespace elastrun::config {

// Reads a whole file. Injected so that tests and the fuzzer can serve
// `_base_` files from memory. NotFound when the file does not exist.
using FileReader =
    std::function<absl::StatusOr<std::string>(const std::string& path)>;

struct LoadOptions {
  // Bounds on input size, depth and work.
  Limits limits;
  // How files are read; empty means from disk (at most
  // limits.max_file_bytes).
  FileReader read_file;
};

// Reads a file from disk; fails (FailedPrecondition) above `max_bytes`.
absl::StatusOr<std::string> ReadFileFromDisk(const std::string& path,
                                             int64_t max_bytes);

// Parses one YAML document whose top level is a mapping (an empty document
// is an empty mapping). `file` names the source in marks and errors.
// Errors: YAML syntax (with position), several documents, duplicate keys,
// non-string keys, a nested `_base_`, unsupported tags, integers beyond
// int64, and Limits (depth, node count, size).
absl::StatusOr<Node> ParseYaml(absl::string_view text, const std::string& file,
                               const Limits& limits = {});

// Like ParseYaml, but the top level may be any value (used for
// command-line override values).
absl::StatusOr<Node> ParseYamlValue(absl::string_view text,
                                    const std::string& file,
                                    const Limits& limits = {});

// The value of a plain (unquoted) YAML scalar: null, bool, int, double, or
// a string (a kInterpolation when it holds `${...}`). Fails on an int beyond
// int64 or a bad `${`.
absl::StatusOr<Node> ResolvePlainScalar(const std::string& text,
                                        const Mark& mark);

// Loads `path` and, recursively, the files its top-level `_base_` names (a
// path or a list of paths, relative to the including file's folder). Bases
// merge in order, later bases winning, then the file itself wins over all
// of them (see Merge). `_base_` is removed from the result.
// Errors: unreadable file (naming the `_base_` entry that asked for it),
// a cycle (the chain is in the message), chains or file counts beyond
// Limits, and everything ParseYaml reports.
absl::StatusOr<Node> LoadFile(const std::string& path,
                              const LoadOptions& options = {});

// Deep merge where `child` wins: maps merge key by key (new keys append,
// in child order); anything else is replaced by the child's value. A child
// map whose `_target_` differs from the base's replaces it whole, since the
// base's arguments belong to a different factory.
Node Merge(Node base, Node child);

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_LOADER_H_
