// elastrun-rendezvous-bench: rendezvous at scale. Starts the real
// `elastrun-rendezvous` as a subprocess and simulates N node daemons in this
// process through the real gRPC API (RegisterNode + Heartbeat, a Watch stream
// each, JoinRound on a JoinRound command, the assignment as StartAttempt on
// Watch), then measures:
//
//   join        nnodes N:N job: first JoinRound sent -> every node holds its
//               StartAttempt (assignment checked: ranks 0..N-1 unique, one
//               round, one MASTER_ADDR/MASTER_PORT, the rank-0 node's port).
//   loss-close  nnodes (N-1):N job running on N nodes: one node stops
//               heartbeating and closes its Watch stream (a crashed daemon)
//               -> every survivor holds the next round's StartAttempt.
//   loss-lease  as loss-close, but the node only goes silent (network cut):
//               timed from its last heartbeat, so the lease is included.
//
// plus the service's CPU time over the measured interval (/proc/PID/stat
// utime+stime) and its peak RSS (/proc/PID/status VmHWM). Every trial starts
// a fresh service (in memory, and with --state-dir for SQLite), every wait
// has a deadline, and the service is stopped by its pid (SIGTERM, then
// SIGKILL). See bench/README.md.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"

namespace {

namespace v1 = elastrun::v1;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
std::chrono::system_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

constexpr int kPortBase = 20000;  // node i reserves MASTER_PORT kPortBase + i

// ---------------------------------------------------------------- service

struct Service {
  pid_t pid = -1;
  std::string addr;
};

struct ProcStats {
  double cpu_s = 0;  // utime + stime
  double hwm_mib = 0;
};

ProcStats ReadProc(pid_t pid) {
  ProcStats p;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(text.substr(close + 2));
    std::string field;
    // Fields after the command: state(3) ... utime(14) stime(15).
    std::vector<std::string> f;
    while (in >> field && f.size() < 13) f.push_back(field);
    if (f.size() >= 13) {
      const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
      p.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;
    }
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) p.hwm_mib = std::stod(line.substr(6)) / 1024.0;
  }
  return p;
}

double SelfCpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// Starts `bin --listen 127.0.0.1:0 [--state-dir DIR]`, stderr to `log`,
// and reads "listening on HOST:PORT" (10 s deadline). `cpu` >= 0: the
// service runs on that CPU only.
bool StartService(const std::string& bin, const std::string& state_dir, const std::string& log,
                  int cpu, Service* s, std::string* error) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  std::vector<std::string> args = {bin, "--listen", "127.0.0.1:0"};
  if (!state_dir.empty()) {
    args.push_back("--state-dir");
    args.push_back(state_dir);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    dup2(out[1], 1);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  s->pid = pid;
  std::string buf;
  const int64_t deadline = NowNs() + 10'000'000'000LL;
  while (buf.find('\n') == std::string::npos) {
    const int64_t left_ms = (deadline - NowNs()) / 1'000'000;
    pollfd p{out[0], POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) {
      *error = "no \"listening on\" line from the service within 10 s (log: " + log + ")";
      close(out[0]);
      return false;
    }
    char chunk[256];
    ssize_t n = read(out[0], chunk, sizeof chunk);
    if (n <= 0) {
      *error = "the service exited before listening (log: " + log + ")";
      close(out[0]);
      return false;
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
  close(out[0]);  // the service prints one line; it ignores SIGPIPE
  const std::string prefix = "listening on ";
  const size_t at = buf.find(prefix);
  if (at == std::string::npos) {
    *error = "unexpected first line from the service: " + buf;
    return false;
  }
  s->addr = buf.substr(at + prefix.size(), buf.find('\n', at) - at - prefix.size());
  return true;
}

// SIGTERM, up to 5 s for a clean exit, then SIGKILL. By pid only.
void StopService(Service* s) {
  if (s->pid <= 0) return;
  kill(s->pid, SIGTERM);
  const int64_t deadline = NowNs() + 5'000'000'000LL;
  while (NowNs() < deadline) {
    if (waitpid(s->pid, nullptr, WNOHANG) == s->pid) {
      s->pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "warning: service %d did not stop on SIGTERM in 5 s; SIGKILL\n", s->pid);
  kill(s->pid, SIGKILL);
  waitpid(s->pid, nullptr, 0);
  s->pid = -1;
}

// ---------------------------------------------------------------- nodes

struct StartInfo {
  int64_t ns = 0;
  int group_rank = -1;
  int group_world_size = 0;
  int world_size = 0;
  int64_t restart_count = 0;
  std::string master_addr;
  int master_port = 0;
  std::string error;  // an inconsistency seen in this node's copy
};

class Sim;
class Watcher;

struct Node {
  int idx = 0;
  std::string id, incarnation, addr;
  v1::Rendezvous::Stub* stub = nullptr;
  // Heartbeat state, guarded by Sim::hb_mu_.
  bool hb_on = true;
  int64_t next_hb_ns = 0;
  int64_t last_hb_ns = 0;
  std::unique_ptr<Watcher> watch;
  // Guarded by Sim::mu_.
  std::map<int64_t, StartInfo> starts;  // by round
  int stops = 0, end_jobs = 0;
};

template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

class Sim {
 public:
  Sim(const std::string& target, int n, int channels) : n_(n) {
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      // Own connection per channel (not one shared subchannel).
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("elastrun.bench.channel", c);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
      auto ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(v1::Rendezvous::NewStub(ch));
      if (c == 0) jobs_ = v1::Jobs::NewStub(ch);
      channels_.push_back(std::move(ch));
    }
    nodes_.reserve(n);
    for (int i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->idx = i;
      char buf[64];
      std::snprintf(buf, sizeof buf, "node-%05d", i);
      node->id = buf;
      std::snprintf(buf, sizeof buf, "inc-%d-%lld", i, static_cast<long long>(NowNs()));
      node->incarnation = buf;
      std::snprintf(buf, sizeof buf, "10.%d.%d.%d", 1 + i / 65536, (i / 256) % 256, i % 256);
      node->addr = buf;
      node->stub = stubs_[i % channels].get();
      nodes_.push_back(std::move(node));
    }
  }

  int n() const { return n_; }
  Node* node(int i) { return nodes_[i].get(); }
  v1::Jobs::Stub* jobs() { return jobs_.get(); }

  // Registers every node (concurrently), then opens every Watch stream and
  // waits for each Welcome.
  bool RegisterAndWatch(double timeout_s, std::string* error);
  void StartHeartbeats();
  void StopHeartbeats();
  // The node goes silent: no more heartbeats. Returns its last heartbeat's
  // send time.
  int64_t Silence(Node* node) {
    std::lock_guard<std::mutex> l(hb_mu_);
    node->hb_on = false;
    return node->last_hb_ns;
  }

  void OnCommand(Node* node, const v1::Command& c);
  void OnWatchDone(Node* node, const grpc::Status& s);

  // Waits until `count` nodes hold a StartAttempt for `round`.
  bool WaitStarted(int64_t round, int count, double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_until(l, Clock::now() + Secs(timeout_s),
                          [&] { return started_[round] >= count; });
  }
  int64_t FirstJoinNs(int64_t round) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = first_join_ns_.find(round);
    return it == first_join_ns_.end() ? 0 : it->second;
  }
  // Phases of a round: the last JoinRound command received, the last
  // JoinRound call answered, the first StartAttempt received.
  struct Phases {
    int64_t last_cmd_ns = 0, last_joined_ns = 0, first_start_ns = 0;
  };
  Phases PhasesOf(int64_t round) {
    std::lock_guard<std::mutex> l(mu_);
    return phases_[round];
  }
  StartInfo StartOf(Node* node, int64_t round) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = node->starts.find(round);
    return it == node->starts.end() ? StartInfo{} : it->second;
  }
  std::vector<std::string> Errors() {
    std::lock_guard<std::mutex> l(mu_);
    return errors_;
  }
  int ErrorCount() {
    std::lock_guard<std::mutex> l(mu_);
    return error_count_;
  }
  // Waits until no unary call is in flight and every Watch stream ended.
  bool WaitQuiet(double timeout_s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_until(l, Clock::now() + Secs(timeout_s), [&] {
      return in_flight_ == 0 && watches_done_ == watches_started_;
    });
  }

 private:
  using Clock = std::chrono::steady_clock;
  static Clock::duration Secs(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  void RecordError(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    ++error_count_;
    if (errors_.size() < 5) errors_.push_back(what);
  }
  void CallStarted() {
    std::lock_guard<std::mutex> l(mu_);
    ++in_flight_;
  }
  void CallDone() {
    std::lock_guard<std::mutex> l(mu_);
    --in_flight_;
    cv_.notify_all();
  }
  void SendHeartbeat(Node* node);
  void HeartbeatLoop();

  const int n_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
  std::vector<std::unique_ptr<Node>> nodes_;

  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  int welcomed_ = 0;
  int watches_started_ = 0, watches_done_ = 0;
  std::map<int64_t, int> started_;          // round -> nodes holding its StartAttempt
  std::map<int64_t, int64_t> first_join_ns_;  // round -> first JoinRound sent
  std::map<int64_t, Phases> phases_;          // round -> its phases
  std::vector<std::string> errors_;
  int error_count_ = 0;
  std::atomic<bool> stopping_{false};

  std::mutex hb_mu_;
  int64_t hb_interval_ns_ = 1'000'000'000;
  std::atomic<bool> hb_stop_{false};
  std::thread hb_thread_;

  friend class Watcher;
};

class Watcher : public grpc::ClientReadReactor<v1::Command> {
 public:
  Watcher(Sim* sim, Node* node) : sim_(sim), node_(node) {
    req_.set_node_id(node->id);
    req_.set_incarnation(node->incarnation);
    node->stub->async()->Watch(&ctx_, &req_, this);
    StartRead(&cmd_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    sim_->OnCommand(node_, cmd_);
    StartRead(&cmd_);
  }
  void OnDone(const grpc::Status& s) override { sim_->OnWatchDone(node_, s); }
  void Cancel() { ctx_.TryCancel(); }

 private:
  Sim* sim_;
  Node* node_;
  grpc::ClientContext ctx_;
  v1::WatchRequest req_;
  v1::Command cmd_;
};

bool Sim::RegisterAndWatch(double timeout_s, std::string* error) {
  for (auto& node : nodes_) {
    auto* call = new Call<v1::RegisterNodeRequest, v1::RegisterNodeResponse>;
    call->ctx.set_deadline(DeadlineIn(timeout_s));
    call->ctx.set_wait_for_ready(true);
    call->req.set_node_id(node->id);
    call->req.set_incarnation(node->incarnation);
    call->req.set_addr(node->addr);
    call->req.set_slots(1);
    CallStarted();
    Node* n = node.get();
    n->stub->async()->RegisterNode(&call->ctx, &call->req, &call->resp,
                                   [this, call, n](grpc::Status s) {
                                     if (!s.ok()) {
                                       RecordError("RegisterNode " + n->id + ": " +
                                                   s.error_message());
                                     } else if (n->idx == 0) {
                                       const auto& d = call->resp.heartbeat_interval();
                                       hb_interval_ns_ = d.seconds() * 1'000'000'000LL +
                                                         d.nanos();
                                     }
                                     delete call;
                                     CallDone();
                                   });
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_until(l, Clock::now() + Secs(timeout_s), [&] { return in_flight_ == 0; })) {
      *error = "RegisterNode calls did not finish in time";
      return false;
    }
    if (error_count_ > 0) {
      *error = "RegisterNode failed: " + errors_.front();
      return false;
    }
  }
  for (auto& node : nodes_) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++watches_started_;
    }
    node->watch = std::make_unique<Watcher>(this, node.get());
  }
  std::unique_lock<std::mutex> l(mu_);
  if (!cv_.wait_until(l, Clock::now() + Secs(timeout_s), [&] { return welcomed_ >= n_; })) {
    *error = "only " + std::to_string(welcomed_) + " of " + std::to_string(n_) +
             " Watch streams got their Welcome in time";
    return false;
  }
  return true;
}

