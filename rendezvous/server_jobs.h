// The users' Jobs service of elastrun-rendezvous (submit, status, list,
// cancel, nodes, events, logs): each call checks who asks (server_calls.h)
// and what they may see, then asks the Coordinator. Internal to server*.cc.
#ifndef ELASTRUN_RENDEZVOUS_SERVER_JOBS_H_
#define ELASTRUN_RENDEZVOUS_SERVER_JOBS_H_

#include <grpcpp/grpcpp.h>

#include <utility>

#include "elastrun/v1/jobs.grpc.pb.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/log_store.h"
#include "rendezvous/server.h"
#include "rendezvous/server_calls.h"

namespace elastrun::rendezvous {

class RendezvousServer::JobsService : public v1::Jobs::CallbackService {
 public:
  JobsService(Coordinator* c, LogStore* logs, calls::AuthPolicy policy)
      : c_(c), logs_(logs), policy_(std::move(policy)) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx,
                                   const v1::SubmitRequest* req,
                                   v1::SubmitResponse* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const v1::GetJobRequest* req,
                                v1::JobStatus* resp) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const v1::ListJobsRequest* req,
                                 v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const v1::CancelJobRequest* req,
                                   v1::JobStatus* resp) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override;
  grpc::ServerUnaryReactor* DrainNode(grpc::CallbackServerContext* ctx,
                                      const v1::NodeRequest* req,
                                      v1::NodeInfo* resp) override;
  grpc::ServerUnaryReactor* RemoveNode(grpc::CallbackServerContext* ctx,
                                       const v1::NodeRequest* req,
                                       v1::NodeInfo* resp) override;
  grpc::ServerUnaryReactor* Events(grpc::CallbackServerContext* ctx,
                                   const v1::EventsRequest* req,
                                   v1::EventsResponse* resp) override;
  grpc::ServerWriteReactor<v1::LogChunk>* StreamLogs(
      grpc::CallbackServerContext* ctx, const v1::StreamLogsRequest* req) override;

 private:
  Coordinator* const c_;
  LogStore* const logs_;
  const calls::AuthPolicy policy_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_SERVER_JOBS_H_
