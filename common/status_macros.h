// Propagating absl::Status without boilerplate. Errors are values in
// elastrun (see STYLE.md); these two macros are the only sugar for them.
#ifndef ELASTRUN_COMMON_STATUS_MACROS_H_
#define ELASTRUN_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ELASTRUN_CONCAT_INNER_(a, b) a##b
#define ELASTRUN_CONCAT_(a, b) ELASTRUN_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status _status_ = (expr);          \
    if (!_status_.ok()) return _status_;       \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(ELASTRUN_CONCAT_(_statusor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // ELASTRUN_COMMON_STATUS_MACROS_H_
