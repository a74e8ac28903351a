// "Did you mean" suggestions for misspelled keys, arguments and targets.
#ifndef ELASTRUN_COMMON_CONFIG_SUGGEST_H_
#define ELASTRUN_COMMON_CONFIG_SUGGEST_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace elastrun::config {

// Levenshtein distance (insert, delete, substitute; each costs 1). Strings
// longer than 256 bytes are compared by their first 256 bytes, which keeps
// the cost bounded for hostile input.
int EditDistance(absl::string_view a, absl::string_view b);

// Up to `max` candidates closest to `name` by edit distance, closest first
// (ties in candidate order), keeping only plausible ones: distance at most
// max(2, length of `name` / 2) and at most one more than the best match.
std::vector<std::string> ClosestNames(absl::string_view name,
                                      const std::vector<std::string>& candidates,
                                      size_t max = 3);

// "; did you mean: a, b?" or "" when there is nothing close.
std::string DidYouMean(absl::string_view name,
                       const std::vector<std::string>& candidates);

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_SUGGEST_H_
