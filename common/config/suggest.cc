#include "common/config/suggest.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace elastrun::config {

int EditDistance(absl::string_view a, absl::string_view b) {
  constexpr size_t kMaxLength = 256;
  a = a.substr(0, kMaxLength);
  b = b.substr(0, kMaxLength);
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> ClosestNames(absl::string_view name,
                                      const std::vector<std::string>& candidates,
                                      size_t max) {
  const int limit = std::max<int>(2, static_cast<int>(name.size()) / 2);
  std::vector<std::pair<int, size_t>> scored;  // (distance, index)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int d = EditDistance(name, candidates[i]);
    if (d <= limit) scored.emplace_back(d, i);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && out.size() < max; ++i) {
    // Far worse than the best match is noise, not a suggestion.
    if (scored[i].first > scored[0].first + 1) break;
    out.push_back(candidates[scored[i].second]);
  }
  return out;
}

std::string DidYouMean(absl::string_view name,
                       const std::vector<std::string>& candidates) {
  std::vector<std::string> close = ClosestNames(name, candidates);
  if (close.empty()) return "";
  return absl::StrCat("; did you mean: ", absl::StrJoin(close, ", "), "?");
}

}  // namespace elastrun::config
