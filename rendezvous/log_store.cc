#include "rendezvous/log_store.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace elastrun::rendezvous {
namespace {

// A batch kept after failed writes (full disk) holds at most this much
// output; older chunks go first. The nodes keep the files.
constexpr size_t kMaxCarryBytes = 64 << 20;

// Appends `next` to `carry`, keeping the order the LogDb applies: a job
// dropped in `next` loses the chunks `carry` still had for it.
void Merge(LogDb::Batch& carry, LogDb::Batch next) {
  for (const std::string& job : next.dropped_jobs) {
    carry.chunks.erase(std::remove_if(carry.chunks.begin(), carry.chunks.end(),
                                      [&](const auto& c) { return c.first == job; }),
                       carry.chunks.end());
    carry.trim_below.erase(job);
    carry.dropped_jobs.push_back(job);
  }
  for (auto& c : next.chunks) carry.chunks.push_back(std::move(c));
  for (const auto& [job, below] : next.trim_below) {
    carry.trim_below[job] = std::max(carry.trim_below[job], below);
  }
}

}  // namespace

void LogStore::TrimLocked(const std::string& job_id, JobLog& log) {
  bool trimmed = false;
  while (log.bytes > options_.max_bytes_per_job && !log.chunks.empty()) {
    log.bytes -= log.chunks.front().data().size();
    log.chunks.pop_front();
    trimmed = true;
  }
  if (trimmed && persisting_) {
    pending_.trim_below[job_id] =
        log.chunks.empty() ? log.next_seq : log.chunks.front().seq();
  }
}

void LogStore::Append(const std::string& job_id,
                      const std::vector<v1::LogChunk>& chunks) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    if (jobs_.size() >= options_.max_jobs) {
      auto oldest =
          std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
            return a.second.created < b.second.created;
          });
      if (persisting_) {
        const std::string gone = oldest->first;
        auto& p = pending_.chunks;
        p.erase(std::remove_if(p.begin(), p.end(),
                               [&](const auto& c) { return c.first == gone; }),
                p.end());
        pending_.trim_below.erase(gone);
        pending_.dropped_jobs.push_back(gone);
      }
      jobs_.erase(oldest);
    }
    it = jobs_.emplace(job_id, JobLog{}).first;
    it->second.created = ++jobs_created_;
    it->second.next_seq = options_.first_seq;
  }
  JobLog& log = it->second;
  for (const v1::LogChunk& c : chunks) {
    if (c.data().empty()) continue;
    v1::LogChunk copy = c;
    copy.set_seq(log.next_seq++);
    log.bytes += copy.data().size();
    if (persisting_) {
      pending_bytes_ += copy.data().size();
      pending_.chunks.emplace_back(job_id, copy);
    }
    log.chunks.push_back(std::move(copy));
  }
  TrimLocked(job_id, log);
}

LogStore::ReadResult LogStore::Read(const std::string& job_id, int64_t after_seq,
                                    int rank, size_t max_bytes) const {
  ReadResult r;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return r;
  const JobLog& log = it->second;
  if (!log.chunks.empty() && log.chunks.front().seq() > after_seq + 1) r.dropped = true;
  // Chunks are in seq order: skip to the first one after the reader.
  auto first =
      std::upper_bound(log.chunks.begin(), log.chunks.end(), after_seq,
                       [](int64_t seq, const v1::LogChunk& c) { return seq < c.seq(); });
  size_t bytes = 0;
  for (auto c = first; c != log.chunks.end(); ++c) {
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
      for (v1::LogChunk& c : chunks) {
        log.bytes += c.data().size();
        log.chunks.push_back(std::move(c));
        ++loaded;
      }
      TrimLocked(job, log);
    }
  }
  LOG(INFO) << "logs " << db->path() << ": " << loaded << " chunks of " << stored->size()
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
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closing_ || pending_bytes_ >= options_.flush_bytes;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.flush_interval);
      if (closing_) return;
    }
    if (absl::Status st = Flush(); !st.ok()) {
      LOG_EVERY_N(WARNING, 50) << "worker logs not saved yet (kept, retried): " << st;
    }
  }
}

absl::Status LogStore::Flush() {
  absl::MutexLock write_lock(&write_mu_);
  if (db_ == nullptr) return absl::OkStatus();
  LogDb::Batch next;
  {
    absl::MutexLock lock(&mu_);
    std::swap(next, pending_);
    pending_bytes_ = 0;
  }
  Merge(carry_, std::move(next));
  absl::Status st = db_->Write(carry_);
  if (st.ok()) {
    carry_ = LogDb::Batch();
    return st;
  }
  size_t bytes = 0;
  for (const auto& c : carry_.chunks) bytes += c.second.data().size();
  size_t drop = 0;
  while (bytes > kMaxCarryBytes && drop < carry_.chunks.size()) {
    bytes -= carry_.chunks[drop++].second.data().size();
  }
  if (drop > 0) {
    LOG(WARNING) << "dropping " << drop << " unsaved log chunks (over "
                 << (kMaxCarryBytes >> 20) << " MiB kept while the log database fails)";
    carry_.chunks.erase(carry_.chunks.begin(), carry_.chunks.begin() + drop);
  }
  return st;
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
