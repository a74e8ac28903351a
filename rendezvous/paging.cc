#include "rendezvous/paging.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace elastrun::rendezvous {

absl::StatusOr<int> PageSize(int32_t page_size, absl::string_view field) {
  if (page_size < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d is negative; give 0 for the default (%d) or up to %d", field, page_size,
        kDefaultPageSize, kMaxPageSize));
  }
  if (page_size == 0) return kDefaultPageSize;
  return std::min(static_cast<int>(page_size), kMaxPageSize);
}

bool PageBudget::Take(size_t bytes) {
  // Each repeated item also costs its tag and length: a few bytes.
  const size_t cost = bytes + 8;
  if (count_ > 0 && (count_ >= page_size_ || bytes_ + cost > kMaxPageBytes)) return false;
  ++count_;
  bytes_ += cost;
  return true;
}

}  // namespace elastrun::rendezvous
