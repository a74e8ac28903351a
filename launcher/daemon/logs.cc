#include "launcher/daemon/logs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "launcher/daemon/reports.h"

namespace elastrun::launcher {

namespace {

// A chunk being spilled is written out once it holds this much.
constexpr size_t kSpillChunkBytes = 64 << 10;

int64_t Lines(const std::string& data) {
  return static_cast<int64_t>(std::count(data.begin(), data.end(), '\n'));
}

}  // namespace

LogForwarder::LogForwarder(LogForwarderOptions options, RendezvousClient* client)
    : options_(std::move(options)), client_(client) {
  if (!options_.spill_path.empty()) {
    spill_fd_ = open(options_.spill_path.c_str(),
                     O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (spill_fd_ < 0) {
      PLOG(WARNING) << "log spill file " << options_.spill_path
                    << " (worker lines beyond the buffer are dropped)";
    }
  }
  if (options_.thread) thread_ = std::thread([this] { Loop(); });
}

LogForwarder::~LogForwarder() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (spill_fd_ >= 0) close(spill_fd_);
}

void LogForwarder::OnLine(const std::string& job_id, int64_t round, const OutputLine& line) {
  absl::MutexLock lock(&mu_);
  const char* stream = line.is_stderr ? "stderr" : "stdout";
  // Consecutive lines of one stream of one rank share a chunk.
  auto fits = [&](const Pending& p) {
    return p.job_id == job_id && p.chunk.round() == round &&
           p.chunk.rank() == line.rank && p.chunk.stream() == stream && !p.sealed &&
           !p.last;
  };
  // Numbered here, under the lock (a lambda would hide it from the
  // thread-safety analysis).
  auto fresh = [&](int64_t number) {
    Pending p;
    p.job_id = job_id;
    p.number = number;
    p.chunk.set_round(round);
    p.chunk.set_rank(line.rank);
    p.chunk.set_stream(stream);
    return p;
  };
  auto append = [&](Pending& p) {
    std::string* data = p.chunk.mutable_data();
    data->append(line.text.data(), line.text.size());
    data->push_back('\n');
  };
  if (spilling_) {
    // Older lines wait in the file: these go after them.
    if (spill_tail_ && !fits(*spill_tail_)) {
      SpillLocked(*spill_tail_);
      spill_tail_.reset();
    }
    if (!spill_tail_) spill_tail_ = fresh(next_number_++);
    append(*spill_tail_);
    if (spill_tail_->chunk.data().size() >= kSpillChunkBytes) {
      SpillLocked(*spill_tail_);
      spill_tail_.reset();
    }
    return;
  }
  if (pending_.empty() || !fits(pending_.back())) pending_.push_back(fresh(next_number_++));
  append(pending_.back());
  buffered_bytes_ += line.text.size() + 1;
  if (buffered_bytes_ <= options_.max_buffered_bytes) return;
  if (spill_fd_ >= 0) {
    // The chunk being written goes on in the spill: it and what follows
    // are sent once the buffer is through.
    buffered_bytes_ -= pending_.back().chunk.data().size();
    spill_tail_ = std::move(pending_.back());
    pending_.pop_back();
    spilling_ = true;
    return;
  }
  // Drop whole chunks from the front; never the one being written.
  while (buffered_bytes_ > options_.max_buffered_bytes && pending_.size() > 1) {
    const std::string& old = pending_.front().chunk.data();
    dropped_lines_ += Lines(old);
    buffered_bytes_ -= old.size();
    pending_.pop_front();
  }
}

void LogForwarder::SpillLocked(const Pending& p) {
  v1::PushLogsRequest r;
  r.set_job_id(p.job_id);
  r.set_first_chunk(p.number);
  r.set_last(p.last);
  if (!p.last) *r.add_chunks() = p.chunk;
  const std::string body = r.SerializeAsString();
  const uint32_t size = static_cast<uint32_t>(body.size());
  std::string record(reinterpret_cast<const char*>(&size), sizeof size);
  record += body;
  const bool fits = spill_write_ - spill_read_ + static_cast<int64_t>(record.size()) <=
                    options_.max_spill_bytes;
  if (!fits || pwrite(spill_fd_, record.data(), record.size(), spill_write_) !=
                   static_cast<ssize_t>(record.size())) {
    if (fits) {
      PLOG_EVERY_N(WARNING, 100) << "log spill file " << options_.spill_path;
    }
    dropped_lines_ += Lines(p.chunk.data());
    return;
  }
  spill_write_ += static_cast<int64_t>(record.size());
}

void LogForwarder::UnspillLocked() {
  while (spill_read_ < spill_write_ && buffered_bytes_ < options_.max_buffered_bytes) {
    uint32_t size = 0;
    std::string body;
    bool read = pread(spill_fd_, &size, sizeof size, spill_read_) == sizeof size;
    if (read) {
      body.resize(size);
      read = pread(spill_fd_, body.data(), size,
                   spill_read_ + static_cast<int64_t>(sizeof size)) ==
             static_cast<ssize_t>(size);
    }
    v1::PushLogsRequest r;
    if (!read || !r.ParseFromString(body)) {
      LOG(ERROR) << "log spill file " << options_.spill_path << " unreadable at "
                 << spill_read_ << "; its lines are dropped";
      spill_read_ = spill_write_;
      break;
    }
    spill_read_ += static_cast<int64_t>(sizeof size + size);
    Pending p;
    p.job_id = r.job_id();
    p.number = r.first_chunk();
    p.last = r.last();
    if (!p.last && r.chunks_size() == 1) p.chunk = r.chunks(0);
    buffered_bytes_ += p.chunk.data().size();
    pending_.push_back(std::move(p));
  }
  if (spill_read_ < spill_write_) return;
  // Read through: the file starts over, the chunk being written joins the
  // buffer, and lines go to the buffer again.
  if (ftruncate(spill_fd_, 0) != 0)
    PLOG(WARNING) << "log spill file " << options_.spill_path;
  spill_read_ = spill_write_ = 0;
  if (spill_tail_) {
    buffered_bytes_ += spill_tail_->chunk.data().size();
    pending_.push_back(*std::move(spill_tail_));
    spill_tail_.reset();
  }
  spilling_ = false;
}

int64_t LogForwarder::spilled_bytes() const {
  absl::MutexLock lock(&mu_);
  return spill_write_ - spill_read_ +
         (spill_tail_ ? static_cast<int64_t>(spill_tail_->chunk.data().size()) : 0);
}

void LogForwarder::JobDone(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Pending p;
  p.job_id = job_id;
  p.last = true;
  if (spilling_) {
    if (spill_tail_) SpillLocked(*spill_tail_);
    spill_tail_.reset();
    SpillLocked(p);
    return;
  }
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
    if (internal::Retriable(st)) {
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
    if (pending_.empty() && spilling_) UnspillLocked();
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
      if (failed.ok() || !internal::Retriable(failed)) {
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
    // A push cut off by a service that stops (Cancelled) is sent again too:
    // its numbers let the service skip what it stored.
    if (failed.ok() || !internal::Retriable(failed)) {
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
