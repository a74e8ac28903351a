// Writing config trees back as YAML: the resolved config saved in every run
// folder and printed by --print-config.
//
// Contract: ParseYaml(ToYaml(n)) == n for every map `n` (values and types,
// not positions). Strings that would read back as another type ("1",
// "true", "null", "") are quoted; a literal `${` in a string is written as
// `\${`, an unresolved interpolation as written, so that reading the output
// gives back exactly the same values. Strings are UTF-8, as the YAML reader
// produces them.
#ifndef ELASTRUN_COMMON_CONFIG_EMITTER_H_
#define ELASTRUN_COMMON_CONFIG_EMITTER_H_

#include <string>

#include "common/config/node.h"

namespace elastrun::config {

// Block-style YAML, keys in config order, lists of scalars on one line
// (`hidden: [256, 256]`). Ends with a newline.
std::string ToYaml(const Node& node);

// One-line flow YAML: `[64, 64]`, `{a: 1, b: 'x'}`, `0.9`, `"relu"`.
std::string ToFlowYaml(const Node& node);

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_EMITTER_H_
