// Validation of a submitted JobSpec and its translation into the rendezvous
// core's RoundConfig.
#ifndef ELASTRUN_RENDEZVOUS_JOB_SPEC_H_
#define ELASTRUN_RENDEZVOUS_JOB_SPEC_H_

#include <cstddef>

#include "absl/status/status.h"
#include "elastrun/v1/types.pb.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {

// Bounds on what a spec may carry (it comes from the network).
inline constexpr int kMaxArgs = 4096;
inline constexpr int kMaxEnv = 4096;
inline constexpr int kMaxSpecStringLength = 64 * 1024;
inline constexpr int kMaxJobNameLength = 64;
// argv and env together, as exec counts them (each string, its NUL and its
// pointer): Linux's limit is a quarter of the stack limit, 2 MiB by
// default; half of that leaves room for the daemon's contract variables.
inline constexpr size_t kMaxExecBytes = 1 << 20;

// Default timeouts for a spec that leaves them unset.
inline constexpr absl::Duration kDefaultLastCallTimeout = absl::Seconds(1);
inline constexpr absl::Duration kDefaultJoinTimeout = absl::Seconds(600);

// OK, or InvalidArgument whose message starts with the offending field
// ("spec.nproc_per_node: ...") and says what a valid value is: name charset
// and length, min_nodes/max_nodes (1 <= MIN <= MAX <= kMaxNodes),
// nproc_per_node (1..kMaxLocalWorldSize), max_restarts >= 0, argv non-empty
// with a non-empty program, env names, a NUL in argv, env or working_dir,
// argv + env beyond kMaxExecBytes, negative or oversized durations, a pool
// name (ValidatePool).
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// OK for an empty request id or one of [A-Za-z0-9._-]{1,64}; else
// InvalidArgument naming request_id.
absl::Status ValidateRequestId(const std::string& request_id);

// The same for a pool's name (JobSpec.pool, RegisterNodeRequest.pool);
// InvalidArgument naming pool.
absl::Status ValidatePool(const std::string& pool);

// The spec with defaults filled in: name "job", timeouts. Call after
// ValidateJobSpec.
v1::JobSpec WithDefaults(v1::JobSpec spec);

// The core's config for a spec that passed ValidateJobSpec.
RoundConfig RoundConfigFromSpec(const v1::JobSpec& spec);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_JOB_SPEC_H_
