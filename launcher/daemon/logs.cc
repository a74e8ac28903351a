#include "launcher/daemon/logs.h"

#include <utility>
#include <vector>

#include "glog/logging.h"

namespace elastrun::launcher {

LogForwarder::LogForwarder(LogForwarderOptions options, RendezvousClient* client)
    : options_(std::move(options)), client_(client) {
  if (options_.thread) thread_ = std::thread([this] { Loop(); });
}

LogForwarder::~LogForwarder() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LogForwarder::OnLine(const std::string& job_id, int64_t round, const OutputLine& line) {
  absl::MutexLock lock(&mu_);
  const char* stream = line.is_stderr ? "stderr" : "stdout";
  // Consecutive lines of one stream of one rank share a chunk.
  if (pending_.empty() || pending_.back().job_id != job_id ||
      pending_.back().chunk.round() != round ||
      pending_.back().chunk.rank() != line.rank ||
      pending_.back().chunk.stream() != stream || pending_.back().sealed ||
      pending_.back().last) {
    Pending p;
    p.job_id = job_id;
    p.number = next_number_++;
    p.chunk.set_round(round);
    p.chunk.set_rank(line.rank);
    p.chunk.set_stream(stream);
    pending_.push_back(std::move(p));
  }
  std::string* data = pending_.back().chunk.mutable_data();
  data->append(line.text.data(), line.text.size());
  data->push_back('\n');
  buffered_bytes_ += line.text.size() + 1;
  // Drop whole chunks from the front; never the one being written.
  while (buffered_bytes_ > options_.max_buffered_bytes && pending_.size() > 1) {
    const std::string& old = pending_.front().chunk.data();
    for (char c : old) dropped_lines_ += c == '\n';
    buffered_bytes_ -= old.size();
    pending_.pop_front();
  }
}

void LogForwarder::JobDone(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Pending p;
  p.job_id = job_id;
  p.last = true;
  pending_.push_back(std::move(p));
}

void LogForwarder::OnProgress(const std::string& job_id, int64_t round,
                              const ProgressReport& report) {
  absl::MutexLock lock(&mu_);
  v1::ReportProgressRequest r;
  r.set_job_id(job_id);
  v1::Progress* p = r.mutable_progress();
  p->set_node_id(options_.node_id);
  p->set_round(round);
  p->set_rank(report.rank);
  p->set_step(report.step);
  for (const auto& [name, value] : report.metrics) (*p->mutable_metrics())[name] = value;
  progress_[job_id].newest = std::move(r);  // the service stamps the time it arrives
}

void LogForwarder::Send(bool progress_now) {
  std::vector<v1::ReportProgressRequest> due;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (auto it = progress_.begin(); it != progress_.end();) {
      JobProgress& jp = it->second;
      if (jp.newest && (progress_now || now - jp.sent >= options_.progress_interval)) {
        due.push_back(*std::move(jp.newest));
        jp.newest.reset();
        jp.sent = now;
      }
      // A job quiet for a while is forgotten (it may have ended here).
      if (!jp.newest && now - jp.sent >= 10 * options_.progress_interval) {
        it = progress_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (v1::ReportProgressRequest& r : due) {
    absl::Status st = client_->ReportProgress(r);
    if (absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) {
      absl::MutexLock lock(&mu_);
      JobProgress& jp = progress_[r.job_id()];
      if (!jp.newest) jp.newest = std::move(r);  // unless a newer one came
    } else if (!st.ok()) {
      LOG_EVERY_N(WARNING, 100) << "ReportProgress for job " << r.job_id()
                                << " refused: " << st;
    }
  }
  SendLines();
}

void LogForwarder::SendLines() {
  std::vector<Pending> batch;
  {
    absl::MutexLock lock(&mu_);
    // A push in flight (the forwarder's thread): wait for it, so that a
    // Flush before an exit report returns only once the lines written
    // before the exit are with the service, then send what came meanwhile.
    mu_.Await(absl::Condition(
        +[](bool* flushing) { return !*flushing; }, &flushing_));
    if (pending_.empty()) return;
    flushing_ = true;
    batch.assign(std::make_move_iterator(pending_.begin()),
                 std::make_move_iterator(pending_.end()));
    pending_.clear();
    for (Pending& p : batch) p.sealed = true;
    buffered_bytes_ = 0;
  }
  // One PushLogs per run of chunks of the same job with consecutive
  // numbers (lines dropped from a full buffer leave a gap).
  size_t sent = 0;
  absl::Status failed;
  while (sent < batch.size() && failed.ok()) {
    v1::PushLogsRequest r;
    r.set_node_id(options_.node_id);
    r.set_job_id(batch[sent].job_id);
    if (batch[sent].last) {
      // Sent once the lines before it were taken (a failure stops here).
      r.set_last(true);
      failed = client_->PushLogs(r);
      if (failed.ok() ||
          !(absl::IsUnavailable(failed) || absl::IsDeadlineExceeded(failed))) {
        failed = absl::OkStatus();
        ++sent;
      }
      continue;
    }
    if (!options_.incarnation.empty()) {
      r.set_incarnation(options_.incarnation);
      r.set_first_chunk(batch[sent].number);
    }
    size_t end = sent;
    while (end < batch.size() && !batch[end].last && batch[end].job_id == r.job_id() &&
           batch[end].number == batch[sent].number + static_cast<int64_t>(end - sent)) {
      *r.add_chunks() = batch[end].chunk;
      ++end;
    }
    failed = client_->PushLogs(r);
    if (failed.ok() && options_.forwarded_bytes != nullptr) {
      int64_t bytes = 0;
      for (const v1::LogChunk& c : r.chunks()) bytes += static_cast<int64_t>(c.data().size());
      options_.forwarded_bytes->Increment(bytes);
    }
    if (failed.ok() || !(absl::IsUnavailable(failed) || absl::IsDeadlineExceeded(failed))) {
      if (!failed.ok()) {
        LOG_EVERY_N(WARNING, 100) << "PushLogs for job " << r.job_id() << " refused: " << failed;
        failed = absl::OkStatus();  // refused for good: drop, go on
      }
      sent = end;
    }
  }
  absl::MutexLock lock(&mu_);
  flushing_ = false;
  if (sent == batch.size()) return;
  // Put the unsent ones back in front of what arrived meanwhile; OnLine's
  // bound applies again at the next line.
  for (size_t i = batch.size(); i > sent; --i) {
    buffered_bytes_ += batch[i - 1].chunk.data().size();
    pending_.push_front(std::move(batch[i - 1]));
  }
}

int64_t LogForwarder::dropped_lines() const {
  absl::MutexLock lock(&mu_);
  return dropped_lines_;
}

void LogForwarder::Loop() {
  for (;;) {
    bool quit;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&quit_), options_.interval);
      quit = quit_;
    }
    Send(/*progress_now=*/quit);
    if (quit) return;
  }
}

}  // namespace elastrun::launcher
