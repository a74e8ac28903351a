#include "launcher/agent/output_pump.h"

#include <errno.h>
#include <unistd.h>

namespace elastrun::launcher {

OutputPump::~OutputPump() { Finish(); }

void OutputPump::Add(int fd, std::unique_ptr<OutputStream> out) {
  auto s = std::make_unique<Stream>();
  s->fd = fd;
  s->out = std::move(out);
  Stream* raw = s.get();
  // A pipe that cannot be watched (cannot happen for a fresh one) is still
  // read by Finish.
  if (fd >= 0) (void)poller_->Watch(fd, [this, raw] { Drain(*raw, /*final=*/false); });
  streams_.push_back(std::move(s));
}

void OutputPump::Drain(Stream& s, bool final) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.out->Write(absl::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && !final) return;
    // EOF, an error, or the final drain of a pipe still held open by a
    // leftover process: this stream is finished.
    poller_->Unwatch(s.fd);
    close(s.fd);
    s.fd = -1;
    s.out->Close();
  }
}

void OutputPump::Finish() {
  for (auto& s : streams_) {
    Drain(*s, /*final=*/true);
    s->out->Close();
  }
  streams_.clear();  // closes the log files
}

size_t OutputPump::open_pipes() const {
  size_t n = 0;
  for (const auto& s : streams_) n += s->fd >= 0 ? 1 : 0;
  return n;
}

}  // namespace elastrun::launcher
