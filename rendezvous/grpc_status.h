// The one place where absl::Status and grpc::Status are converted. The codes
// share their numbering (both follow google.rpc.Code).
#ifndef ELASTRUN_RENDEZVOUS_GRPC_STATUS_H_
#define ELASTRUN_RENDEZVOUS_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace elastrun::rendezvous {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_GRPC_STATUS_H_
