#include "bench/rendezvous/trial.h"

#include <errno.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "bench/rendezvous/service.h"
#include "bench/rendezvous/sim.h"

namespace elastrun::bench {
namespace {

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

// What one trial holds while it runs.
struct Run {
  const Options& o;
  int n;
  Scenario sc;
  std::string dir;
  Service svc;
  std::unique_ptr<Sim> sim;
  Trial t;
};

// The phases of `round` relative to `t0` (ns), into t.
void SetPhases(Run& r, int64_t round, int64_t t0, int64_t last_ns) {
  const Sim::Phases ph = r.sim->PhasesOf(round);
  r.t.value_s = (last_ns - t0) / 1e9;
  r.t.cmds_s = (ph.last_cmd_ns - t0) / 1e9;
  r.t.joined_s = (ph.last_joined_ns - t0) / 1e9;
  r.t.first_start_s = (ph.first_start_ns - t0) / 1e9;
}

bool SetUp(Run& r, const std::string& state) {
  std::vector<std::string> flags;
  if (state == "sqlite") flags = {"--state-dir", r.dir + "/state"};
  if (state == "etcd") {
    flags = {"--store", "etcd://" + r.o.etcd_endpoints, "--etcd-prefix",
             "/bench" + r.dir};  // the trial's folder: a fresh, empty cluster
  }
  if (!StartService(r.o.service, flags, r.dir + "/service.log", r.o.pin ? 0 : -1, &r.svc,
                    &r.t.error)) {
    return false;
  }
  r.sim = std::make_unique<Sim>(r.svc.addr, r.n, std::min(r.o.channels, r.n));
  const int64_t t_setup = NowNs();
  if (!r.sim->RegisterAndWatch(r.o.timeout_s, &r.t.error)) return false;
  r.t.setup_s = (NowNs() - t_setup) / 1e9;
  return true;
}

// Submits the job and waits for round 0 on every node; the join figure.
bool RunRound0(Run& r) {
  v1::SubmitRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_name("bench");
  spec->set_min_nodes(r.sc == Scenario::kJoin ? r.n : r.n - 1);
  spec->set_max_nodes(r.n);
  spec->set_nproc_per_node(1);
  spec->set_max_restarts(0);
  spec->add_argv("/bin/true");
  const ProcStats p0 = ReadProc(r.svc.pid);
  const double b0 = SelfCpu();
  const int64_t t_submit = NowNs();
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(10));
    ctx.AddMetadata("authorization", kBenchAuthorization);
    v1::SubmitResponse resp;
    grpc::Status s = r.sim->jobs()->Submit(&ctx, req, &resp);
    if (!s.ok()) {
      r.t.error = "Submit: " + s.error_message();
      return false;
    }
  }
  if (!r.sim->WaitStarted(0, r.n, r.o.timeout_s)) {
    r.t.error = "not every node got round 0's StartAttempt within " +
                std::to_string(r.o.timeout_s) + " s";
    return false;
  }
  const ProcStats p1 = ReadProc(r.svc.pid);
  const double b1 = SelfCpu();
  std::vector<Node*> all;
  for (int i = 0; i < r.n; ++i) all.push_back(r.sim->node(i));
  int64_t last0 = 0;
  if (std::string e = CheckRound(*r.sim, all, 0, r.n, &last0); !e.empty()) {
    r.t.error = "round 0: " + e;
    return false;
  }
  if (r.sc == Scenario::kJoin) {
    SetPhases(r, 0, r.sim->FirstJoinNs(0), last0);
    r.t.submit_s = (last0 - t_submit) / 1e9;
    r.t.cpu_s = p1.cpu_s - p0.cpu_s;
    r.t.bench_cpu_s = b1 - b0;
  }
  return true;
}

// The node holding group rank n/2 in round 0 goes away; the loss figure.
bool MeasureLoss(Run& r) {
  Node* victim = nullptr;
  std::vector<Node*> survivors;
  for (int i = 0; i < r.n; ++i) {
    Node* node = r.sim->node(i);
    if (r.sim->StartOf(node, 0).group_rank == r.n / 2) {
      victim = node;
    } else {
      survivors.push_back(node);
    }
  }
  // Let the round settle (StopAttempt/other traffic done) before the loss.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const ProcStats pl = ReadProc(r.svc.pid);
  const double bl = SelfCpu();
  int64_t t_loss = 0;
  if (r.sc == Scenario::kLossClose) {
    t_loss = NowNs();
    r.sim->Silence(victim);
    victim->watch->Cancel();
  } else {
    t_loss = r.sim->Silence(victim);  // its last heartbeat: the lease runs from there
  }
  if (!r.sim->WaitStarted(1, r.n - 1, r.o.timeout_s)) {
    r.t.error = "not every survivor got round 1's StartAttempt within " +
                std::to_string(r.o.timeout_s) + " s";
    return false;
  }
  const ProcStats pe = ReadProc(r.svc.pid);
  const double be = SelfCpu();
  int64_t last1 = 0;
  if (std::string e = CheckRound(*r.sim, survivors, 1, r.n - 1, &last1); !e.empty()) {
    r.t.error = "round 1: " + e;
    return false;
  }
  SetPhases(r, 1, t_loss, last1);
  r.t.cpu_s = pe.cpu_s - pl.cpu_s;
  r.t.bench_cpu_s = be - bl;
  return true;
}