void Sim::OnCommand(Node* node, const v1::Command& c) {
  switch (c.kind_case()) {
    case v1::Command::kWelcome: {
      std::lock_guard<std::mutex> l(mu_);
      ++welcomed_;
      cv_.notify_all();
      break;
    }
    case v1::Command::kJoinRound: {
      if (stopping_) break;
      auto* call = new Call<v1::JoinRoundRequest, v1::JoinRoundResponse>;
      call->ctx.set_deadline(DeadlineIn(30));
      call->req.set_job_id(c.join_round().job_id());
      call->req.set_round(c.join_round().round());
      call->req.set_node_id(node->id);
      call->req.set_master_port(kPortBase + node->idx);
      call->req.set_local_world_size(c.join_round().spec().nproc_per_node());
      const int64_t round = c.join_round().round();
      {
        std::lock_guard<std::mutex> l(mu_);
        ++in_flight_;
        const int64_t now = NowNs();
        auto [it, inserted] = first_join_ns_.emplace(round, now);
        if (!inserted && now < it->second) it->second = now;
        phases_[round].last_cmd_ns = now;
      }
      node->stub->async()->JoinRound(&call->ctx, &call->req, &call->resp,
                                     [this, call, node](grpc::Status s) {
                                       {
                                         std::lock_guard<std::mutex> l(mu_);
                                         phases_[call->req.round()].last_joined_ns = NowNs();
                                       }
                                       if (!s.ok()) {
                                         RecordError("JoinRound " + node->id + " round " +
                                                     std::to_string(call->req.round()) +
                                                     ": " + s.error_message());
                                       }
                                       delete call;
                                       CallDone();
                                     });
      break;
    }
    case v1::Command::kStart: {
      const int64_t now = NowNs();
      const v1::Assignment& a = c.start().assignment();
      StartInfo si;
      si.ns = now;
      si.group_world_size = a.group_world_size();
      si.world_size = a.world_size();
      si.restart_count = a.restart_count();
      si.master_addr = a.master_addr();
      si.master_port = a.master_port();
      // A node's StartAttempt carries only its own entry.
      if (a.nodes_size() != 1 || a.nodes(0).node_id() != node->id) {
        si.error = "StartAttempt does not carry exactly this node's entry";
      } else {
        const v1::NodeAssignment& na = a.nodes(0);
        si.group_rank = na.group_rank();
        if (na.group_rank() == 0) {
          // MASTER_ADDR/PORT are those of the rank-0 node.
          const int idx0 = std::atoi(na.node_id().c_str() + 5);
          if (a.master_addr() != na.addr() || a.master_port() != kPortBase + idx0) {
            si.error = "master addr/port is not the rank-0 node's";
          }
        }
      }
      std::lock_guard<std::mutex> l(mu_);
      if (node->starts.emplace(a.round(), std::move(si)).second) {
        if (started_[a.round()]++ == 0) phases_[a.round()].first_start_ns = now;
        cv_.notify_all();
      }
      break;
    }
    case v1::Command::kStop: {
      std::lock_guard<std::mutex> l(mu_);
      ++node->stops;
      break;
    }
    case v1::Command::kEndJob: {
      std::lock_guard<std::mutex> l(mu_);
      ++node->end_jobs;
      break;
    }
    default:
      break;
  }
}

