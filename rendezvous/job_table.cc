#include "rendezvous/job_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/paging.h"
#include "rendezvous/job_events.h"

namespace elastrun::rendezvous {
namespace {

constexpr int kMaxMetrics = 256;

// A request id is its owner's: another user's equal id is another job.
std::string RequestKey(const v1::JobSpec& spec, const std::string& request_id) {
  return absl::StrCat(spec.has_owner() ? absl::StrCat(spec.owner().uid()) : "-", "/",
                      request_id);
}

// The newer of two progress reports by time; `a` on a tie.
const v1::Progress* Newer(const v1::Progress* a, const v1::Progress* b) {
  if (a == nullptr) return b;
  if (b == nullptr) return a;
  return FromProto(b->time()) > FromProto(a->time()) ? b : a;
}

}  // namespace

absl::Status JobTable::Restore(const Store::Contents& contents) {
  for (const v1::StoredJob& stored : contents.jobs) {
    auto job = std::make_unique<JobRecord>();
    job->id = stored.job_id();
    job->seq = stored.seq();
    job->spec = stored.spec();
    job->submit_time = FromProto(stored.submit_time());
    // The progress row is written more often than the record, but the
    // record carries the progress of its own write: take the newer.
    auto row = contents.progress.find(job->id);
    const v1::Progress* p =
        Newer(row == contents.progress.end() ? nullptr : &row->second,
              stored.has_last_progress() ? &stored.last_progress() : nullptr);
    if (p != nullptr) job->last_progress = *p;
    if (stored.has_core()) {
      absl::StatusOr<RendezvousState> state = FromProto(stored.core());
      absl::StatusOr<std::unique_ptr<RendezvousCore>> core =
          state.ok() ? RendezvousCore::Restore(*std::move(state))
                     : absl::StatusOr<std::unique_ptr<RendezvousCore>>(state.status());
      if (!core.ok()) {
        return absl::DataLossError(absl::StrFormat("%s: job \"%s\": %s", store_->where(),
                                                   job->id, core.status().message()));
      }
      job->core = *std::move(core);
    }
    for (const std::string& node : stored.placed()) job->placed.push_back(node);
    job->request_id = stored.request_id();
    if (!job->request_id.empty()) by_request_[RequestKey(job->spec, job->request_id)] = job.get();
    job->events.assign(stored.events().begin(), stored.events().end());
    next_seq_ = std::max(next_seq_, job->seq + 1);
    by_seq_.push_back(job.get());
    jobs_[job->id] = std::move(job);
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord*> JobTable::Submit(const v1::JobSpec& spec, absl::Time now,
                                            const std::string& request_id) {
  auto job = std::make_unique<JobRecord>();
  job->seq = next_seq_;
  job->spec = spec;
  job->request_id = request_id;
  job->id = absl::StrFormat("%s-%d", spec.name(), job->seq);
  // Ids start at 1 again in another state: the run id is unique anyway.
  if (job->spec.run_id().empty()) {
    job->spec.set_run_id(absl::StrCat(job->id, "@", store_->cluster_id()));
  }
  job->submit_time = now;
  RecordEvent(*job, now, kEventSubmitted, 0, "", -1,
              absl::StrFormat("nnodes %d:%d x %d", spec.min_nodes(), spec.max_nodes(),
                              spec.nproc_per_node()));
  if (absl::Status st = Write(*job); !st.ok()) {
    LOG(ERROR) << st;
    return st;
  }
  ++next_seq_;
  JobRecord* raw = job.get();
  by_seq_.push_back(raw);
  if (!request_id.empty()) by_request_[RequestKey(spec, request_id)] = raw;
  jobs_[raw->id] = std::move(job);
  return raw;
}

JobRecord* JobTable::FindRequest(const v1::JobSpec& spec, const std::string& request_id) const {
  if (request_id.empty()) return nullptr;
  auto it = by_request_.find(RequestKey(spec, request_id));
  return it == by_request_.end() ? nullptr : it->second;
}

absl::StatusOr<JobRecord*> JobTable::Find(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrFormat("no job \"%s\"", job_id));
  }
  return it->second.get();
}

absl::Status JobTable::Write(const JobRecord& job) {
  v1::StoredJob s;
  s.set_job_id(job.id);
  s.set_seq(job.seq);
  *s.mutable_spec() = job.spec;
  *s.mutable_submit_time() = ToProto(job.submit_time);
  s.set_request_id(job.request_id);
  for (const std::string& n : job.placed) s.add_placed(n);
  if (job.core) *s.mutable_core() = ToProto(job.core->state_snapshot());
  if (job.last_progress) *s.mutable_last_progress() = *job.last_progress;
  for (const v1::JobEvent& e : job.events) *s.add_events() = e;
  return store_->PutJob(s);
}

void JobTable::Persist(Outbox& out, JobRecord& job) {
  if (absl::Status st = Write(job); !st.ok()) {
    LOG(ERROR) << "job " << job.id << " not saved (retried): " << st;
    out.StoreFailed(std::move(st));
    if (!job.unsaved) {
      job.unsaved = true;
      job.retry_at = absl::InfinitePast();  // once more at the next tick
      job.retry_backoff = options_.retry_backoff;
      unsaved_.insert(&job);
    }
    return;
  }
  if (job.unsaved) {
    LOG(INFO) << "job " << job.id << " saved after a failed write";
    job.unsaved = false;
    unsaved_.erase(&job);
  }
  // The record holds the newest progress now; Restore prefers it over an
  // older row.
  job.progress_dirty = false;
  dirty_.erase(&job);
}

absl::Status JobTable::ReportProgress(Outbox& out, JobRecord& job, v1::Progress progress,
                                      absl::Time now) {
  if (progress.metrics_size() > kMaxMetrics) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ReportProgress.progress.metrics: %d entries; at most %d",
                        progress.metrics_size(), kMaxMetrics));
  }
  if (!progress.has_time()) *progress.mutable_time() = ToProto(now);
  job.last_progress = std::move(progress);
  job.progress_dirty = true;
  dirty_.insert(&job);
  if (now >= job.progress_written + options_.progress_interval)
    WriteProgress(out, job, now);
  return absl::OkStatus();
}