// Submits o.submits queued jobs, 32 in flight; the submit figure.
bool MeasureSubmits(Run& r) {
  constexpr int kInFlight = 32;
  struct Calls {
    std::mutex mu;
    std::condition_variable cv;
    int next = 0, done = 0, in_flight = 0;
    std::string error;
  } calls;
  const int total = r.o.submits;
  v1::SubmitRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_min_nodes(r.n + 1);  // never placed: it waits for nodes
  spec->set_max_nodes(r.n + 1);
  spec->set_nproc_per_node(1);
  spec->set_wait_for_nodes(true);
  spec->add_argv("/bin/true");
  struct Submit {
    grpc::ClientContext ctx;
    v1::SubmitRequest req;
    v1::SubmitResponse resp;
  };
  // Sends the next submits while fewer than kInFlight are out; under mu.
  std::function<void()> fill = [&] {
    while (calls.next < total && calls.in_flight < kInFlight) {
      auto* s = new Submit;
      s->req = req;
      s->req.mutable_spec()->set_name("bench-" + std::to_string(calls.next));
      s->ctx.set_deadline(DeadlineIn(r.o.timeout_s));
      s->ctx.AddMetadata("authorization", kBenchAuthorization);
      ++calls.next;
      ++calls.in_flight;
      r.sim->jobs()->async()->Submit(&s->ctx, &s->req, &s->resp, [&, s](grpc::Status st) {
        std::lock_guard<std::mutex> l(calls.mu);
        if (!st.ok() && calls.error.empty())
          calls.error = "Submit: " + st.error_message();
        delete s;
        --calls.in_flight;
        ++calls.done;
        fill();
        calls.cv.notify_all();
      });
    }
  };
  const ProcStats p0 = ReadProc(r.svc.pid);
  const double b0 = SelfCpu();
  const int64_t t0 = NowNs();
  std::unique_lock<std::mutex> l(calls.mu);
  fill();
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(r.o.timeout_s * 1000));
  const bool all = calls.cv.wait_until(l, deadline, [&] { return calls.done == total; });
  const int64_t t1 = NowNs();
  if (!all) {
    r.t.error = std::to_string(calls.done) + " of " + std::to_string(total) +
                " submits answered within " + std::to_string(r.o.timeout_s) + " s";
    // The calls still out reference `calls`: wait for them without a bound.
    calls.next = total;
    calls.cv.wait(l, [&] { return calls.in_flight == 0; });
    return false;
  }
  if (!calls.error.empty()) {
    r.t.error = calls.error;
    return false;
  }
  r.t.value_s = (t1 - t0) / 1e9;
  r.t.cpu_s = ReadProc(r.svc.pid).cpu_s - p0.cpu_s;
  r.t.bench_cpu_s = SelfCpu() - b0;
  return true;
}

void TearDown(Run& r) {
  if (r.t.ok && r.sim && r.sim->ErrorCount() > 0) {
    r.t.ok = false;
    r.t.error =
        std::to_string(r.sim->ErrorCount()) + " RPC errors, first: " + r.sim->Errors()[0];
  }
  if (r.svc.pid > 0) r.t.hwm_mib = ReadProc(r.svc.pid).hwm_mib;
  if (r.sim) r.sim->StopHeartbeats();
  StopService(&r.svc);
  if (r.sim && !r.sim->WaitQuiet(10)) {
    // Calls or streams still pending: leaking the simulation is safer than
    // freeing reactors gRPC may still call.
    std::fprintf(stderr, "warning: gRPC calls still pending after the service stopped\n");
    r.sim.release();
  }
  r.sim.reset();
  std::error_code ec;
  if (!r.o.keep && r.t.ok) {
    std::filesystem::remove_all(r.dir, ec);
  } else if (!r.t.ok) {
    std::fprintf(stderr, "trial failed, kept %s\n", r.dir.c_str());
  }
}

}  // namespace

const char* ScenarioName(Scenario s) {
  switch (s) {
    case Scenario::kJoin: return "join";
    case Scenario::kLossClose: return "loss-close";
    case Scenario::kLossLease: return "loss-lease";
    case Scenario::kSubmit:
      return "submit";
  }
  return "?";
}

Trial RunTrial(const Options& o, int n, Scenario sc, const std::string& state) {
  char tmpl[] = "/tmp/rdzv-bench.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    Trial t;
    t.error = std::string("mkdtemp: ") + std::strerror(errno);
    return t;
  }
  Run r{o, n, sc, tmpl, {}, nullptr, {}};
  r.t.ok = SetUp(r, state) &&
           (sc == Scenario::kSubmit
                ? MeasureSubmits(r)
                : RunRound0(r) && (sc == Scenario::kJoin || MeasureLoss(r)));
  TearDown(r);
  return r.t;
}

}  // namespace elastrun::bench
