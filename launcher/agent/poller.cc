#include "launcher/agent/poller.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace elastrun::launcher {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Poller>> Poller::Create() {
  int fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return ErrnoError("epoll_create1");
  return std::unique_ptr<Poller>(new Poller(fd));
}

Poller::~Poller() { close(epoll_fd_); }

absl::Status Poller::Watch(int fd, std::function<void()> on_ready) {
  if (fd < 0) return absl::InvalidArgumentError("cannot watch a negative descriptor");
  if (by_fd_.count(fd) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("descriptor ", fd, " is already watched"));
  }
  const uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = token;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return ErrnoError(absl::StrCat("epoll_ctl(ADD, ", fd, ")"));
  }
  entries_[token] = Entry{fd, std::move(on_ready)};
  by_fd_[fd] = token;
  return absl::OkStatus();
}

void Poller::Unwatch(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  entries_.erase(it->second);
  by_fd_.erase(it);
}

absl::StatusOr<int> Poller::Wait(absl::Duration timeout) {
  int timeout_ms = -1;
  if (timeout != absl::InfiniteDuration()) {
    // Rounded up: waking before a deadline only to wait again costs a loop.
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
    timeout_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30)));
  }
  epoll_event events[64];
  int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    return ErrnoError("epoll_wait");
  }
  int ran = 0;
  for (int i = 0; i < n; ++i) {
    auto it = entries_.find(events[i].data.u64);
    if (it == entries_.end()) continue;  // unwatched by an earlier callback
    // A copy: the callback may unwatch its own descriptor.
    std::function<void()> on_ready = it->second.on_ready;
    on_ready();
    ++ran;
  }
  return ran;
}

}  // namespace elastrun::launcher
