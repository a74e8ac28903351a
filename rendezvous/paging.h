// Paging of the service's list calls (ListNodes, ListJobs): how big a page
// may be, in items and in bytes, so that no answer nears gRPC's 4 MiB
// default limit on a message a client receives, however many nodes or jobs
// the service holds.
#ifndef ELASTRUN_RENDEZVOUS_PAGING_H_
#define ELASTRUN_RENDEZVOUS_PAGING_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::rendezvous {

// Items in a page when the caller asks for none (page_size 0), and at most.
inline constexpr int kDefaultPageSize = 500;
inline constexpr int kMaxPageSize = 1000;
// A page stops before its items reach this many bytes (half the 4 MiB a
// gRPC client accepts by default: room for the framing and the rest).
inline constexpr size_t kMaxPageBytes = 2 << 20;

// The page size to use for a requested `page_size`: the default for 0, at
// most kMaxPageSize (a bigger request is clamped, not refused).
// InvalidArgument naming `field` for a negative size.
absl::StatusOr<int> PageSize(int32_t page_size, absl::string_view field);

// Counts what goes into one page. Not thread-safe.
class PageBudget {
 public:
  explicit PageBudget(int page_size) : page_size_(page_size) {}
  // Whether one more item of `bytes` fits the page, and if so counts it.
  // The first item always fits, so that a page is never empty while items
  // remain (one item is bounded by the service's input limits).
  bool Take(size_t bytes);

 private:
  const int page_size_;
  int count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_PAGING_H_
