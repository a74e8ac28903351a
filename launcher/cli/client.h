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
  // One page of jobs: `request.page_token` is the previous page's
  // next_page_token (empty: the first page).
  virtual absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& request) = 0;
  virtual absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id,
                                               const std::string& reason) = 0;
  // One page of nodes, as List.
  virtual absl::StatusOr<v1::ListNodesResponse> ListNodes(
      const v1::ListNodesRequest& request) = 0;
  // Drains (request.undo: un-drains) a node; returns it.
  virtual absl::StatusOr<v1::NodeInfo> DrainNode(const v1::NodeRequest& request) = 0;
  // Forgets a node (request.force: even while jobs hold it); returns it as
  // it was. FailedPrecondition naming the jobs that hold it.
  virtual absl::StatusOr<v1::NodeInfo> RemoveNode(const v1::NodeRequest& request) = 0;
  // The job's forwarded worker output after `after_seq` (`rank` -1: all),
  // as much as the service holds now.
  virtual absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string& job_id,
                                                             int rank, int64_t after_seq) = 0;
};

// A client over a new gRPC channel to options.address (plaintext; the
// service listens beyond loopback only with a token). Connecting is lazy:
// an unreachable address shows up as the first call's Unavailable.
std::unique_ptr<JobsClient> NewGrpcJobsClient(const ServiceOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_CLIENT_H_
