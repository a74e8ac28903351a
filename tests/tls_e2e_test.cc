// End to end: TLS on the service's gRPC port, with certificates openssl
// makes at test time (skipped without openssl). The real
// elastrun-rendezvous with mutual TLS and a token, real elastrund daemons
// with client certificates (flags, or ELASTRUN_TLS_* in the environment)
// register and run a job that the real `elastrun` CLI submits and waits
// for over TLS. Refused, each with a message naming the cause and exit 1:
// a plaintext CLI or daemon, a client without a certificate, a client
// certificate of another CA, a service certificate the client's CA did not
// sign or that does not carry the address (--tls-server-name fixes that).
// Every process carries a marker; none is left behind.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/certs.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using testing::BinDir;
using ::testing::HasSubstr;
using testing::RunResult;

constexpr absl::Duration kDeadline = absl::Seconds(90);
constexpr char kToken[] = "tls-e2e-token";

class TlsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("tls_e2e");
    marker_ = "ELASTRUN_TEST_MARKER=" + dir_;
    absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir_);
    if (absl::IsFailedPrecondition(pki.status())) {
      GTEST_SKIP() << "skipped: " << pki.status().message();
    }
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
  }

  void TearDown() override {
    for (auto& d : daemons_) {
      if (d->exit_code()) continue;
      d->Signal(SIGTERM);
      EXPECT_TRUE(d->Wait(kDeadline).ok());
    }
    if (service_ && !service_->exit_code()) {
      service_->Signal(SIGTERM);
      EXPECT_TRUE(service_->Wait(kDeadline).ok());
    }
    // Every process was waited for: none may be left (workers included).
    EXPECT_TRUE(testing::ProcessesWithEnv(marker_).empty())
        << "processes were left behind";
  }

  // Starts elastrun-rendezvous on 127.0.0.1:0 with `flags`; its address.
  std::string StartService(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {BinDir() + "/elastrun-rendezvous", "--listen",
                                     "127.0.0.1:0", "--token", kToken};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto s = testing::Subprocess::Start(argv, {marker_});
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return "";
    service_ = *std::move(s);
    const std::string prefix = "listening on ";
    const absl::Time end = absl::Now() + kDeadline;
    std::string out;
    while ((out = service_->Output()).find(prefix) == std::string::npos) {
      if (absl::Now() > end || service_->Wait(absl::Milliseconds(20)).ok()) {
        ADD_FAILURE() << "the service did not start: " << out;
        return "";
      }
    }
    const size_t at = out.find(prefix) + prefix.size();
    address_ = out.substr(at, out.find('\n', at) - at);
    return address_;
  }

  // Starts elastrund `id` with `flags` (and `env`) against the service.
  testing::Subprocess& StartDaemon(const std::string& id,
                                   const std::vector<std::string>& flags,
                                   std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {BinDir() + "/elastrund",
                                     "--rendezvous",
                                     address_,
                                     "--node-id",
                                     id,
                                     "--slots",
                                     "1",
                                     "--state-dir",
                                     dir_ + "/" + id,
                                     "--shutdown-timeout",
                                     "5s",
                                     "--cred-socket",
                                     "none"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    env.insert(env.end(), {marker_, "ELASTRUN_TOKEN=" + std::string(kToken),
                           "ELASTRUN_SNAPSHOT_BASE=" + dir_});
    auto d = testing::Subprocess::Start(argv, env);
    EXPECT_TRUE(d.ok()) << d.status();
    daemons_.push_back(*std::move(d));
    return *daemons_.back();
  }

  // `elastrun ARGS` against the service, with the token and `env`.
  RunResult Cli(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), BinDir() + "/elastrun");
    env.insert(env.end(), {marker_, "ELASTRUN_RENDEZVOUS=" + address_,
                           "ELASTRUN_TOKEN=" + std::string(kToken)});
    absl::StatusOr<RunResult> r = testing::Run(args, env, kDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }

  // The environment of a client with the CA and a client certificate.
  std::vector<std::string> ClientEnv() const {
    return {"ELASTRUN_TLS_CA=" + pki_.ca_cert, "ELASTRUN_TLS_CERT=" + pki_.client_cert,
            "ELASTRUN_TLS_KEY=" + pki_.client_key};
  }

  // Alive nodes as `elastrun nodes` over mutual TLS shows them, -1 on error
  // (the CLI's output is then in nodes_error_).
  int AliveNodes() {
    RunResult r = Cli({"nodes", "--output", "json"}, ClientEnv());
    if (r.exit_code != 0) {
      nodes_error_ = r.output;
      return -1;
    }
    const nlohmann::json nodes =
        nlohmann::json::parse(r.output.substr(r.output.find('{')))["nodes"];
    int alive = 0;
    for (const auto& n : nodes) alive += n["state"] == "ALIVE";
    return alive;
  }

  // Waits for a daemon that must be refused: exit 1, `says` in its output.
  void ExpectRefused(testing::Subprocess& d, const std::string& says) {
    ASSERT_TRUE(d.Wait(kDeadline).ok())
        << "a refused daemon kept running: " << d.Output();
    EXPECT_EQ(d.exit_code(), 1) << d.Output();
    EXPECT_THAT(d.Output(), HasSubstr(says));
  }

  std::string dir_, marker_, address_, nodes_error_;
  testing::TestPki pki_;
  std::unique_ptr<testing::Subprocess> service_;
  std::vector<std::unique_ptr<testing::Subprocess>> daemons_;
};

