// The job commands, one function each. Results go to ctx.out, errors and
// notes to ctx.err; each returns its exit code (cli.h).
#include "launcher/cli/commands.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "common/strings.h"
#include "launcher/cli/format.h"
#include "launcher/cli/spec.h"

namespace elastrun::launcher::internal {
namespace {

constexpr absl::Duration kDefaultPollInterval = absl::Milliseconds(250);

// `wait`'s loop, also `submit --wait`'s: polls `job` every `poll` until it
// ends or `timeout` passes, prints its final status line to ctx.out, and
// returns the exit code.
int WaitUntilEnded(const ParsedArgs& a, const CliContext& ctx, const std::string& job,
                   absl::Duration timeout, absl::Duration poll);
// Backoff between two tries of a read while the service cannot be reached.
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);

// Makes the read calls of one command ride through a service restart: a
// call that fails Unavailable or DeadlineExceeded (service down or
// restarting, a stream cut mid-way) is made again, 50 ms apart doubling to
// 1 s, until the outage has lasted --retry-for or the caller's deadline has
// passed. Other errors (NotFound, InvalidArgument, PermissionDenied,
// Unauthenticated, ...) return at once: retrying cannot fix them. The start
// and the end of an outage each print one line to stderr. Not thread-safe.
class ReadRetrier {
 public:
  ReadRetrier(const ParsedArgs& a, const CliContext& ctx) : a_(a), ctx_(ctx) {}

