// Conversions between the rendezvous core's plain types (types.h) and their
// protobuf forms (elastrun/v1/*.proto): for RPC replies, Watch commands and
// the persisted state. Pure functions, no I/O.
#ifndef ELASTRUN_RENDEZVOUS_CODEC_H_
#define ELASTRUN_RENDEZVOUS_CODEC_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "elastrun/v1/state.pb.h"
#include "elastrun/v1/types.pb.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {

google::protobuf::Timestamp ToProto(absl::Time t);
absl::Time FromProto(const google::protobuf::Timestamp& t);
google::protobuf::Duration ToProto(absl::Duration d);
absl::Duration FromProto(const google::protobuf::Duration& d);

v1::NodeAssignment ToProto(const NodeAssignment& n);
v1::Assignment ToProto(const RoundAssignment& a);
RoundAssignment FromProto(const v1::Assignment& a);
v1::WorkerFailure ToProto(const Failure& f);
Failure FromProto(const v1::WorkerFailure& f);
v1::RoundRecord ToProto(const RoundRecord& r);
RoundRecord FromProto(const v1::RoundRecord& r);

// The whole core state, for the store. FromProto does not validate; the
// caller passes the result to RendezvousCore::Restore, which does.
v1::StoredRendezvousState ToProto(const RendezvousState& s);
absl::StatusOr<RendezvousState> FromProto(const v1::StoredRendezvousState& s);

// The public job state of a core state; PENDING until a round first closed.
v1::JobState PublicJobState(const RendezvousState& s);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_CODEC_H_