TEST_F(TlsE2eTest, MutualTlsDaemonsRunAJobTheCliSubmits) {
  ASSERT_NE(StartService({"--tls-cert", pki_.server_cert, "--tls-key", pki_.server_key,
                          "--tls-ca", pki_.ca_cert}),
            "");
  // One daemon with flags, one with the environment only.
  StartDaemon("node0", {"--tls-ca", pki_.ca_cert, "--tls-cert", pki_.client_cert,
                        "--tls-key", pki_.client_key});
  StartDaemon("node1", {}, ClientEnv());
  const absl::Time end = absl::Now() + kDeadline;
  int alive = -1;
  while ((alive = AliveNodes()) != 2 && absl::Now() < end) {
  }
  ASSERT_EQ(alive, 2) << nodes_error_ << daemons_[0]->Output() << daemons_[1]->Output();

  RunResult submit =
      Cli({"submit", "--name", "tls", "--nnodes", "2", "--nproc-per-node", "1",
           "--tls-ca", pki_.ca_cert, "--tls-cert", pki_.client_cert, "--tls-key",
           pki_.client_key, "--", "/bin/sh", "-c", "echo hello from rank $RANK"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  const std::string job(absl::StripTrailingAsciiWhitespace(submit.output));
  RunResult wait = Cli({"wait", job, "--timeout", "120"}, ClientEnv());
  EXPECT_EQ(wait.exit_code, 0) << wait.output << daemons_[0]->Output();
  EXPECT_THAT(wait.output, HasSubstr(job + " SUCCEEDED"));
  RunResult logs = Cli({"logs", job}, ClientEnv());
  EXPECT_THAT(logs.output, HasSubstr("hello from rank 1"));

  // Plaintext: refused at once with what to give (no retrying for 60 s).
  RunResult plain = Cli({"list"});
  EXPECT_EQ(plain.exit_code, 1) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("elastrun list: the service at " + address_ +
                                      " speaks TLS: give --tls-ca FILE"));
  // No client certificate, or one of another CA.
  RunResult no_cert = Cli({"list", "--tls-ca", pki_.ca_cert});
  EXPECT_EQ(no_cert.exit_code, 1) << no_cert.output;
  EXPECT_THAT(no_cert.output, HasSubstr("refused this client's TLS handshake"));
  RunResult other = Cli({"list", "--tls-ca", pki_.ca_cert, "--tls-cert",
                         pki_.other_client_cert, "--tls-key", pki_.other_client_key});
  EXPECT_EQ(other.exit_code, 1) << other.output;
  EXPECT_THAT(other.output, HasSubstr("refused this client's TLS handshake"));
  // A CA that did not sign the service's certificate.
  RunResult untrusted = Cli({"list", "--tls-ca", pki_.other_ca_cert});
  EXPECT_EQ(untrusted.exit_code, 1) << untrusted.output;
  EXPECT_THAT(untrusted.output, HasSubstr("the certificate of the service at " +
                                          address_ + " is not accepted"));

  // Daemons refused the same ways (started together: each waits out one
  // registration deadline before it can tell).
  testing::Subprocess& plain_daemon = StartDaemon("plain", {});
  testing::Subprocess& no_cert_daemon = StartDaemon("nocert", {"--tls-ca", pki_.ca_cert});
  testing::Subprocess& intruder = StartDaemon(
      "intruder", {"--tls-ca", pki_.ca_cert, "--tls-cert", pki_.other_client_cert,
                   "--tls-key", pki_.other_client_key});
  ExpectRefused(plain_daemon, "speaks TLS: give --tls-ca FILE");
  ExpectRefused(no_cert_daemon, "refused this client's TLS handshake");
  ExpectRefused(intruder, "refused this client's TLS handshake");
  // None of them registered.
  EXPECT_EQ(AliveNodes(), 2) << nodes_error_ << service_->Output();
}

TEST_F(TlsE2eTest, ServerNameForAnAddressTheCertificateDoesNotCarry) {
  // TLS without client certificates; the certificate names only
  // rendezvous.test.
  ASSERT_NE(StartService({"--tls-cert", pki_.named_cert, "--tls-key", pki_.named_key}),
            "");
  RunResult by_ip = Cli({"list", "--tls-ca", pki_.ca_cert});
  EXPECT_EQ(by_ip.exit_code, 1) << by_ip.output;
  EXPECT_THAT(by_ip.output, HasSubstr("is not accepted"));
  EXPECT_THAT(by_ip.output, HasSubstr("--tls-server-name"));
  RunResult named =
      Cli({"list", "--tls-ca", pki_.ca_cert, "--tls-server-name", "rendezvous.test"});
  EXPECT_EQ(named.exit_code, 0) << named.output;
  EXPECT_THAT(named.output, HasSubstr("no jobs"));
}

TEST_F(TlsE2eTest, ServiceRefusesBadTlsFlagsWithUsageErrors) {
  absl::StatusOr<RunResult> half =
      testing::Run({BinDir() + "/elastrun-rendezvous", "--listen", "127.0.0.1:0",
                    "--token", kToken, "--tls-cert", pki_.server_cert},
                   {marker_});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->exit_code, 2);
  EXPECT_THAT(half->output, HasSubstr("elastrun-rendezvous: --tls-cert needs --tls-key"));
  absl::StatusOr<RunResult> mismatch =
      testing::Run({BinDir() + "/elastrun-rendezvous", "--listen", "127.0.0.1:0",
                    "--token", kToken, "--tls-cert", pki_.server_cert, "--tls-key", pki_.client_key},
                   {marker_});
  ASSERT_TRUE(mismatch.ok()) << mismatch.status();
  EXPECT_EQ(mismatch->exit_code, 2);
  EXPECT_THAT(mismatch->output,
              HasSubstr("does not match the certificate in --tls-cert"));
}