  // `call()`'s result once it succeeds, fails for good, or fails past the
  // retry window; F returns an absl::StatusOr.
  template <typename F>
  auto Call(F call, absl::Time deadline = absl::InfiniteFuture()) -> decltype(call()) {
    std::optional<absl::Time> since;
    absl::Duration backoff = kFirstBackoff;
    for (;;) {
      auto r = call();
      if (r.ok() && in_outage_) {
        *ctx_.err << "elastrun " << a_.command << ": the service is back\n";
        in_outage_ = false;
      }
      if (r.ok() || ExitCodeFor(r.status()) != kExitUnreachable) return r;
      const absl::Time now = ctx_.clock->Now();
      if (!since) since = now;
      const absl::Time until = std::min(deadline, *since + a_.service.retry_for);
      if (now >= until) return r;
      if (!in_outage_) {
        *ctx_.err << "elastrun " << a_.command << ": service at " << a_.service.address
                  << " unavailable; retrying for up to "
                  << absl::FormatDuration(until - now) << " (" << r.status().message()
                  << ")\n";
        in_outage_ = true;
      }
      ctx_.sleep(std::min(backoff, until - now));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

 private:
  const ParsedArgs& a_;
  const CliContext& ctx_;
  bool in_outage_ = false;
};

// Pages fetched before giving up on a listing that does not end: each page
// holds at least one item, so only a broken service gets here.
constexpr int kMaxPages = 1 << 20;

// Every page of a list call merged into one response, as if the service had
// answered at once: `call(request)` fetches one page (retried through a
// service restart), `merge(all, page)` appends its items.
template <typename Req, typename Resp, typename Call, typename Merge>
absl::StatusOr<Resp> AllPages(ReadRetrier& retry, Req request, Call call, Merge merge) {
  Resp all;
  for (int i = 0; i < kMaxPages; ++i) {
    absl::StatusOr<Resp> page = retry.Call([&] { return call(request); });
    if (!page.ok()) return page.status();
    merge(all, *page);
    if (page->next_page_token().empty()) return all;
    if (page->next_page_token() == request.page_token()) break;
    request.set_page_token(page->next_page_token());
  }
  return absl::InternalError("the service's listing does not end (its page token repeats)");
}

// The JSON of a merged listing: the page token of its last page means
// nothing to a script.
Json ListingJson(const google::protobuf::Message& m) {
  Json j = ProtoJson(m);
  j.erase("next_page_token");
  return j;
}

int Fail(const ParsedArgs& a, const CliContext& ctx, const absl::Status& st, int code) {
  const std::string where = "elastrun " + a.command;
  if (code == kExitUsage) {
    *ctx.err << flags::UsageError(where, std::string(st.message()));
  } else {
    *ctx.err << where << ": " << st.message() << "\n";
  }
  return code;
}

int Fail(const ParsedArgs& a, const CliContext& ctx, const absl::Status& st) {
  return Fail(a, ctx, st, ExitCodeFor(st));
}

// The single JOB word of status/cancel/wait/logs, or a usage error.
absl::StatusOr<std::string> OneJob(const ParsedArgs& a) {
  if (a.positional.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expected one JOB id, got %d words", a.positional.size()));
  }
  return a.positional[0];
}

int NoWords(const ParsedArgs& a, const CliContext& ctx) {
  if (a.positional.empty()) return kExitOk;
  return Fail(a, ctx,
              absl::InvalidArgumentError(
                  absl::StrFormat("unexpected argument \"%s\"", a.positional[0])),
              kExitUsage);
}

bool Finished(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

void PrintStatusLine(const ParsedArgs& a, const CliContext& ctx, const v1::JobStatus& s) {
  if (a.json) {
    *ctx.out << ProtoJson(s).dump(2) << "\n";
  } else {
    *ctx.out << FormatJobLine(s) << "\n";
  }
}

// The spec from a job file (+ overrides) or from flags and "-- PROGRAM".
absl::StatusOr<v1::JobSpec> SpecFromArgs(const ParsedArgs& a) {
  SpecFlags f;
  auto take = [&](const char* flag, std::vector<std::string>* into) {
    if (auto it = a.flags.find(flag); it != a.flags.end()) *into = it->second;
  };
  take("--name", &f.name);
  take("--nnodes", &f.nnodes);
  take("--nproc-per-node", &f.nproc_per_node);
  take("--max-restarts", &f.max_restarts);
  take("--env", &f.env);
  take("--working-dir", &f.working_dir);
  take("--run-id", &f.run_id);
  take("--pool", &f.pool);
  take("--last-call-timeout", &f.last_call_timeout);
  take("--join-timeout", &f.join_timeout);
  take("--hang-timeout", &f.hang_timeout);
  f.wait_for_nodes = a.Has("--wait-for-nodes");
  f.program = a.program;

  if (a.positional.empty())
    return ApplySpecFlags(f, DefaultJobSpec(), /*from_file=*/false);
  if (!a.program.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "give a job file or \"-- PROGRAM ARGS\", not both (got \"%s\" and \"-- %s\")",
        a.positional[0], a.program[0]));
  }
  const std::string& file = a.positional[0];
  std::vector<std::string> overrides(a.positional.begin() + 1, a.positional.end());
  for (const std::string& o : overrides) {
    if (o.find('=') == std::string::npos && !absl::StartsWith(o, "~")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "\"%s\" after the job file is not KEY=VALUE; to run a program, put it after "
          "\"--\": elastrun submit [flags] -- PROGRAM ARGS",
          o));
    }
  }
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromYaml(file, overrides);
  if (!spec.ok()) {
    if (absl::IsNotFound(spec.status()) && !absl::EndsWith(file, ".yaml") &&
        !absl::EndsWith(file, ".yml")) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.status().message(),
          " (to run a program, put it after \"--\": elastrun submit [flags] -- ", file,
          " ...)"));
    }
    return spec;
  }
  return ApplySpecFlags(f, *std::move(spec), /*from_file=*/true);
}

}  // namespace

int Submit(const ParsedArgs& a, const CliContext& ctx) {
  absl::StatusOr<v1::JobSpec> spec = SpecFromArgs(a);
  if (spec.ok()) {
    // Workers run where the submitter stands, with what it exported, as
    // with Slurm: `submit -- python3 train.py` from a project folder works.
    const auto it = a.flags.find("--export");
    const std::string value = it == a.flags.end() ? "ALL" : it->second.back();
    const absl::Status exported = ApplyExport(
        value, ctx.environment ? ctx.environment() : std::vector<std::string>(), &*spec);
    if (!exported.ok()) spec = exported;
  }
  // --working-dir '' leaves the folder to each node's daemon.
  if (spec.ok() && spec->working_dir().empty() && !a.Has("--working-dir") && ctx.cwd) {
    spec->set_working_dir(ctx.cwd());
  }
  // Whatever went wrong locally (a missing file included) is the caller's
  // input: a usage error, nothing sent.
  if (!spec.ok()) return Fail(a, ctx, spec.status(), kExitUsage);
  // One id for this submission: sent again while the service cannot be
  // reached (a restart) or after a lost answer, it still makes one job.
  const std::string request_id = NewRequestId();
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  absl::StatusOr<std::string> id = retry.Call([&] { return client->Submit(*spec, request_id); });
  if (!id.ok()) return Fail(a, ctx, id.status());
  *ctx.out << *id << "\n";
  if (!a.Has("--wait")) return kExitOk;
  ctx.out->flush();  // the id is there while the job runs
  // stdout stays the id alone, for `id=$(elastrun submit --wait ...)`.
  CliContext report = ctx;
  report.out = ctx.err;
  return WaitUntilEnded(a, report, *id, absl::InfiniteDuration(), kDefaultPollInterval);
}

