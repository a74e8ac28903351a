// Forwarding worker output to the service (PushLogs) for `elastrun logs`.
// The agent hands every whole line, tagged with its attempt's job and round
// (the node may run several jobs at once), to OnLine; lines are copied
// into a bounded buffer and a dedicated thread sends them in batches, so a
// slow or absent service never stalls the workers' output. Lines beyond the
// buffer wait in a spill file on the node (a service whose disk is full
// takes them once it has space again, in order); beyond the spill's bound
// the newest lines are dropped, without a spill file the oldest: the
// per-rank log files on the node keep everything.
#ifndef ELASTRUN_LAUNCHER_DAEMON_LOGS_H_
#define ELASTRUN_LAUNCHER_DAEMON_LOGS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/client.h"

namespace elastrun::launcher {

struct LogForwarderOptions {
  std::string node_id;
  // The daemon's incarnation (as it registers with). Pushes carry it and
  // their chunks' numbers, so that the service skips a resend of chunks it
  // stored but could not acknowledge (killed in between). Empty: pushes
  // are not numbered.
  std::string incarnation;
  // How often buffered lines are sent.
  absl::Duration interval = absl::Milliseconds(250);
  // Bytes of lines kept in memory; also the most sent in one PushLogs (the
  // service accepts up to 4 MiB). Lines beyond it go to the spill file.
  size_t max_buffered_bytes = 1 << 20;
  // The spill file (made afresh, owner-only); empty: none, lines beyond
  // the buffer are dropped.
  std::string spill_path;
  // Bytes the spill file holds at most; lines beyond it are dropped.
  int64_t max_spill_bytes = int64_t{256} << 20;
  // false: no thread; the owner calls Flush (tests).
  bool thread = true;
  // Least time between two ReportProgress calls of the thread.
  absl::Duration progress_interval = absl::Seconds(1);
  // Counts the bytes of output the service accepted (not owned). May be null.
  metrics::Counter* forwarded_bytes = nullptr;
};

// Forwards the workers' output (PushLogs) and their newest progress report
// (ReportProgress, at most once per progress_interval, since the service
// stores each) to the service from its own thread.
// Thread-safe. The destructor sends what is buffered once more, then joins.
class LogForwarder {
 public:
  // `client` is not owned and must outlive the forwarder.
  LogForwarder(LogForwarderOptions options, RendezvousClient* client);
  ~LogForwarder();

  // Buffers one line of attempt (job_id, round) (the Daemon's
  // on_output_line hook). Never blocks on the network.
  void OnLine(const std::string& job_id, int64_t round, const OutputLine& line);

  // Keeps `report` as the newest progress of job_id's attempt `round` (the
  // Daemon's on_progress hook). Never blocks on the network.
  void OnProgress(const std::string& job_id, int64_t round, const ProgressReport& report);

  // Sends each job's newest progress report, if a new one came, and the
  // buffered lines, one PushLogs per run of one job's lines; a push in
  // flight (the thread's) is waited for first, so what was buffered before
  // the call has been offered to the service when it returns. What the
  // service could not take stays buffered (bounded) for the next call.
  void Flush() { Send(/*progress_now=*/true); }

  // The job ended here and its attempts' output is all buffered: once the
  // lines before it are sent, tells the service (PushLogsRequest.last),
  // so that `logs -f` knows it has this node's last lines.
  void JobDone(const std::string& job_id);

  // Lines dropped because the buffer (and the spill file) was full.
  int64_t dropped_lines() const;
  // Bytes of lines waiting in the spill file.
  int64_t spilled_bytes() const;

 private:
  struct Pending {
    std::string job_id;
    v1::LogChunk chunk;  // whole lines, each ending in '\n'
    // Its number in this incarnation: 1, 2, 3, ... in the order made.
    int64_t number = 0;
    // Taken by a push: the service may have stored it as it is, so a resend
    // must carry the same lines, and new lines go into a new chunk.
    bool sealed = false;
    // No lines: the job's last-lines mark (JobDone).
    bool last = false;
  };
  void Loop();
  // Appends `p` to the spill file (dropping it when full or failing).
  void SpillLocked(const Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves spilled chunks, up to the buffer's bound, into pending_; once the
  // file is read to its end, the chunk being written (spill_tail_) too.
  void UnspillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `progress_now`: send a new progress report even within the interval.
  void Send(bool progress_now);
  void SendLines();

  const LogForwarderOptions options_;
  RendezvousClient* const client_;

  mutable absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  size_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  // Spilling: lines newer than every spilled chunk go to spill_tail_, which
  // is written to the file as a new chunk begins (or it grows large). The file holds
  // chunks [spill_read_, spill_write_), each as a 4-byte length and a PushLogsRequest
  // (its job, one chunk, its number, or a last mark).
  int spill_fd_ = -1;
  bool spilling_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Pending> spill_tail_ ABSL_GUARDED_BY(mu_);
  int64_t spill_read_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t spill_write_ ABSL_GUARDED_BY(mu_) = 0;
  // Per job: its newest report not sent yet, and when one was last sent.
  struct JobProgress {
    std::optional<v1::ReportProgressRequest> newest;
    absl::Time sent = absl::InfinitePast();
  };
  std::map<std::string, JobProgress> progress_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_LOGS_H_
