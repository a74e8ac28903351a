// The service under test, as a subprocess: starting and stopping the real
// elastrun-rendezvous, and reading its CPU time and peak RSS from /proc.
#ifndef ELASTRUN_BENCH_RENDEZVOUS_SERVICE_H_
#define ELASTRUN_BENCH_RENDEZVOUS_SERVICE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace elastrun::bench {

// Monotonic nanoseconds.
int64_t NowNs();
// A gRPC deadline `seconds` from now.
std::chrono::system_clock::time_point DeadlineIn(double seconds);

struct Service {
  pid_t pid = -1;
  std::string addr;
};

struct ProcStats {
  double cpu_s = 0;  // utime + stime
  double hwm_mib = 0;
};

// CPU time and peak RSS (VmHWM) of `pid`; zeros when it cannot be read.
ProcStats ReadProc(pid_t pid);
// CPU time of this process (the simulated daemons).
double SelfCpu();

// The cluster token the bench's service is started with and its simulated
// daemons send (the service always requires one; never the default file).
inline constexpr char kBenchToken[] = "elastrun-bench-token";
inline constexpr char kBenchAuthorization[] = "Bearer elastrun-bench-token";

// Starts `bin --listen 127.0.0.1:0 --token T FLAGS...`, stderr to `log`,
// and reads "listening on HOST:PORT" (10 s deadline). `cpu` >= 0: the
// service runs on that CPU only. False with `*error` set on failure.
bool StartService(const std::string& bin, const std::vector<std::string>& flags,
                  const std::string& log, int cpu, Service* s, std::string* error);

// SIGTERM, up to 5 s for a clean exit, then SIGKILL. By pid only.
void StopService(Service* s);

}  // namespace elastrun::bench

#endif  // ELASTRUN_BENCH_RENDEZVOUS_SERVICE_H_
