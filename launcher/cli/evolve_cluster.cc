#include "launcher/cli/evolve_cluster.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "evolve/evolve_io.h"

namespace elastrun::launcher {
namespace {

bool Finished(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

bool Transient(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st);
}

class ClusterBackend : public evolve::TrialBackend {
 public:
  explicit ClusterBackend(EvolveClusterOptions o) : o_(std::move(o)) {
    if (!o_.sleep) o_.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  }

  absl::Status Open() {
    const std::string id_file = o_.output_dir + "/evolve_run_id";
    std::ifstream in(id_file);
    const bool known = static_cast<bool>(in >> run_id_);
    if (!known) {
      absl::BitGen gen;
      run_id_ = absl::StrFormat("%08x", absl::Uniform<uint32_t>(gen));
      if (absl::Status st = evolve::WriteFileAtomically(id_file, run_id_ + "\n"); !st.ok()) {
        return st;
      }
    }
    journal_path_ = o_.output_dir + "/evolve_jobs.csv";
    std::ifstream journal(journal_path_);
    for (std::string line; std::getline(journal, line);) {
      const std::vector<std::string> f = absl::StrSplit(line, ',');
      if (f.size() == 2 && f[0] != "individual") known_[f[0]] = f[1];
    }
    const bool fresh = !std::filesystem::exists(journal_path_);
    journal_.open(journal_path_, std::ios::app);
    if (!journal_) return absl::InternalError(journal_path_ + ": cannot be written");
    if (fresh) journal_ << "individual,job_id\n" << std::flush;
    if (!known) return absl::OkStatus();
    // A run that started before: its jobs on the service, by name (a
    // submit whose answer never came back is in no journal).
    absl::StatusOr<std::map<std::string, std::string>> listed = ListOurs();
    if (!listed.ok()) return listed.status();
    for (const auto& [name, job] : *listed) known_.emplace(name, job);
    return absl::OkStatus();
  }

