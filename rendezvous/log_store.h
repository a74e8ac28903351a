// The service's buffer of worker output for `elastrun logs`: per job, the
// newest chunks up to a byte bound (oldest dropped first), each with a
// sequence number increasing per job, so a reader can resume after the last
// chunk it saw. In memory only: logs also stay in files on each node.
//
// Thread-safe.
#ifndef ELASTRUN_RENDEZVOUS_LOG_STORE_H_
#define ELASTRUN_RENDEZVOUS_LOG_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "elastrun/v1/types.pb.h"

namespace elastrun::rendezvous {

class LogStore {
 public:
  struct Options {
    // Bytes of output kept per job; older chunks are dropped.
    size_t max_bytes_per_job = 8 << 20;
    // Jobs whose logs are kept; the oldest job's logs go first.
    size_t max_jobs = 256;
    // Every job's first chunk's seq. The service starts it at its start
    // time in microseconds, so a restarted service (whose store starts
    // empty) numbers above what a follower (`logs -f`) saw from the one
    // before, and the follower's next read gets the new chunks.
    int64_t first_seq = 1;
  };
  LogStore() : LogStore(Options{}) {}
  explicit LogStore(Options options) : options_(options) {}

  // Appends chunks of `job_id` (their seq is assigned here).
  void Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks);

  struct ReadResult {
    std::vector<v1::LogChunk> chunks;
    // Chunks after the reader's position were dropped before it read them.
    bool dropped = false;
  };
  // Chunks of `job_id` with seq > `after_seq`, of `rank` (-1: all), at most
  // `max_bytes` of data (at least one chunk when any is there).
  ReadResult Read(const std::string& job_id, int64_t after_seq, int rank,
                  size_t max_bytes) const;

 private:
  struct JobLog {
    std::deque<v1::LogChunk> chunks;
    size_t bytes = 0;
    int64_t next_seq = 0;  // Set to Options::first_seq when the job's log is made.
    int64_t created = 0;
  };
  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, JobLog> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t jobs_created_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_LOG_STORE_H_