// A key its user cannot read (here: nobody, the key root's 0600) is named
// with the reason, as a usage error.
TEST_F(TlsE2eTest, UnreadableKeyIsAUsageErrorNamingIt) {
  if (getuid() != 0) GTEST_SKIP() << "skipped: needs root to run a program as nobody";
  const std::string runuser = "/usr/sbin/runuser";
  if (access(runuser.c_str(), X_OK) != 0) GTEST_SKIP() << "skipped: no runuser";
  const std::string bin = BinDir() + "/elastrun-rendezvous";
  absl::StatusOr<RunResult> probe =
      testing::Run({runuser, "-u", "nobody", "--", bin, "--version"});
  if (!probe.ok() || probe->exit_code != 0) {
    GTEST_SKIP() << "skipped: nobody cannot run " << bin;
  }
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);  // the folder and the certificate: readable
  absl::StatusOr<RunResult> r =
      testing::Run({runuser, "-u", "nobody", "--", bin, "--listen", "127.0.0.1:0",
                    "--token", kToken, "--tls-cert", pki_.server_cert, "--tls-key",
                    pki_.server_key},
                   {marker_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->output;
  EXPECT_THAT(r->output, HasSubstr("elastrun-rendezvous: --tls-key " + pki_.server_key +
                                   ": cannot open: Permission denied"));
}

}  // namespace
}  // namespace elastrun
