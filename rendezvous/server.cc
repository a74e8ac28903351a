#include "rendezvous/server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "glog/logging.h"
#include "rendezvous/caller.h"
#include "rendezvous/server_calls.h"
#include "rendezvous/server_jobs.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {
namespace {

using calls::Audience;
using calls::AuthPolicy;
using calls::CheckCluster;
using calls::Unary;

// Bound on log traffic: one PushLogs request.
constexpr size_t kMaxPushLogsBytes = 4 << 20;

// Runs tasks in order on a thread of its own; the destructor runs what is
// queued, then joins. For work that must not run on gRPC's own threads.
class SerialExecutor {
 public:
  SerialExecutor() : thread_([this] { Loop(); }) {}
  ~SerialExecutor() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  void Post(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !queue_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;  // stopping, nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One node's Watch stream. Owned by itself (`self_`) until gRPC's OnDone and
// shared with the Coordinator, which may still hold it in an Outbox: after
// OnDone, Send and Close are no-ops. One write in flight at a time.
class WatchReactor : public grpc::ServerWriteReactor<v1::Command>, public NodeStream {
 public:
  // `closer` runs the detach from the coordinator when the stream is done.
  static std::shared_ptr<WatchReactor> Make(Coordinator* coordinator,
                                            SerialExecutor* closer, std::string node_id) {
    std::shared_ptr<WatchReactor> r(
        new WatchReactor(coordinator, closer, std::move(node_id)));
    absl::MutexLock lock(&r->mu_);  // no other thread sees r yet; the analysis wants it
    r->self_ = r;
    return r;
  }

  void Send(v1::Command command) override {
    {
      absl::MutexLock lock(&mu_);
      if (close_requested_ || done_) return;
      command.set_seq(++seq_);
      queue_.push_back(std::move(command));
    }
    Pump();
  }

  void Close(absl::Status status) override {
    {
      absl::MutexLock lock(&mu_);
      if (close_requested_ || done_) return;
      close_requested_ = true;
      close_status_ = std::move(status);
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok && !close_requested_) {
        close_requested_ = true;
        close_status_ = absl::UnavailableError("write to the node failed");
      }
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (!close_requested_) {
        close_requested_ = true;
        close_status_ = absl::CancelledError("the node closed its Watch stream");
      }
    }
    Pump();
  }

  void OnDone() override {
    std::shared_ptr<WatchReactor> keep;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      keep = std::move(self_);
    }
    // Not here: OnDone may run on the thread that polls gRPC's sockets, and
    // the detach writes the store (a node lost), which for etcd is a gRPC
    // call that needs that thread (measured: every etcd call of the
    // service stalled until its deadline). `keep` holds this object until
    // then (its address names the stream).
    closer_->Post([keep = std::move(keep)] {
      keep->coordinator_->DetachWatch(keep->node_id_, keep.get());
    });
  }

 private:
  WatchReactor(Coordinator* coordinator, SerialExecutor* closer, std::string node_id)
      : coordinator_(coordinator), closer_(closer), node_id_(std::move(node_id)) {}

  // Starts the next write or the Finish, outside the lock (gRPC may run a
  // reaction inline).
  void Pump() {
    bool write = false;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finishing_ || done_) return;
      if (close_requested_) {
        finishing_ = true;
        finish = true;
        status = rpc::ToGrpcStatus(close_status_);
      } else if (!queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
        write = true;
      }
    }
    if (write) StartWrite(&current_);
    if (finish) Finish(status);
  }

  Coordinator* const coordinator_;
  SerialExecutor* const closer_;
  const std::string node_id_;
  absl::Mutex mu_;
  std::shared_ptr<WatchReactor> self_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Command> queue_ ABSL_GUARDED_BY(mu_);
  v1::Command current_;  // the write in flight; touched only while writing_
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// A Barrier call waiting for the other nodes. Freed when both gRPC is done
// with it (OnDone) and the handler that registered the wait returned, since
// the completion may race with that handler.
class BarrierReactor : public grpc::ServerUnaryReactor {
 public:
  explicit BarrierReactor(Coordinator* coordinator) : coordinator_(coordinator) {}