int Status(const ParsedArgs& a, const CliContext& ctx) {
  absl::StatusOr<std::string> job = OneJob(a);
  if (!job.ok()) return Fail(a, ctx, job.status(), kExitUsage);
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  absl::StatusOr<v1::JobStatus> s = retry.Call([&] { return client->Get(*job); });
  if (!s.ok()) return Fail(a, ctx, s.status());
  if (a.json) {
    *ctx.out << ProtoJson(*s).dump(2) << "\n";
  } else {
    *ctx.out << FormatJobStatus(*s);
  }
  return kExitOk;
}

int List(const ParsedArgs& a, const CliContext& ctx) {
  if (int rc = NoWords(a, ctx); rc != kExitOk) return rc;
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  absl::StatusOr<v1::ListJobsResponse> r = AllPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      retry, v1::ListJobsRequest(),
      [&](const v1::ListJobsRequest& req) { return client->List(req); },
      [](v1::ListJobsResponse& all, const v1::ListJobsResponse& page) {
        all.mutable_jobs()->MergeFrom(page.jobs());
      });
  if (!r.ok()) return Fail(a, ctx, r.status());
  if (a.json) {
    *ctx.out << ListingJson(*r).dump(2) << "\n";
  } else {
    *ctx.out << FormatJobList(*r);
  }
  return kExitOk;
}

namespace {

// `nodes drain NODE [--undo]` and `nodes remove NODE [--force]`.
int NodeAction(const ParsedArgs& a, const CliContext& ctx) {
  const std::string& verb = a.positional[0];
  auto usage = [&](const std::string& why) {
    return Fail(a, ctx, absl::InvalidArgumentError(why), kExitUsage);
  };
  if (verb != "drain" && verb != "remove") {
    return usage(absl::StrFormat("unknown nodes command \"%s\"; use drain or remove", verb));
  }
  if (a.positional.size() != 2) {
    return usage(absl::StrFormat("expected: elastrun nodes %s NODE", verb));
  }
  if (verb == "drain" && a.Has("--force")) return usage("--force is for nodes remove");
  if (verb == "remove" && a.Has("--undo")) return usage("--undo is for nodes drain");
  v1::NodeRequest req;
  req.set_node_id(a.positional[1]);
  req.set_undo(a.Has("--undo"));
  req.set_force(a.Has("--force"));
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  absl::StatusOr<v1::NodeInfo> n =
      verb == "drain" ? client->DrainNode(req) : client->RemoveNode(req);
  if (!n.ok()) return Fail(a, ctx, n.status());
  if (a.json) {
    *ctx.out << ProtoJson(*n).dump(2) << "\n";
  } else if (verb == "remove") {
    *ctx.out << "node " << n->node_id() << " removed\n";
  } else if (req.undo()) {
    *ctx.out << "node " << n->node_id() << " is no longer draining\n";
  } else {
    *ctx.out << "node " << n->node_id() << " draining"
             << (n->jobs().empty() ? "" : absl::StrCat("; its jobs go on: ",
                                                        absl::StrJoin(n->jobs(), ", ")))
             << "\n";
  }
  return kExitOk;
}

}  // namespace

int Events(const ParsedArgs& a, const CliContext& ctx) {
  absl::StatusOr<std::string> job = OneJob(a);
  if (!job.ok()) return Fail(a, ctx, job.status(), kExitUsage);
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  absl::StatusOr<v1::EventsResponse> r = retry.Call([&] { return client->Events(*job); });
  if (!r.ok()) return Fail(a, ctx, r.status());
  if (a.json || a.Has("--json")) {
    // One JSON array of events (not {"events": [...]}), so `jq '.[]'` reads it.
    Json events = Json::array();
    for (const v1::JobEvent& e : r->events()) events.push_back(ProtoJson(e));
    *ctx.out << events.dump(2) << "\n";
  } else {
    *ctx.out << FormatEvents(*r);
  }
  return kExitOk;
}

