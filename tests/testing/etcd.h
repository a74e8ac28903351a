// A real etcd for tests: Debian's etcd-server, its members as tagged
// subprocesses on loopback ports, each with its data in the test's folder.
// Header-only. Tests skip (GTEST_SKIP) with a clear message where etcd is
// not installed (scripts/setup.sh installs it).
#ifndef ELASTRUN_TESTS_TESTING_ETCD_H_
#define ELASTRUN_TESTS_TESTING_ETCD_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun::testing {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";
inline constexpr char kEtcdctlBinary[] = "/usr/bin/etcdctl";

// Why etcd cannot be used here, or "" when it can.
inline std::string EtcdMissing() {
  if (access(kEtcdBinary, X_OK) != 0 || access(kEtcdctlBinary, X_OK) != 0) {
    return "etcd is not installed (Debian's etcd-server and etcd-client; "
           "scripts/setup.sh "
           "installs them): skipping the test that needs a real etcd";
  }
  return "";
}

// A loopback port free now (the kernel's pick; closed again at once).
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// `members` etcd members on 127.0.0.1 forming one cluster. Every process
// gets `marker` in its environment.
class EtcdCluster {
 public:
  // TLS to the members' client port when `tls` names a server certificate
  // and key (and, with a CA, client certificates are required): the
  // `etcdctl` of Healthy() uses `client`'s files. etcd calls itself with
  // the server certificate (its election service): it must allow
  // clientAuth too (certs.h: "both_ext").
  struct Tls {
    std::string cert, key, ca;                       // the members'
    std::string client_cert, client_key, client_ca;  // etcdctl's
  };
  EtcdCluster(std::string dir, std::string marker, int members = 3, Tls tls = {})
      : dir_(std::move(dir)), marker_(std::move(marker)), tls_(std::move(tls)) {
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(FreeLoopbackPort());
      peer_ports_.push_back(FreeLoopbackPort());
    }
    processes_.resize(members);
  }
  // SIGKILLs the members, then removes their data: each member preallocates
  // a 64 MB write-ahead log: a run of the tests must not leave hundreds of
  // MB behind per cluster.
  ~EtcdCluster() {
    processes_.clear();
    for (size_t i = 0; i < client_ports_.size(); ++i) {
      std::error_code ignored;
      std::filesystem::remove_all(absl::StrCat(dir_, "/etcd-m", i), ignored);
    }
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Starts every member and waits until the cluster commits a write.
  void Start() {
    for (size_t i = 0; i < processes_.size(); ++i)
      ASSERT_NO_FATAL_FAILURE(StartMember(i, "new"));
    ASSERT_TRUE(Healthy(absl::Seconds(60))) << Output();
  }
  // SIGKILLs member i.
  void Kill(size_t i) {
    processes_.at(i)->Signal(SIGKILL);
    EXPECT_TRUE(processes_[i]->Wait(absl::Seconds(30)).ok());
  }
  // Starts member i again on its data (after Kill).
  void Restart(size_t i) { ASSERT_NO_FATAL_FAILURE(StartMember(i, "existing")); }

  // Whether a write commits through every endpoint within `timeout`.
  bool Healthy(absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      absl::StatusOr<RunResult> r = Etcdctl({"put", "/health", "1"});
      if (r.ok() && r->exit_code == 0) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  }

  // Runs etcdctl with `args` against every member (TLS files as Tls says).
  absl::StatusOr<RunResult> Etcdctl(const std::vector<std::string>& args) const {
    std::vector<std::string> urls;
    for (int p : client_ports_) {
      urls.push_back(
          absl::StrCat(tls_.cert.empty() ? "http" : "https", "://127.0.0.1:", p));
    }
    std::vector<std::string> argv = {kEtcdctlBinary, "--endpoints",
                                     absl::StrJoin(urls, ","), "--command-timeout", "2s"};
    if (!tls_.cert.empty()) {
      argv.insert(argv.end(), {"--cacert", tls_.client_ca, "--cert", tls_.client_cert,
                               "--key", tls_.client_key});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, {"ETCDCTL_API=3", marker_}, absl::Seconds(10));
  }

  // The member that is etcd's raft leader now, or -1.
  int LeaderMember() const {
    for (size_t i = 0; i < client_ports_.size(); ++i) {
      absl::StatusOr<RunResult> r = Run(
          {kEtcdctlBinary, "--endpoints", absl::StrCat("127.0.0.1:", client_ports_[i]),
           "--command-timeout", "2s", "endpoint", "status"},
          {"ETCDCTL_API=3", marker_}, absl::Seconds(10));
      // "ENDPOINT, ID, VERSION, DB SIZE, IS LEADER, ..."
      if (r.ok() && r->exit_code == 0 &&
          r->output.find(", true, ") != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // "127.0.0.1:P1,127.0.0.1:P2,..."
  std::string endpoints() const {
    std::vector<std::string> e;
    for (int p : client_ports_) e.push_back(absl::StrCat("127.0.0.1:", p));
    return absl::StrJoin(e, ",");
  }
  std::string url() const { return "etcd://" + endpoints(); }
  Subprocess& member(size_t i) { return *processes_.at(i); }

  std::string Output() const {
    std::string out;
    for (size_t i = 0; i < processes_.size(); ++i) {
      if (processes_[i])
        absl::StrAppend(&out, "\n--- etcd m", i, " ---\n", processes_[i]->Output());
    }
    return out;
  }

 private:
  void StartMember(size_t i, const std::string& state) {
    std::vector<std::string> cluster;
    for (size_t j = 0; j < peer_ports_.size(); ++j) {
      cluster.push_back(absl::StrCat("m", j, "=http://127.0.0.1:", peer_ports_[j]));
    }
    const std::string client = absl::StrCat(tls_.cert.empty() ? "http" : "https",
                                            "://127.0.0.1:", client_ports_[i]);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_ports_[i]);
    std::vector<std::string> argv = {kEtcdBinary,
                                     "--name",
                                     absl::StrCat("m", i),
                                     "--data-dir",
                                     absl::StrCat(dir_, "/etcd-m", i),
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     absl::StrJoin(cluster, ","),
                                     "--initial-cluster-state",
                                     state,
                                     "--initial-cluster-token",
                                     marker_,
                                     "--logger",
                                     "zap",
                                     "--log-level",
                                     "warn"};
    if (!tls_.cert.empty())
      argv.insert(argv.end(), {"--cert-file", tls_.cert, "--key-file", tls_.key});
    if (!tls_.ca.empty()) {
      argv.insert(argv.end(), {"--client-cert-auth", "--trusted-ca-file", tls_.ca});
    }
    auto p = Subprocess::Start(argv, {marker_});
    ASSERT_TRUE(p.ok()) << p.status();
    processes_[i] = *std::move(p);
  }

  std::string dir_;
  std::string marker_;
  Tls tls_;
  std::vector<int> client_ports_;
  std::vector<int> peer_ports_;
  std::vector<std::unique_ptr<Subprocess>> processes_;
};

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_TESTING_ETCD_H_
