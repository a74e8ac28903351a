#include "bench/rendezvous/service.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace elastrun::bench {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::chrono::system_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

ProcStats ReadProc(pid_t pid) {
  ProcStats p;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(text.substr(close + 2));
    std::string field;
    // Fields after the command: state(3) ... utime(14) stime(15).
    std::vector<std::string> f;
    while (in >> field && f.size() < 13) f.push_back(field);
    if (f.size() >= 13) {
      const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
      p.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;
    }
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) p.hwm_mib = std::stod(line.substr(6)) / 1024.0;
  }
  return p;
}

double SelfCpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

bool StartService(const std::string& bin, const std::vector<std::string>& flags,
                  const std::string& log, int cpu, Service* s, std::string* error) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  std::vector<std::string> args = {bin, "--listen", "127.0.0.1:0", "--token", kBenchToken};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    dup2(out[1], 1);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  s->pid = pid;
  std::string buf;
  const int64_t deadline = NowNs() + 10'000'000'000LL;
  while (buf.find('\n') == std::string::npos) {
    const int64_t left_ms = (deadline - NowNs()) / 1'000'000;
    pollfd p{out[0], POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) {
      *error = "no \"listening on\" line from the service within 10 s (log: " + log + ")";
      close(out[0]);
      return false;
    }
    char chunk[256];
    ssize_t n = read(out[0], chunk, sizeof chunk);
    if (n <= 0) {
      *error = "the service exited before listening (log: " + log + ")";
      close(out[0]);
      return false;
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
  close(out[0]);  // the service prints one line; it ignores SIGPIPE
  const std::string prefix = "listening on ";
  const size_t at = buf.find(prefix);
  if (at == std::string::npos) {
    *error = "unexpected first line from the service: " + buf;
    return false;
  }
  s->addr = buf.substr(at + prefix.size(), buf.find('\n', at) - at - prefix.size());
  return true;
}

void StopService(Service* s) {
  if (s->pid <= 0) return;
  kill(s->pid, SIGTERM);
  const int64_t deadline = NowNs() + 5'000'000'000LL;
  while (NowNs() < deadline) {
    if (waitpid(s->pid, nullptr, WNOHANG) == s->pid) {
      s->pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "warning: service %d did not stop on SIGTERM in 5 s; SIGKILL\n", s->pid);
  kill(s->pid, SIGKILL);
  waitpid(s->pid, nullptr, 0);
  s->pid = -1;
}

}  // namespace elastrun::bench