int Nodes(const ParsedArgs& a, const CliContext& ctx) {
  if (!a.positional.empty()) return NodeAction(a, ctx);
  if (a.Has("--undo") || a.Has("--force")) {
    return Fail(a, ctx,
                absl::InvalidArgumentError("--undo and --force need nodes drain|remove NODE"),
                kExitUsage);
  }
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  absl::StatusOr<v1::ListNodesResponse> r =
      AllPages<v1::ListNodesRequest, v1::ListNodesResponse>(
          retry, v1::ListNodesRequest(),
          [&](const v1::ListNodesRequest& req) { return client->ListNodes(req); },
          [](v1::ListNodesResponse& all, const v1::ListNodesResponse& page) {
            all.mutable_nodes()->MergeFrom(page.nodes());
          });
  if (!r.ok()) return Fail(a, ctx, r.status());
  if (a.json) {
    *ctx.out << ListingJson(*r).dump(2) << "\n";
  } else {
    *ctx.out << FormatNodeList(*r);
  }
  return kExitOk;
}

int Cancel(const ParsedArgs& a, const CliContext& ctx) {
  absl::StatusOr<std::string> job = OneJob(a);
  if (!job.ok()) return Fail(a, ctx, job.status(), kExitUsage);
  const std::string reason =
      a.Has("--reason") ? a.Last("--reason") : "cancelled with elastrun cancel";
  absl::StatusOr<v1::JobStatus> s = ctx.connect(a.service)->Cancel(*job, reason);
  if (!s.ok()) return Fail(a, ctx, s.status());
  PrintStatusLine(a, ctx, *s);
  return kExitOk;
}

int Wait(const ParsedArgs& a, const CliContext& ctx) {
  absl::StatusOr<std::string> job = OneJob(a);
  if (!job.ok()) return Fail(a, ctx, job.status(), kExitUsage);
  absl::Duration timeout = absl::InfiniteDuration();
  if (a.Has("--timeout")) {
    absl::StatusOr<absl::Duration> d = ParseDuration(a.Last("--timeout"), "--timeout");
    if (!d.ok()) return Fail(a, ctx, d.status(), kExitUsage);
    timeout = *d;
  }
  absl::Duration poll = kDefaultPollInterval;
  if (a.Has("--poll-interval")) {
    absl::StatusOr<absl::Duration> d =
        ParseDuration(a.Last("--poll-interval"), "--poll-interval");
    if (!d.ok()) return Fail(a, ctx, d.status(), kExitUsage);
    if (*d <= absl::ZeroDuration()) {
      return Fail(a, ctx,
                  absl::InvalidArgumentError("--poll-interval must be greater than 0"),
                  kExitUsage);
    }
    poll = *d;
  }

  return WaitUntilEnded(a, ctx, *job, timeout, poll);
}

namespace {

int WaitUntilEnded(const ParsedArgs& a, const CliContext& ctx, const std::string& job,
                   absl::Duration timeout, absl::Duration poll) {
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  const absl::Time start = ctx.clock->Now();
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + timeout;
  auto get = [&] { return client->Get(job); };
  // A wrong job id fails at once; an unreachable service is retried (it may
  // be restarting) for --retry-for, but not past --timeout.
  absl::StatusOr<v1::JobStatus> s = retry.Call(get, deadline);
  if (!s.ok()) return Fail(a, ctx, s.status());
  while (!Finished(s->state())) {
    if (ctx.clock->Now() >= deadline) {
      *ctx.err << "elastrun wait: " << job << " did not end within "
               << absl::FormatDuration(timeout) << "\n";
      PrintStatusLine(a, ctx, *s);
      return kExitTimeout;
    }
    ctx.sleep(std::min(poll, deadline - ctx.clock->Now()));
    absl::StatusOr<v1::JobStatus> next = retry.Call(get, deadline);
    // An outage cut short by --timeout is the timeout, reported above.
    if (!next.ok() && !(ExitCodeFor(next.status()) == kExitUnreachable &&
                        ctx.clock->Now() >= deadline)) {
      return Fail(a, ctx, next.status());
    }
    if (next.ok()) s = *std::move(next);
  }
  PrintStatusLine(a, ctx, *s);
  // A failure's root cause as `elastrun run` prints it (torchrun's block),
  // for people: on stderr, stdout keeping the status line.
  if (!a.json && s->state() == v1::JOB_STATE_FAILED && s->has_root_cause()) {
    const v1::WorkerFailure& f = s->root_cause();
    *ctx.err << FormatRootCauseBlock(
        f, absl::StrCat("<the --log-dir of node ", f.node_id(), "'s elastrund>/", s->job_id(),
                        "/attempt_", f.round()));
  }
  return s->state() == v1::JOB_STATE_SUCCEEDED ? kExitOk : kExitFailed;
}

}  // namespace