  void Start(const v1::BarrierRequest& request) {
    const uint64_t id = coordinator_->Barrier(
        request, [this](absl::Status st) { Finish(rpc::ToGrpcStatus(st)); });
    id_.store(id);
    if (id != 0 && cancelled_.load()) coordinator_->AbandonBarrier(id);
    Unref();
  }
  void OnCancel() override {
    cancelled_.store(true);
    if (uint64_t id = id_.load(); id != 0) coordinator_->AbandonBarrier(id);
  }
  void OnDone() override { Unref(); }

 private:
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }
  Coordinator* const coordinator_;
  std::atomic<uint64_t> id_{0};
  std::atomic<bool> cancelled_{false};
  std::atomic<int> refs_{2};  // OnDone + Start
};

}  // namespace

class RendezvousServer::RendezvousService : public v1::Rendezvous::CallbackService {
 public:
  RendezvousService(Coordinator* c, LogStore* logs, AuthPolicy policy)
      : c_(c), logs_(logs), policy_(std::move(policy)) {}

  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* ctx,
                                         const v1::RegisterNodeRequest* req,
                                         v1::RegisterNodeResponse* resp) override {
    return Unary(ctx, policy_, Audience::kCluster, "RegisterNode", resp,
                 [&](const Caller&) { return c_->RegisterNode(*req); });
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    return Unary(ctx, policy_, Audience::kCluster, "Heartbeat", resp,
                 [&](const Caller&) { return c_->Heartbeat(*req); });
  }
  grpc::ServerWriteReactor<v1::Command>* Watch(grpc::CallbackServerContext* ctx,
                                               const v1::WatchRequest* req) override {
    std::shared_ptr<WatchReactor> r = WatchReactor::Make(c_, &closer_, req->node_id());
    absl::Status st = CheckCluster(ctx, policy_, "Watch");
    if (st.ok()) st = c_->AttachWatch(*req, r);
    if (!st.ok()) r->Close(st);
    return r.get();
  }
  grpc::ServerUnaryReactor* JoinRound(grpc::CallbackServerContext* ctx,
                                      const v1::JoinRoundRequest* req,
                                      v1::JoinRoundResponse* resp) override {
    return Unary(ctx, policy_, Audience::kCluster, "JoinRound", resp,
                 [&](const Caller&) { return c_->JoinRound(*req); });
  }
  grpc::ServerUnaryReactor* ReportExit(grpc::CallbackServerContext* ctx,
                                       const v1::ReportExitRequest* req,
                                       v1::ReportExitResponse* resp) override {
    return Unary(ctx, policy_, Audience::kCluster, "ReportExit", resp,
                 [&](const Caller&) { return c_->ReportExit(*req); });
  }
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx,
                                           const v1::ReportProgressRequest* req,
                                           v1::ReportProgressResponse* resp) override {
    return Unary(ctx, policy_, Audience::kCluster, "ReportProgress", resp,
                 [&](const Caller&) { return c_->ReportProgress(*req); });
  }
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx,
                                    const v1::BarrierRequest* req,
                                    v1::BarrierResponse* resp) override {
    if (absl::Status st = CheckCluster(ctx, policy_, "Barrier"); !st.ok()) {
      grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
      r->Finish(rpc::ToGrpcStatus(st));
      return r;
    }
    auto* r = new BarrierReactor(c_);
    r->Start(*req);
    return r;
  }

  grpc::ServerUnaryReactor* PushLogs(grpc::CallbackServerContext* ctx,
                                     const v1::PushLogsRequest* req,
                                     v1::PushLogsResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::Status st = CheckCluster(ctx, policy_, "PushLogs");
    if (st.ok()) st = CheckPush(*req);
    if (!st.ok()) {
      reactor->Finish(rpc::ToGrpcStatus(st));
      return reactor;
    }
    if (req->last()) c_->LogsDone(req->job_id(), req->node_id());
    if (req->chunks().empty()) {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    // Answered once the chunks are stored (committed, with --state-dir): an
    // OK lets the daemon forget them; Unavailable (not saved) makes it send
    // them again. No gRPC thread waits meanwhile. The sender's numbers let
    // the store skip a resend of chunks it committed but could not answer.
    logs_->Append(
        req->job_id(), {req->chunks().begin(), req->chunks().end()},
        LogStore::Origin{req->node_id(), req->incarnation(), req->first_chunk()},
        [reactor](absl::Status stored) { reactor->Finish(rpc::ToGrpcStatus(stored)); });
    return reactor;
  }

 private:
  // Whether the service takes `req`'s chunks.
  absl::Status CheckPush(const v1::PushLogsRequest& req) {
    if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: empty");
    if (req.incarnation().size() > static_cast<size_t>(kMaxIdLength)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "incarnation: %d characters; at most %d", req.incarnation().size(), kMaxIdLength));
    }
    if (req.first_chunk() < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "first_chunk: %d; chunks are numbered from 1 (0: not numbered)",
          req.first_chunk()));
    }
    size_t bytes = 0;
    for (const v1::LogChunk& c : req.chunks()) bytes += c.data().size();
    if (bytes > kMaxPushLogsBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunks: %d bytes in one PushLogs; at most %d", bytes, kMaxPushLogsBytes));
    }
    // Only jobs the service knows, from their own nodes: a stale or
    // stray daemon cannot fill memory or write into another job's logs.
    v1::GetJobRequest get;
    get.set_job_id(req.job_id());
    ASSIGN_OR_RETURN(v1::JobStatus job, c_->GetJob(get));
    if (!NodeInJob(job, req.node_id())) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "node \"%s\" is not and was not in a round of job %s: its log chunks are dropped",
          req.node_id(), req.job_id()));
    }
    const int64_t world =
        int64_t{job.spec().max_nodes()} * int64_t{job.spec().nproc_per_node()};
    for (int i = 0; i < req.chunks_size(); ++i) {
      const int rank = req.chunks(i).rank();
      if (rank < 0 || rank >= world) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "chunks[%d].rank: %d is not a rank of job %s (0..%d)", i, rank, req.job_id(),
            world - 1));
      }
    }
    return absl::OkStatus();
  }

  Coordinator* const c_;
  LogStore* const logs_;
  const AuthPolicy policy_;
  // Watch streams' ends, handled off gRPC's threads (WatchReactor::OnDone);
  // drained before this service (and so before the coordinator) goes.
  SerialExecutor closer_;
};