void JobTable::WriteProgress(Outbox& out, JobRecord& job, absl::Time now) {
  // Tried now whatever the outcome: a failing disk is retried one interval
  // later, not on every report.
  job.progress_written = now;
  if (absl::Status st = store_->PutProgress(job.id, *job.last_progress); !st.ok()) {
    LOG(ERROR) << st;
    out.StoreFailed(std::move(st));
    return;
  }
  job.progress_dirty = false;
  dirty_.erase(&job);
}

void JobTable::FlushProgress(Outbox& out, absl::Time now, bool all) {
  const std::vector<JobRecord*> pending(dirty_.begin(), dirty_.end());
  for (JobRecord* job : pending) {
    if (all || now >= job->progress_written + options_.progress_interval) {
      WriteProgress(out, *job, now);
    }
  }
}

void JobTable::RetryUnsaved(Outbox& out, absl::Time now) {
  const std::vector<JobRecord*> due(unsaved_.begin(), unsaved_.end());
  for (JobRecord* job : due) {
    if (job->retry_at > now) continue;
    Persist(out, *job);
    if (!job->unsaved) continue;
    job->retry_at = now + job->retry_backoff;
    job->retry_backoff = std::min(job->retry_backoff * 2, options_.max_retry_backoff);
  }
}

std::optional<absl::Time> JobTable::NextRetry() const {
  std::optional<absl::Time> next;
  for (const JobRecord* job : unsaved_) {
    if (!next || job->retry_at < *next) next = job->retry_at;
  }
  return next;
}

absl::Status JobTable::EnsureSaved(Outbox& out, JobRecord& job) {
  if (!job.unsaved) return absl::OkStatus();
  Outbox attempt;
  Persist(attempt, job);
  if (!job.unsaved) return absl::OkStatus();
  out.StoreFailed(attempt.store_status);
  return attempt.store_status;
}

std::optional<absl::Time> JobTable::NextProgressFlush() const {
  std::optional<absl::Time> next;
  for (const JobRecord* job : dirty_) {
    const absl::Time due = job->progress_written + options_.progress_interval;
    if (!next || due < *next) next = due;
  }
  return next;
}

absl::StatusOr<v1::ListJobsResponse> JobTable::List(const v1::ListJobsRequest& r) const {
  ASSIGN_OR_RETURN(const int size, PageSize(r.page_size(), "ListJobsRequest.page_size"));
  int64_t after = 0;
  if (!r.page_token().empty() && (!absl::SimpleAtoi(r.page_token(), &after) || after < 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ListJobsRequest.page_token: \"%s\" is not a token this service made; pass "
        "the next_page_token of the previous page, or none for the first",
        absl::CHexEscape(r.page_token().substr(0, 64))));
  }
  v1::ListJobsResponse resp;
  PageBudget page(size);
  auto it = std::upper_bound(by_seq_.begin(), by_seq_.end(), after,
                             [](int64_t seq, const JobRecord* job) { return seq < job->seq; });
  int64_t last = after;
  for (; it != by_seq_.end(); ++it) {
    const JobRecord* job = *it;
    v1::JobStatus s = JobStatusOf(*job, /*with_history=*/false);
    if (!r.states().empty() &&
        std::find(r.states().begin(), r.states().end(), s.state()) == r.states().end()) {
      continue;
    }
    if (!page.Take(s.ByteSizeLong())) {
      resp.set_next_page_token(absl::StrCat(last));
      break;
    }
    last = job->seq;
    *resp.add_jobs() = std::move(s);
  }
  return resp;
}

}  // namespace elastrun::rendezvous
