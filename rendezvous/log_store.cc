#include "rendezvous/log_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"

namespace elastrun::rendezvous {
namespace {

// Evicted jobs remembered, so that reading one's log says it was evicted.
constexpr size_t kEvictedKept = 4096;

// Appends the deletions of `next` to `carry` (which holds no chunks: a
// failed write's chunks are dropped), keeping the order the LogDb applies:
// jobs dropped, chunks added, trims.
void Merge(LogDb::Batch& carry, LogDb::Batch next) {
  for (std::string& job : next.dropped_jobs) {
    carry.trim_below.erase(job);
    carry.senders.erase(job);
    carry.dropped_jobs.push_back(std::move(job));
  }
  for (auto& c : next.chunks) carry.chunks.push_back(std::move(c));
  for (auto& [job, nodes] : next.senders) {
    for (auto& [node, sender] : nodes) carry.senders[job][node] = std::move(sender);
  }
  for (const auto& [job, below] : next.trim_below) {
    carry.trim_below[job] = std::max(carry.trim_below[job], below);
  }
}

}  // namespace

void LogStore::TrimLocked(const std::string& job_id, JobLog& log) {
  bool trimmed = false;
  while (log.bytes > options_.max_bytes_per_job && !log.chunks.empty()) {
    log.bytes -= log.chunks.front().data().size();
    log.dropped_through = log.chunks.front().seq();
    log.chunks.pop_front();
    trimmed = true;
  }
  if (trimmed && persisting_) {
    pending_.batch.trim_below[job_id] =
        log.chunks.empty() ? log.next_seq : log.chunks.front().seq();
  }
}

void LogStore::EvictOldestLocked() {
  auto oldest = jobs_.end();
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (oldest != jobs_.end() && it->second.created >= oldest->second.created) continue;
    if (options_.keep && options_.keep(it->first)) continue;
    oldest = it;
  }
  if (oldest == jobs_.end()) {
    LOG_EVERY_N(WARNING, 100) << "worker logs: every one of the " << jobs_.size()
                              << " jobs kept is live; keeping more than "
                              << options_.max_jobs
                              << " rather than evicting a live job's log";
    return;
  }
  evicted_.push_back(oldest->first);
  while (evicted_.size() > kEvictedKept) evicted_.pop_front();
  if (persisting_) {
    const std::string gone = oldest->first;
    auto& p = pending_.batch.chunks;
    p.erase(std::remove_if(p.begin(), p.end(), [&](const auto& c) { return c.first == gone; }),
            p.end());
    pending_.batch.trim_below.erase(gone);
    pending_.batch.senders.erase(gone);
    pending_.batch.dropped_jobs.push_back(gone);
    pending_.spans.erase(gone);
  }
  jobs_.erase(oldest);
}

LogStore::Span& LogStore::PendingSpanLocked(const std::string& job_id, const JobLog& log) {
  Span& span = pending_.spans[job_id];
  if (span.created != log.created) span = Span{log.created, 0, -1, {}};
  return span;
}

absl::StatusOr<size_t> LogStore::StoredLocked(const JobLog& log, const Origin& from,
                                              size_t n) const {
  if (from.incarnation.empty() || from.first_chunk <= 0 || n == 0) return 0;
  auto it = log.senders.find(from.node_id);
  if (it == log.senders.end() || it->second.incarnation != from.incarnation) return 0;
  const JobLog::Mark& mark = it->second;
  const int64_t last = from.first_chunk + static_cast<int64_t>(n) - 1;
  const int64_t seen = std::min(last, mark.taken);
  if (seen < from.first_chunk) return 0;
  if (seen > mark.stored) {
    return absl::UnavailableError(absl::StrCat(
        "log chunks ", from.first_chunk, "..", seen, " of node \"", from.node_id,
        "\" are still being saved; send them again"));
  }
  return static_cast<size_t>(seen - from.first_chunk + 1);
}