absl::Status CheckListenSecurity(const ServerOptions& options) {
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort(options.listen, "--listen", &host, &port));
  if (IsLoopbackHost(host)) return absl::OkStatus();
  if (options.token.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--listen %s is not a loopback address: give --token or --token-file so that "
        "only holders of the token can drive the cluster",
        options.listen));
  }
  if (options.tls.cert.empty() && !options.insecure) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--listen %s is not a loopback address and the service has no TLS: the token "
        "(root on every root daemon) would travel in clear. Give --tls-cert and "
        "--tls-key (README, \"TLS\"), or --insecure to serve plaintext anyway (a network "
        "only the cluster's machines reach)",
        options.listen));
  }
  return absl::OkStatus();
}

namespace {

LogStore::Options LogOptions(const ServerOptions& options) {
  LogStore::Options o;
  o.first_seq =
      std::max<int64_t>(1, absl::ToUnixMicros(options.coordinator.clock->Now()));
  o.max_jobs = options.logs_max_jobs;
  return o;
}

}  // namespace

RendezvousServer::RendezvousServer(ServerOptions options)
    : options_(std::move(options)), logs_([this] {
        LogStore::Options o = LogOptions(options_);
        // Runs under the store's lock; the coordinator never calls the store.
        o.keep = [this](const std::string& job) {
          return coordinator_ != nullptr && coordinator_->JobLive(job);
        };
        return o;
      }()) {}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Create(
    ServerOptions options) {
  RETURN_IF_ERROR(CheckListenSecurity(options));
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort(options.listen, "--listen", &host, &port));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   tls::MakeServerCredentials(options.tls));
  std::unique_ptr<RendezvousServer> s(new RendezvousServer(std::move(options)));
  RendezvousServer* raw = s.get();
  CoordinatorOptions copts = s->options_.coordinator;
  if (s->options_.timer_thread) copts.on_timers_changed = [raw] { raw->WakeTimer(); };
  ASSIGN_OR_RETURN(s->coordinator_, Coordinator::Create(std::move(copts)));
  AuthPolicy policy;
  policy.token = s->options_.token;
  if (s->options_.coordinator.clock != nullptr) policy.clock = s->options_.coordinator.clock;
  if (s->options_.open_logs || !s->options_.logs_path.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<LogDb> db, s->options_.open_logs
                                                    ? s->options_.open_logs()
                                                    : LogDb::Open(s->options_.logs_path));
    RETURN_IF_ERROR(s->logs_.Persist(std::move(db)));
  }
  s->rendezvous_service_ =
      std::make_unique<RendezvousService>(s->coordinator_.get(), &s->logs_, policy);
  s->jobs_service_ = std::make_unique<JobsService>(s->coordinator_.get(), &s->logs_, policy);

  if (!s->options_.metrics_listen.empty()) {
    metrics::MetricsServerOptions mo;
    mo.listen = s->options_.metrics_listen;
    ASSIGN_OR_RETURN(s->metrics_server_,
                     metrics::MetricsServer::Create(mo, &s->coordinator_->metrics()));
  }

  // grpc.health.v1.Health on the same port: SERVING while the server runs.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(s->options_.listen, std::move(credentials), &bound);
  builder.RegisterService(s->rendezvous_service_.get());
  builder.RegisterService(s->jobs_service_.get());
  rpc::ConfigureServicePort(builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || bound == 0) {
    s->coordinator_->Shutdown();
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s (in use, or not an address of this host)", s->options_.listen));
  }
  s->port_ = bound;
  s->address_ = absl::StrFormat("%s:%d", host, bound);
  if (s->options_.timer_thread) s->timer_ = std::thread([raw] { raw->TimerLoop(); });
  return s;
}