int Logs(const ParsedArgs& a, const CliContext& ctx) {
  absl::StatusOr<std::string> job = OneJob(a);
  if (!job.ok()) return Fail(a, ctx, job.status(), kExitUsage);
  int rank = -1;
  if (a.Has("--rank")) {
    absl::StatusOr<int64_t> r = ParseInt(a.Last("--rank"), "--rank", 0, 1 << 20);
    if (!r.ok()) return Fail(a, ctx, r.status(), kExitUsage);
    rank = static_cast<int>(*r);
  }
  const bool follow = a.Has("--follow");
  std::unique_ptr<JobsClient> client = ctx.connect(a.service);
  ReadRetrier retry(a, ctx);
  auto get = [&] { return client->Get(*job); };
  // The job first: an unknown id says so at once.
  absl::StatusOr<v1::JobStatus> s = retry.Call(get);
  if (!s.ok()) return Fail(a, ctx, s.status());
  int64_t after = 0;
  RankPrefixer prefixer;
  // Polls since the job was seen finished without every node's last lines
  // (the service says so after 30 s anyway; this bounds an older one).
  int finished_polls = 0;
  constexpr int kMaxFinishedPolls = 160;  // 40 s of 250 ms
  for (;;) {
    // Read the job's state before the logs: once it is seen finished, one
    // more read gets everything its nodes sent before the end.
    const bool finished = s->state() == v1::JOB_STATE_SUCCEEDED ||
                          s->state() == v1::JOB_STATE_FAILED ||
                          s->state() == v1::JOB_STATE_CANCELLED;
    // A read cut by a restart is made again from the same `after`: chunks
    // carry the service's sequence number, and a cut read prints nothing
    // (ReadLogs returns all or an error), so no chunk is printed twice.
    absl::StatusOr<std::vector<v1::LogChunk>> chunks =
        retry.Call([&] { return client->ReadLogs(*job, rank, after); });
    if (!chunks.ok()) return Fail(a, ctx, chunks.status());
    for (const v1::LogChunk& c : *chunks) {
      if (c.gap_before()) {
        ctx.out->flush();
        *ctx.err
            << "elastrun logs: output of job " << *job
            << " was dropped before this point (the service keeps the newest 8 MiB of "
               "a job's output); its nodes have all of it under their daemon's "
               "--log-dir\n";
      }
      // With every rank, each line says whose it is, as on `elastrun run`'s
      // console; with --rank R the lines are as the worker wrote them.
      if (rank < 0) {
        *ctx.out << prefixer.Prefix(c.rank(), c.stream(), c.data());
      } else {
        *ctx.out << c.data();
      }
      after = std::max(after, c.seq());
    }
    ctx.out->flush();
    if (!follow) {
      // One read returns at most 4 MiB: read on to the end of what the
      // service keeps.
      if (chunks->empty()) return kExitOk;
      continue;
    }
    // Finished, and every node's last lines are in: nothing more will come.
    if (finished && chunks->empty() &&
        (s->logs_complete() || ++finished_polls > kMaxFinishedPolls)) {
      break;
    }
    if (chunks->empty()) ctx.sleep(absl::Milliseconds(250));
    absl::StatusOr<v1::JobStatus> next = retry.Call(get);
    if (!next.ok()) return Fail(a, ctx, next.status());
    s = *std::move(next);
  }
  // Followed to its end: the outcome, as `wait` gives it.
  if (s->state() == v1::JOB_STATE_SUCCEEDED) return kExitOk;
  // On stderr: stdout holds the job's own output.
  *ctx.err << "elastrun logs: " << FormatJobLine(*s) << "\n";
  return kExitFailed;
}

}  // namespace elastrun::launcher::internal