void LogStore::AddLocked(const std::string& job_id, JobLog& log,
                         const std::vector<v1::LogChunk>& chunks, size_t skip,
                         const Origin& from) {
  for (size_t i = skip; i < chunks.size(); ++i) {
    if (chunks[i].data().empty()) continue;
    v1::LogChunk copy = chunks[i];
    copy.set_seq(log.next_seq++);
    log.bytes += copy.data().size();
    if (persisting_) {
      Span& span = PendingSpanLocked(job_id, log);
      if (span.last < span.first) span.first = copy.seq();
      span.last = copy.seq();
      pending_.batch.chunks.emplace_back(job_id, copy);
    }
    log.chunks.push_back(std::move(copy));
  }
  if (!persisting_) log.visible_seq = log.next_seq - 1;
  if (from.incarnation.empty() || from.first_chunk <= 0 || skip == chunks.size()) return;
  const int64_t last = from.first_chunk + static_cast<int64_t>(chunks.size()) - 1;
  JobLog::Mark& mark = log.senders[from.node_id];
  if (mark.incarnation != from.incarnation) mark = JobLog::Mark{from.incarnation};
  mark.taken = std::max(mark.taken, last);
  if (!persisting_) {
    mark.stored = mark.taken;
    return;
  }
  const LogDb::Sender sender{from.incarnation, mark.taken};
  PendingSpanLocked(job_id, log).senders[from.node_id] = sender;
  pending_.batch.senders[job_id][from.node_id] = sender;
}

void LogStore::Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks,
                      const Origin& from, Done done) {
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    if (persisting_ && closing_) {
      answer =
          absl::UnavailableError("the service is stopping: its worker logs are closed");
    } else {
      auto it = jobs_.find(job_id);
      if (it == jobs_.end()) {
        if (jobs_.size() >= options_.max_jobs) EvictOldestLocked();
        it = jobs_.emplace(job_id, JobLog{}).first;
        it->second.created = ++jobs_created_;
        it->second.next_seq = options_.first_seq;
      }
      JobLog& log = it->second;
      absl::StatusOr<size_t> stored = StoredLocked(log, from, chunks.size());
      if (!stored.ok()) {
        answer = stored.status();
      } else if (*stored < chunks.size()) {
        AddLocked(job_id, log, chunks, *stored, from);
        TrimLocked(job_id, log);
        if (persisting_) {
          // Answered by the writer, which this wakes.
          pending_.waiters.push_back(std::move(done));
          return;
        }
      }
    }
  }
  done(std::move(answer));
}

absl::Status LogStore::Append(const std::string& job_id,
                              const std::vector<v1::LogChunk>& chunks, const Origin& from) {
  absl::Notification answered;
  absl::Status result;
  Append(job_id, chunks, from, [&](absl::Status st) {
    result = std::move(st);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

LogStore::ReadResult LogStore::Read(const std::string& job_id, int64_t after_seq,
                                    int rank, size_t max_bytes) const {
  ReadResult r;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    r.evicted = std::find(evicted_.begin(), evicted_.end(), job_id) != evicted_.end();
    return r;
  }
  const JobLog& log = it->second;
  r.dropped = log.dropped_through > after_seq;
  // Chunks are in seq order: skip to the first one after the reader.
  auto first =
      std::upper_bound(log.chunks.begin(), log.chunks.end(), after_seq,
                       [](int64_t seq, const v1::LogChunk& c) { return seq < c.seq(); });
  size_t bytes = 0;
  for (auto c = first; c != log.chunks.end(); ++c) {
    if (c->seq() > log.visible_seq) break;  // not committed yet
    if (rank >= 0 && c->rank() != rank) continue;
    if (!r.chunks.empty() && bytes + c->data().size() > max_bytes) break;
    bytes += c->data().size();
    r.chunks.push_back(*c);
  }
  return r;
}

absl::Status LogStore::Persist(std::unique_ptr<LogDb> db) {
  absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> stored = db->Load();
  if (!stored.ok()) return stored.status();
  absl::StatusOr<LogDb::Senders> senders = db->LoadSenders();
  if (!senders.ok()) return senders.status();
  absl::StatusOr<std::map<std::string, int64_t>> trims = db->LoadTrims();
  if (!trims.ok()) return trims.status();
  size_t loaded = 0;
  {
    absl::MutexLock lock(&mu_);
    persisting_ = true;
    for (auto& [job, chunks] : *stored) {
      JobLog& log = jobs_[job];
      log.created = ++jobs_created_;
      // Above every stored chunk, and above what the service before may
      // have numbered without saving it (first_seq is this start's time).
      log.next_seq = std::max(options_.first_seq, chunks.back().seq() + 1);
      log.visible_seq = chunks.back().seq();
      for (v1::LogChunk& c : chunks) {
        log.bytes += c.data().size();
        log.chunks.push_back(std::move(c));
        ++loaded;
      }
      if (auto t = trims->find(job); t != trims->end()) {
        log.dropped_through = std::max(log.dropped_through, t->second - 1);
      }
      TrimLocked(job, log);
    }
    // A job whose chunks were all trimmed keeps its senders' numbers: a
    // resend of trimmed chunks is not new either.
    for (const auto& [job, nodes] : *senders) {
      JobLog& log = jobs_[job];
      if (log.created == 0) {
        log.created = ++jobs_created_;
        log.next_seq = options_.first_seq;
      }
      for (const auto& [node, sender] : nodes) {
        log.senders[node] = JobLog::Mark{sender.incarnation, sender.chunk, sender.chunk};
      }
    }
  }
  LOG(INFO) << db->where() << ": " << loaded << " chunks of " << stored->size()
            << " jobs";
  {
    absl::MutexLock lock(&write_mu_);
    db_ = std::move(db);
  }
  writer_ = std::thread([this] { WriterLoop(); });
  return absl::OkStatus();
}

void LogStore::WriterLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // A waiting Append is answered at once; Appends that come during the
      // write wait for the next one, and share it.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closing_ || !pending_.waiters.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.flush_interval);
      if (closing_) return;
    }
    if (absl::Status st = Flush(); !st.ok()) {
      LOG_EVERY_N(WARNING, 50) << "worker logs not saved (the senders were told, and "
                                  "send them again): "
                               << st;
    }
  }
}