void Sim::OnWatchDone(Node* node, const grpc::Status& s) {
  std::lock_guard<std::mutex> l(mu_);
  ++watches_done_;
  cv_.notify_all();
}

void Sim::SendHeartbeat(Node* node) {
  auto* call = new Call<v1::HeartbeatRequest, v1::HeartbeatResponse>;
  call->ctx.set_deadline(DeadlineIn(5));
  call->req.set_node_id(node->id);
  call->req.set_incarnation(node->incarnation);
  CallStarted();
  node->stub->async()->Heartbeat(&call->ctx, &call->req, &call->resp,
                                 [this, call, node](grpc::Status s) {
                                   if (!s.ok() && !stopping_) {
                                     RecordError("Heartbeat " + node->id + ": " +
                                                 s.error_message());
                                   }
                                   delete call;
                                   CallDone();
                                 });
}

void Sim::HeartbeatLoop() {
  while (!hb_stop_) {
    const int64_t now = NowNs();
    {
      std::lock_guard<std::mutex> l(hb_mu_);
      for (auto& node : nodes_) {
        if (!node->hb_on || now < node->next_hb_ns) continue;
        node->last_hb_ns = now;
        node->next_hb_ns += hb_interval_ns_;
        if (node->next_hb_ns < now) node->next_hb_ns = now + hb_interval_ns_;
        SendHeartbeat(node.get());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Sim::StartHeartbeats() {
  {
    // Spread the nodes over one interval, as independent daemons would be.
    std::lock_guard<std::mutex> l(hb_mu_);
    const int64_t now = NowNs();
    for (auto& node : nodes_) {
      node->last_hb_ns = now;  // RegisterNode just renewed the lease
      node->next_hb_ns = now + hb_interval_ns_ * node->idx / n_;
    }
  }
  hb_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void Sim::StopHeartbeats() {
  stopping_ = true;
  hb_stop_ = true;
  if (hb_thread_.joinable()) hb_thread_.join();
}

// ---------------------------------------------------------------- trials

enum class Scenario { kJoin, kLossClose, kLossLease };
const char* ScenarioName(Scenario s) {
  switch (s) {
    case Scenario::kJoin: return "join";
    case Scenario::kLossClose: return "loss-close";
    case Scenario::kLossLease: return "loss-lease";
  }
  return "?";
}

struct Options {
  std::string service;
  std::vector<int> ns = {10, 100, 1000};
  std::vector<Scenario> scenarios = {Scenario::kJoin, Scenario::kLossClose,
                                     Scenario::kLossLease};
  std::vector<bool> sqlite = {false, true};
  int reps = 3;
  int channels = 8;
  double timeout_s = 60;
  bool keep = false;
  bool verbose = false;
  bool pin = false;  // service on CPU 0, this process on the others
};

struct Trial {
  bool ok = false;
  std::string error;
  double setup_s = 0;   // N RegisterNode + N Watch (Welcome)
  double value_s = 0;   // the scenario's figure
  double submit_s = 0;  // join: Submit sent -> all assigned
  double cpu_s = 0;     // service CPU over the measured interval
  double bench_cpu_s = 0;  // this process (the N simulated daemons), same interval
  double hwm_mib = 0;   // service peak RSS over the whole trial
  // From the figure's start: every JoinRound command received, every
  // JoinRound answered, the first StartAttempt received.
  double cmds_s = 0, joined_s = 0, first_start_s = 0;
};

// Checks the StartAttempts of `nodes` for `round`: one consistent view.
std::string CheckRound(Sim& sim, const std::vector<Node*>& nodes, int64_t round, int gws,
                       int64_t* last_ns) {
  std::set<int> ranks;
  std::string master;
  *last_ns = 0;
  for (Node* node : nodes) {
    StartInfo si = sim.StartOf(node, round);
    if (si.ns == 0) return node->id + ": no StartAttempt for round " + std::to_string(round);
    if (!si.error.empty()) return node->id + ": " + si.error;
    if (si.group_world_size != gws || si.world_size != gws) {
      return node->id + ": group_world_size " + std::to_string(si.group_world_size) +
             ", expected " + std::to_string(gws);
    }
    if (si.group_rank < 0 || si.group_rank >= gws) return node->id + ": not in its assignment";
    if (!ranks.insert(si.group_rank).second) {
      return "group rank " + std::to_string(si.group_rank) + " given twice";
    }
    const std::string m = si.master_addr + ":" + std::to_string(si.master_port);
    if (master.empty()) master = m;
    if (m != master) return "two masters: " + master + " and " + m;
    *last_ns = std::max(*last_ns, si.ns);
  }
  return "";
}

Trial RunTrial(const Options& o, int n, Scenario sc, bool sqlite) {
  Trial t;
  std::error_code ec;
  char tmpl[] = "/tmp/rdzv-bench.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    t.error = std::string("mkdtemp: ") + std::strerror(errno);
    return t;
  }
  const std::string dir = tmpl;
  Service svc;
  std::unique_ptr<Sim> sim;
  auto fail = [&](const std::string& why) { t.error = why; };
  do {
    if (!StartService(o.service, sqlite ? dir + "/state" : "", dir + "/service.log",
                      o.pin ? 0 : -1, &svc, &t.error)) {
      break;
    }
    sim = std::make_unique<Sim>(svc.addr, n, std::min(o.channels, n));
    const int64_t t_setup = NowNs();
    if (!sim->RegisterAndWatch(o.timeout_s, &t.error)) break;
    t.setup_s = (NowNs() - t_setup) / 1e9;
    sim->StartHeartbeats();

    // Round 0.
    const int min_nodes = sc == Scenario::kJoin ? n : n - 1;
    v1::SubmitRequest req;
    v1::JobSpec* spec = req.mutable_spec();
    spec->set_name("bench");
    spec->set_min_nodes(min_nodes);
    spec->set_max_nodes(n);
    spec->set_nproc_per_node(1);
    spec->set_max_restarts(0);
    spec->add_argv("/bin/true");
    const ProcStats p0 = ReadProc(svc.pid);
    const double b0 = SelfCpu();
    const int64_t t_submit = NowNs();
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(10));
      v1::SubmitResponse resp;
      grpc::Status s = sim->jobs()->Submit(&ctx, req, &resp);
      if (!s.ok()) {
        fail("Submit: " + s.error_message());
        break;
      }
    }
    if (!sim->WaitStarted(0, n, o.timeout_s)) {
      fail("not every node got round 0's StartAttempt within " +
           std::to_string(o.timeout_s) + " s");
      break;
    }
    const ProcStats p1 = ReadProc(svc.pid);
    const double b1 = SelfCpu();
    std::vector<Node*> all;
    for (int i = 0; i < n; ++i) all.push_back(sim->node(i));
    int64_t last0 = 0;
    if (std::string e = CheckRound(*sim, all, 0, n, &last0); !e.empty()) {
      fail("round 0: " + e);
      break;
    }
    if (sc == Scenario::kJoin) {
      t.value_s = (last0 - sim->FirstJoinNs(0)) / 1e9;
      const Sim::Phases ph = sim->PhasesOf(0);
      t.cmds_s = (ph.last_cmd_ns - sim->FirstJoinNs(0)) / 1e9;
      t.joined_s = (ph.last_joined_ns - sim->FirstJoinNs(0)) / 1e9;
      t.first_start_s = (ph.first_start_ns - sim->FirstJoinNs(0)) / 1e9;
      t.submit_s = (last0 - t_submit) / 1e9;
      t.cpu_s = p1.cpu_s - p0.cpu_s;
      t.bench_cpu_s = b1 - b0;
      t.ok = true;
      break;
    }

    // Node loss: the node holding group rank n/2 in round 0 goes away.
    Node* victim = nullptr;
    std::vector<Node*> survivors;
    for (Node* node : all) {
      if (sim->StartOf(node, 0).group_rank == n / 2) {
        victim = node;
      } else {
        survivors.push_back(node);
      }
    }
    // Let the round settle (StopAttempt/other traffic done) before the loss.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const ProcStats pl = ReadProc(svc.pid);
    const double bl = SelfCpu();
    int64_t t_loss = 0;
    if (sc == Scenario::kLossClose) {
      t_loss = NowNs();
      sim->Silence(victim);
      victim->watch->Cancel();
    } else {
      t_loss = sim->Silence(victim);  // its last heartbeat: the lease runs from there
    }
    if (!sim->WaitStarted(1, n - 1, o.timeout_s)) {
      fail("not every survivor got round 1's StartAttempt within " +
           std::to_string(o.timeout_s) + " s");
      break;
    }
    const ProcStats pe = ReadProc(svc.pid);
    const double be = SelfCpu();
    int64_t last1 = 0;
    if (std::string e = CheckRound(*sim, survivors, 1, n - 1, &last1); !e.empty()) {
      fail("round 1: " + e);
      break;
    }
    t.value_s = (last1 - t_loss) / 1e9;
    const Sim::Phases ph = sim->PhasesOf(1);
    t.cmds_s = (ph.last_cmd_ns - t_loss) / 1e9;
    t.joined_s = (ph.last_joined_ns - t_loss) / 1e9;
    t.first_start_s = (ph.first_start_ns - t_loss) / 1e9;
    t.cpu_s = pe.cpu_s - pl.cpu_s;
    t.bench_cpu_s = be - bl;
    t.ok = true;
  } while (false);

  if (t.ok && sim && sim->ErrorCount() > 0) {
    t.ok = false;
    t.error = std::to_string(sim->ErrorCount()) + " RPC errors, first: " + sim->Errors()[0];
  }
  if (svc.pid > 0) t.hwm_mib = ReadProc(svc.pid).hwm_mib;
  if (sim) sim->StopHeartbeats();
  StopService(&svc);
  if (sim && !sim->WaitQuiet(10)) {
    // Calls or streams still pending: leaking the simulation is safer than
    // freeing reactors gRPC may still call.
    std::fprintf(stderr, "warning: gRPC calls still pending after the service stopped\n");
    sim.release();
  }
  sim.reset();
  if (!o.keep && t.ok) {
    std::filesystem::remove_all(dir, ec);
  } else if (!t.ok) {
    std::fprintf(stderr, "trial failed, kept %s\n", dir.c_str());
  }
  return t;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

constexpr char kUsage[] = R"(usage: elastrun-rendezvous-bench [flags]

Simulates N node daemons against a real elastrun-rendezvous (started here
on 127.0.0.1:0, a fresh one per trial) through the gRPC API and times the
rendezvous. See bench/README.md.

flags:
  --n LIST          node counts (default 10,100,1000)
  --scenarios LIST  join,loss-close,loss-lease (default all)
  --state LIST      memory,sqlite (default both; sqlite = --state-dir)
  --reps K          trials per cell (default 3)
  --channels C      gRPC channels (connections) for the N nodes (default 8)
  --timeout S       deadline of each wait (default 60)
  --service PATH    elastrun-rendezvous (default: next to this binary)
  --pin             run the service on CPU 0 and the simulated daemons on
                    the other CPUs (as if the service had a core to itself)
  --keep            keep every trial's folder (service log, state)
  --verbose         one line per trial
)";

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options o;
  {
    std::string self = std::filesystem::canonical("/proc/self/exe").string();
    o.service = self.substr(0, self.rfind('/') + 1) + "elastrun-rendezvous";
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--n") {
      o.ns.clear();
      for (const std::string& s : Split(value())) o.ns.push_back(std::stoi(s));
    } else if (a == "--scenarios") {
      o.scenarios.clear();
      for (const std::string& s : Split(value())) {
        if (s == "join") o.scenarios.push_back(Scenario::kJoin);
        else if (s == "loss-close") o.scenarios.push_back(Scenario::kLossClose);
        else if (s == "loss-lease") o.scenarios.push_back(Scenario::kLossLease);
        else {
          std::fprintf(stderr, "unknown scenario %s\n", s.c_str());
          return 2;
        }
      }
    } else if (a == "--state") {
      o.sqlite.clear();
      for (const std::string& s : Split(value())) {
        if (s != "memory" && s != "sqlite") {
          std::fprintf(stderr, "--state: memory or sqlite, not %s\n", s.c_str());
          return 2;
        }
        o.sqlite.push_back(s == "sqlite");
      }
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--channels") {
      o.channels = std::max(1, std::stoi(value()));
    } else if (a == "--timeout") {
      o.timeout_s = std::stod(value());
    } else if (a == "--service") {
      o.service = value();
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a == "--keep") {
      o.keep = true;
    } else if (a == "--verbose") {
      o.verbose = true;
    } else {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (o.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 1; c < ncpu; ++c) CPU_SET(c, &set);
    if (ncpu < 2 || sched_setaffinity(0, sizeof set, &set) != 0) {
      std::fprintf(stderr, "--pin needs at least 2 CPUs\n");
      return 2;
    }
  }
  if (access(o.service.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "no executable service at %s (--service)\n", o.service.c_str());
    return 2;
  }
  for (int n : o.ns) {
    if (n < 2) {
      std::fprintf(stderr, "--n: every N must be >= 2\n");
      return 2;
    }
  }

  struct Row {
    int n;
    Scenario sc;
    bool sqlite;
    std::vector<Trial> trials;
  };
  std::vector<Row> rows;
  std::vector<std::string> phase_lines;
  auto Fmt = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", x);
    return std::string(b);
  };
  for (int n : o.ns) {
    for (Scenario sc : o.scenarios) {
      for (bool sqlite : o.sqlite) {
        Row row{n, sc, sqlite, {}};
        for (int r = 0; r < o.reps; ++r) {
          Trial t = RunTrial(o, n, sc, sqlite);
          if (o.verbose || !t.ok) {
            std::fprintf(stderr, "N=%d %s %s rep %d: %s value %.3f s submit %.3f s cpu %.3f s "
                         "bench cpu %.3f s hwm %.1f MiB setup %.3f s%s%s\n",
                         n, ScenarioName(sc), sqlite ? "sqlite" : "memory", r,
                         t.ok ? "ok" : "FAILED", t.value_s, t.submit_s, t.cpu_s,
                         t.bench_cpu_s, t.hwm_mib,
                         t.setup_s, t.ok ? "" : ": ", t.error.c_str());
          }
          row.trials.push_back(std::move(t));
          if (!row.trials.back().ok) break;  // a failed cell stops early
        }
        rows.push_back(std::move(row));
      }
    }
  }

  std::printf("\n| N | scenario | state | time s, median (min-max) | submit->all s | "
              "service CPU s | daemons' CPU s | service peak RSS MiB | register+watch s | "
              "ok |\n");
  std::printf("|---:|---|---|---|---:|---:|---:|---:|---:|---|\n");
  for (const Row& row : rows) {
    std::vector<double> v, sub, cpu, bcpu, setup, cmds, joined, first;
    double hwm = 0;
    int ok = 0;
    for (const Trial& t : row.trials) {
      hwm = std::max(hwm, t.hwm_mib);
      if (!t.ok) continue;
      ++ok;
      v.push_back(t.value_s);
      sub.push_back(t.submit_s);
      cpu.push_back(t.cpu_s);
      bcpu.push_back(t.bench_cpu_s);
      cmds.push_back(t.cmds_s);
      joined.push_back(t.joined_s);
      first.push_back(t.first_start_s);
      setup.push_back(t.setup_s);
    }
    char time[96] = "-", submit[32] = "-";
    if (!v.empty()) {
      std::snprintf(time, sizeof time, "%.3f (%.3f-%.3f)", Median(v),
                    *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()));
    }
    if (row.sc == Scenario::kJoin && !sub.empty()) {
      std::snprintf(submit, sizeof submit, "%.3f", Median(sub));
    }
    phase_lines.push_back(std::to_string(row.n) + " " + ScenarioName(row.sc) + " " +
                          (row.sqlite ? "sqlite" : "memory") + ": last JoinRound command " +
                          Fmt(Median(cmds)) + ", last JoinRound answered " +
                          Fmt(Median(joined)) + ", first StartAttempt " +
                          Fmt(Median(first)) + ", last StartAttempt " + Fmt(Median(v)));
    std::printf("| %d | %s | %s | %s | %s | %.2f | %.2f | %.0f | %.3f | %d/%d%s |\n", row.n,
                ScenarioName(row.sc), row.sqlite ? "sqlite" : "memory", time, submit,
                Median(cpu), Median(bcpu), hwm, Median(setup), ok, static_cast<int>(row.trials.size()),
                ok == static_cast<int>(row.trials.size()) ? "" : " FAILED");
  }
  std::printf("\nPhases, s from the figure's start (medians; loss-lease from the last "
              "heartbeat, so they include the lease):\n");
  for (const std::string& l : phase_lines) std::printf("  %s\n", l.c_str());
  bool all_ok = true;
  for (const Row& row : rows) {
    for (const Trial& t : row.trials) all_ok = all_ok && t.ok;
  }
  return all_ok ? 0 : 1;
}
