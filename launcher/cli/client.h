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
#include "common/tls.h"
#include "elastrun/v1/jobs.pb.h"

namespace elastrun::launcher {

// Where the service is and how to talk to it.
struct ServiceOptions {
  // "HOST:PORT" of elastrun-rendezvous (--rendezvous, $ELASTRUN_RENDEZVOUS).
  std::string address = "127.0.0.1:29400";
  // The cluster token, sent as "authorization: Bearer <token>" when not
  // empty (--token, --token-file, $ELASTRUN_TOKEN, $ELASTRUN_TOKEN_FILE).
  std::string token;
  // --tls-ca/--tls-cert/--tls-key/--tls-server-name or $ELASTRUN_TLS_*
  // (no TLS flag: plaintext), and the credentials made from them by
  // tls::MakeChannelCredentials, which reports bad files; null: plaintext.
  tls::TlsFiles tls;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With no token: the token file to try at the first call (the default
  // one; this user may not be allowed to read it), then the daemon's
  // credential socket for a credential of this user.
  std::string token_file;
  std::string cred_socket;
  // Deadline of every RPC.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // How long a read command (status, list, nodes, logs, wait) keeps retrying
  // a service it cannot reach (--retry-for): a restart takes seconds.
  absl::Duration retry_for = absl::Seconds(60);
};

// One connection to the Jobs service. Every call carries the deadline and
// the caller's identity: the token (then Submit states this user as the
// job's owner), else a credential from the local daemon, fetched at the
// first call and again before it expires. Without either, calls fail
// Unauthenticated saying what was tried. Errors keep the service's code (NotFound, InvalidArgument, ...);
// a service that cannot be reached or did not answer in time is Unavailable
// or DeadlineExceeded with a message that names the address.
class JobsClient {
 public:
  virtual ~JobsClient() = default;
  // The new job's id. `request_id` (SubmitRequest.request_id; "" for none)
  // makes a Submit sent again after a lost answer return the same job.
  virtual absl::StatusOr<std::string> Submit(const v1::JobSpec& spec,
                                             const std::string& request_id) = 0;
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
  // The job's timeline, oldest first. Not pure: a fake that has no events
  // to give answers Unimplemented.
  virtual absl::StatusOr<v1::EventsResponse> Events(const std::string& job_id);
};

// A new SubmitRequest.request_id: 128 random bits as 32 hex digits.
std::string NewRequestId();

// A client over a new gRPC channel to options.address (TLS with
// options.credentials, else plaintext). Connecting is lazy: an unreachable
// address shows up as the first call's Unavailable. A plaintext client
// whose service speaks TLS gets FailedPrecondition saying so; a TLS client
// whose handshake is refused, Unauthenticated saying why.
std::unique_ptr<JobsClient> NewGrpcJobsClient(const ServiceOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_CLIENT_H_
