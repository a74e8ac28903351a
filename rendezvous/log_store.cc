#include "rendezvous/log_store.h"

#include <algorithm>

namespace elastrun::rendezvous {

void LogStore::Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    if (jobs_.size() >= options_.max_jobs) {
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a,
                                                                     const auto& b) {
        return a.second.created < b.second.created;
      });
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
    log.chunks.push_back(std::move(copy));
  }
  while (log.bytes > options_.max_bytes_per_job && !log.chunks.empty()) {
    log.bytes -= log.chunks.front().data().size();
    log.chunks.pop_front();
  }
}

LogStore::ReadResult LogStore::Read(const std::string& job_id, int64_t after_seq, int rank,
                                    size_t max_bytes) const {
  ReadResult r;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return r;
  const JobLog& log = it->second;
  if (!log.chunks.empty() && log.chunks.front().seq() > after_seq + 1) r.dropped = true;
  // Chunks are in seq order: skip to the first one after the reader.
  auto first = std::upper_bound(
      log.chunks.begin(), log.chunks.end(), after_seq,
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

}  // namespace elastrun::rendezvous