  absl::Status Start(const std::string& name, const evolve::TrialCommand& cmd,
                     const std::string& log) override {
    if (auto it = known_.find(name); it != known_.end()) {
      absl::StatusOr<v1::JobStatus> job = Retry([&] { return o_.client->Get(it->second); });
      if (job.ok()) {
        running_[name] = Job{it->second, log, "", /*adopted=*/true};
        return absl::OkStatus();
      }
      if (!absl::IsNotFound(job.status())) return job.status();
      // The service no longer knows it (its state was lost): submit again.
    }
    v1::JobSpec spec = o_.base;
    spec.set_name(JobName(name));
    spec.clear_argv();
    for (const std::string& a : cmd.argv) spec.add_argv(a);
    for (const std::string& e : cmd.env) {
      const size_t eq = e.find('=');
      (*spec.mutable_env())[e.substr(0, eq)] = e.substr(eq + 1);
    }
    // One request id: a submit sent again (the service restarting, an
    // answer lost) makes one job.
    const std::string request_id = NewRequestId();
    absl::StatusOr<std::string> id = Retry([&] { return o_.client->Submit(spec, request_id); });
    if (!id.ok()) return id.status();
    journal_ << name << "," << *id << "\n" << std::flush;
    known_[name] = *id;
    running_[name] = Job{*id, log, "", false};
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<evolve::TrialEnd>> WaitAny(absl::Duration timeout) override {
    const absl::Time end = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                                : absl::Now() + timeout;
    while (!running_.empty()) {
      for (auto it = running_.begin(); it != running_.end(); ++it) {
        absl::StatusOr<v1::JobStatus> job = Retry([&] { return o_.client->Get(it->second.id); });
        evolve::TrialEnd e{it->first, false, ""};
        if (absl::IsNotFound(job.status())) {
          e.reason = absl::StrCat("job ", it->second.id, " is gone from the service");
        } else if (!job.ok()) {
          return job.status();
        } else if (!Finished(job->state())) {
          it->second.queued = job->state() == v1::JOB_STATE_PENDING &&
                              job->phase() == v1::ROUND_PHASE_QUEUED;
          continue;
        } else {
          CopyLog(it->second);
          e.succeeded = job->state() == v1::JOB_STATE_SUCCEEDED;
          if (!e.succeeded) {
            e.reason = !it->second.stopped.empty()
                           ? it->second.stopped
                           : absl::StrCat("job ", it->second.id, " ",
                                          v1::JobState_Name(job->state()).substr(10), ": ",
                                          job->finish_reason(), "; log ", it->second.log);
          }
        }
        running_.erase(it);
        return std::optional<evolve::TrialEnd>(std::move(e));
      }
      const absl::Time now = absl::Now();
      if (now >= end) break;
      o_.sleep(std::min(o_.poll, end - now));
    }
    return std::optional<evolve::TrialEnd>();
  }

  absl::Status Stop(const std::string& name, const std::string& why) override {
    auto it = running_.find(name);
    if (it == running_.end()) return absl::NotFoundError(absl::StrCat(name, " is not running"));
    it->second.stopped = why;
    absl::StatusOr<v1::JobStatus> st =
        Retry([&] { return o_.client->Cancel(it->second.id, "elastrun evolve: " + why); });
    return st.status();
  }

  int Waiting() const override {
    int n = 0;
    for (const auto& [name, job] : running_) n += job.queued;
    return n;
  }

  std::string Where(const std::string& name) const override {
    auto it = running_.find(name);
    if (it == running_.end()) return "";
    return absl::StrCat("job ", it->second.id, it->second.adopted ? ", adopted" : "");
  }

 private:
  struct Job {
    std::string id, log;
    std::string stopped;  // why Stop cancelled it
    bool adopted = false;
    bool queued = false;  // the service had not placed it at the last look
  };

  // "ind_3_7" -> "evolve-<run>-3-7".
  std::string JobName(const std::string& name) const {
    return absl::StrCat("evolve-", run_id_, "-",
                        absl::StrReplaceAll(absl::StripPrefix(name, "ind_"), {{"_", "-"}}));
  }

  template <typename F>
  auto Retry(F call) -> decltype(call()) {
    const absl::Time end = absl::Now() + o_.retry_for;
    while (true) {
      auto r = call();
      if (r.ok() || !Transient(r.status()) || absl::Now() >= end) return r;
      o_.sleep(absl::Seconds(1));
    }
  }

  // This run's jobs on the service: individual name -> newest job id.
  absl::StatusOr<std::map<std::string, std::string>> ListOurs() {
    const std::string prefix = absl::StrCat("evolve-", run_id_, "-");
    std::map<std::string, std::string> ours;
    v1::ListJobsRequest req;
    while (true) {
      absl::StatusOr<v1::ListJobsResponse> page = Retry([&] { return o_.client->List(req); });
      if (!page.ok()) return page.status();
      for (const v1::JobStatus& j : page->jobs()) {
        absl::string_view n = j.spec().name();
        if (!absl::ConsumePrefix(&n, prefix)) continue;
        ours[absl::StrCat("ind_", absl::StrReplaceAll(n, {{"-", "_"}}))] = j.job_id();
      }
      if (page->next_page_token().empty()) return ours;
      req.set_page_token(page->next_page_token());
    }
  }

  // The job's output as the service kept it, into its log file.
  void CopyLog(const Job& job) {
    std::ofstream out(job.log, std::ios::app | std::ios::binary);
    int64_t after = 0;
    for (int call = 0; call < 1000; ++call) {
      absl::StatusOr<std::vector<v1::LogChunk>> chunks = o_.client->ReadLogs(job.id, -1, after);
      if (!chunks.ok() || chunks->empty()) return;
      for (const v1::LogChunk& c : *chunks) {
        out << c.data();
        after = std::max(after, c.seq());
      }
    }
  }

  EvolveClusterOptions o_;
  std::string run_id_;
  std::string journal_path_;
  std::ofstream journal_;
  std::map<std::string, std::string> known_;  // individual -> job id
  std::map<std::string, Job> running_;        // individual -> its job
};

}  // namespace

absl::StatusOr<std::unique_ptr<evolve::TrialBackend>> NewClusterBackend(
    EvolveClusterOptions options) {
  auto backend = std::make_unique<ClusterBackend>(std::move(options));
  if (absl::Status st = backend->Open(); !st.ok()) return st;
  return backend;
}

}  // namespace elastrun::launcher
