// `${path.to.key}` interpolation, resolved after `_base_` merging and
// command-line overrides, so that `data.batch_size=64` reaches every
// `${data.batch_size}`.
//
// A string that is exactly one `${path}` becomes a copy of the referenced
// value, keeping its type (int, list, map...). Inside a longer string each
// reference is replaced by the referenced scalar's text. Paths are absolute
// from the top of the config; `a.b[0]` or `a.b.0` index a list. `\${` is a
// literal `${` (in a plain or single-quoted YAML scalar; inside double
// quotes YAML itself wants `\\${`). Every string is interpolated, quoted or
// not. In a flow collection quote the reference: `{bs: '${data.bs}'}`,
// since `{` and `}` are YAML flow indicators.
#ifndef ELASTRUN_COMMON_CONFIG_INTERPOLATE_H_
#define ELASTRUN_COMMON_CONFIG_INTERPOLATE_H_

#include "absl/status/status.h"
#include "common/config/node.h"

namespace elastrun::config {

// Resolves every interpolation in `root` in place; afterwards no value is a
// kInterpolation. Errors (at the referencing value's position, with its
// dotted key): a missing target (with the closest existing keys), a cycle
// (the chain in the message), a map or list inside a longer string, chains
// longer than limits.max_interpolation_depth, and results beyond
// limits.max_string_bytes, max_nodes or max_depth. On error `root` may be
// partly resolved.
absl::Status ResolveInterpolations(Node* root, const Limits& limits = {});

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_INTERPOLATE_H_
