// The CLI's view of the service's Jobs API: an interface (so that tests
// queue replies from a fake) and its gRPC implementation. gRPC is wrapped
// here and nowhere else in the CLI.
#ifndef ELASTRUN_LAUNCHER_CLI_CLIENT_H_
#define ELASTRUN_LAUNCHER_CLI_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "elastrun/v1/jobs.pb.h"

namespace elastrun::launcher {

// Where the service is and how to talk to it.
struct ServiceOptions {
  // "HOST:PORT" of elastrun-rendezvous (--rendezvous, $ELASTRUN_RENDEZVOUS).
  std::string address = "127.0.0.1:29400";
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string token;
  // Deadline of every RPC.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // How long a read command (status, list, nodes, logs, wait) keeps retrying
  // a service it cannot reach (--retry-for): a restart takes seconds.
  absl::Duration retry_for = absl::Seconds(60);
};

// One connection to the Jobs service. Every call carries the deadline and
// the token. Errors keep the service's code (NotFound, InvalidArgument, ...);
// a service that cannot be reached or did not answer in time is Unavailable
// or DeadlineExceeded with a message that names the address.
class JobsClient {
 public:
  virtual ~JobsClient() = default;
  // The new job's id.
  virtual absl::StatusOr<std::string> Submit(const v1::JobSpec& spec) = 0;
  virtual absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) = 0;
  virtual absl::StatusOr<v1::ListJobsResponse> List() = 0;
  virtual absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id,
                                               const std::string& reason) = 0;
  virtual absl::StatusOr<v1::ListNodesResponse> ListNodes() = 0;
  // The job's forwarded worker output after `after_seq` (`rank` -1: all),
  // as much as the service holds now.
  virtual absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string& job_id,
                                                             int rank, int64_t after_seq) = 0;
  // The job's timeline, oldest first. Not pure: a fake that has no events
  // to give answers Unimplemented.
  virtual absl::StatusOr<v1::EventsResponse> Events(const std::string& job_id);
};

// A client over a new gRPC channel to options.address (plaintext; the
// service listens beyond loopback only with a token). Connecting is lazy:
// an unreachable address shows up as the first call's Unavailable.
std::unique_ptr<JobsClient> NewGrpcJobsClient(const ServiceOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_CLIENT_H_