absl::Status LogStore::Flush() {
  std::vector<Done> waiters;
  absl::Status st;
  {
    absl::MutexLock write_lock(&write_mu_);
    if (db_ == nullptr) return absl::OkStatus();
    Pending next;
    {
      absl::MutexLock lock(&mu_);
      std::swap(next, pending_);
    }
    Merge(carry_, std::move(next.batch));
    st = db_->Write(carry_);
    {
      absl::MutexLock lock(&mu_);
      SettleLocked(next.spans, st.ok());
    }
    // The deletions are still due; the chunks' senders are told to send
    // them again, so keeping them too would store them twice. Their
    // numbers go with them: the resend is new.
    carry_.chunks.clear();
    carry_.senders.clear();
    if (st.ok()) carry_ = LogDb::Batch();
    waiters = std::move(next.waiters);
  }
  const absl::Status answer =
      st.ok() ? st
              : absl::UnavailableError(absl::StrCat(
                    "worker logs not saved, send them again: ", st.message()));
  for (Done& done : waiters) done(answer);
  return st;
}

void LogStore::SettleLocked(const std::map<std::string, Span>& spans, bool committed) {
  for (const auto& [job, span] : spans) {
    auto it = jobs_.find(job);
    // Evicted since (and maybe made again): nothing of the batch is left.
    if (it == jobs_.end() || it->second.created != span.created) continue;
    JobLog& log = it->second;
    for (const auto& [node, sender] : span.senders) {
      auto mark = log.senders.find(node);
      // A newer incarnation of the node pushed since: its number counts.
      if (mark == log.senders.end() || mark->second.incarnation != sender.incarnation) {
        continue;
      }
      if (committed) {
        mark->second.stored = std::max(mark->second.stored, sender.chunk);
      } else {
        mark->second.taken = mark->second.stored;  // the resend is new
      }
    }
    if (committed) {
      log.visible_seq = std::max(log.visible_seq, span.last);
      continue;
    }
    // By value: a C++17 lambda cannot capture a structured binding.
    const int64_t first = span.first;
    const int64_t last = span.last;
    auto in_span = [first, last](const v1::LogChunk& c) {
      return c.seq() >= first && c.seq() <= last;
    };
    for (const v1::LogChunk& c : log.chunks) {
      if (in_span(c)) log.bytes -= c.data().size();
    }
    log.chunks.erase(std::remove_if(log.chunks.begin(), log.chunks.end(), in_span),
                     log.chunks.end());
  }
}

void LogStore::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  if (writer_.joinable()) writer_.join();
  if (absl::Status st = Flush(); !st.ok()) LOG(ERROR) << "worker logs not saved: " << st;
}

}  // namespace elastrun::rendezvous