RendezvousServer::~RendezvousServer() { Shutdown(); }

void RendezvousServer::WakeTimer() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void RendezvousServer::TimerLoop() {
  Clock& clock = *(options_.coordinator.clock ? options_.coordinator.clock : &RealClock());
  while (true) {
    std::optional<absl::Time> next = coordinator_->Tick();
    // Wake at the next deadline or when a change may have moved it; the cap
    // only bounds the damage of a missed wake-up.
    absl::Duration wait = absl::Seconds(1);
    if (next) wait = std::min(wait, std::max(absl::ZeroDuration(), *next - clock.Now()));
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_ || stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), wait);
    if (stopping_) return;
    wake_ = false;
  }
}

void RendezvousServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      // Another thread is shutting down: return once it is done.
      mu_.Await(absl::Condition(&stopped_));
      return;
    }
    stopping_ = true;
  }
  // A partly built server (Create failed) has no coordinator or server.
  // Streams first, so that the server's shutdown does not wait for them.
  if (coordinator_) coordinator_->Shutdown();
  // Probes see NOT_SERVING while the server drains.
  if (server_ && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->Shutdown();
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (timer_.joinable()) timer_.join();
  logs_.Close();  // saves the last pushed logs
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void RendezvousServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

}  // namespace elastrun::rendezvous
