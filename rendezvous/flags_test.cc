#include "rendezvous/flags.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

struct Result {
  std::optional<int> code;
  ServiceFlags flags;
  std::string out, err;
};

Result Parse(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Result r;
  r.code = ParseServiceFlags(args, out, err, &r.flags);
  r.out = out.str();
  r.err = err.str();
  return r;
}

TEST(ServiceFlagsTest, ValuesAndDefaults) {
  Result r = Parse({"--listen", "127.0.0.1:0", "--state-dir=/tmp/s", "--lease-timeout",
                    "500ms", "--token", "t"});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.listen, "127.0.0.1:0");
  EXPECT_EQ(r.flags.state_dir, "/tmp/s");
  EXPECT_EQ(r.flags.lease_timeout, absl::Milliseconds(500));
  EXPECT_EQ(r.flags.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(r.flags.token, "t");
  EXPECT_EQ(Parse({}).flags.listen, "127.0.0.1:29400");
  // The file is read (or created) by main, with its permission checks.
  Result file = Parse({"--token-file", "/etc/elastrun/token"});
  ASSERT_EQ(file.code, std::nullopt) << file.err;
  EXPECT_EQ(file.flags.token_file, "/etc/elastrun/token");
  EXPECT_EQ(file.flags.token, "");
}

TEST(ServiceFlagsTest, NodeExpiryDefaultsToTenMinutesAndZeroMeansNever) {
  EXPECT_EQ(Parse({}).flags.node_expiry, absl::Minutes(10));
  Result r = Parse({"--node-expiry", "90s"});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.node_expiry, absl::Seconds(90));
  r = Parse({"--node-expiry=0"});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.node_expiry, absl::InfiniteDuration());
  EXPECT_EQ(Parse({}).flags.max_nodes, 50000);
  EXPECT_EQ(Parse({"--max-nodes", "7"}).flags.max_nodes, 7);
  EXPECT_EQ(Parse({"--max-nodes", "0"}).code, 2);
  EXPECT_EQ(Parse({}).flags.max_heartbeat_rate, 4000);
  EXPECT_EQ(Parse({"--max-heartbeat-rate", "0"}).flags.max_heartbeat_rate, 0);
  EXPECT_EQ(Parse({"--max-heartbeat-rate", "250.5"}).flags.max_heartbeat_rate, 250.5);
  EXPECT_EQ(Parse({"--max-heartbeat-rate", "-1"}).code, 2);
  r = Parse({"--node-expiry", "later"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--node-expiry"));
}

TEST(ServiceFlagsTest, UsageErrorsNameTheFlagAndExit2) {
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--lissen", "x"}, "unknown flag --lissen"},
           {{"--listen"}, "--listen needs a value"},
           {{"--lease-timeout", "soon"}, "--lease-timeout"},
           {{"--token", "a", "--token-file", "/nonexistent"}, "--token"},
           {{"extra"}, "unexpected argument extra"}}) {
    Result r = Parse(args);
    EXPECT_EQ(r.code, 2) << says;
    EXPECT_THAT(r.err, HasSubstr("elastrun-rendezvous: " + says)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("Run 'elastrun-rendezvous --help' for usage.\n"));
  }
}

TEST(ServiceFlagsTest, HelpListsEveryFlagAndVersionPrints) {
  Result help = Parse({"--help"});
  EXPECT_EQ(help.code, 0);
  for (const char* flag : {"--listen HOST:PORT", "--state-dir DIR",
                           "--heartbeat-interval DUR", "--lease-timeout DUR",
                           "--node-expiry DUR", "--max-nodes N", "--max-heartbeat-rate N",
                           "--token TOKEN", "--token-file FILE", "--version", "--help"}) {
    EXPECT_THAT(help.out, HasSubstr(flag));
  }
  EXPECT_THAT(help.out, ::testing::StartsWith("usage: elastrun-rendezvous [flags]\n"));
  Result version = Parse({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.out, VersionLine("elastrun-rendezvous") + "\n");
}

TEST(ServiceFlagsTest, TlsFlagsAndHalfAPairIsAUsageError) {
  Result r = Parse({"--tls-cert", "s.crt", "--tls-key", "s.key", "--tls-ca", "ca.crt"});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.tls.cert, "s.crt");
  EXPECT_EQ(r.flags.tls.key, "s.key");
  EXPECT_EQ(r.flags.tls.ca, "ca.crt");
  EXPECT_FALSE(tls::ServerWantsTls(Parse({}).flags.tls));
  for (const auto& [args, says] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--tls-cert", "s.crt"}, "--tls-cert needs --tls-key"},
           {{"--tls-key", "s.key"}, "--tls-key needs --tls-cert"},
           {{"--tls-ca", "ca.crt"},
            "--tls-ca (require client certificates signed by this CA) "
            "needs --tls-cert and --tls-key"}}) {
    Result bad = Parse(args);
    EXPECT_EQ(bad.code, 2) << says;
    EXPECT_THAT(bad.err, HasSubstr("elastrun-rendezvous: " + says)) << bad.err;
  }
  EXPECT_THAT(Parse({"--help"}).out, HasSubstr("--tls-cert FILE"));
}

// A config file in a fresh temp folder, removed with the object.
class TempConfig {
 public:
  explicit TempConfig(const std::string& text) {
    char templ[] = "/tmp/elastrun-rdzv-config-XXXXXX";
    if (mkdtemp(templ) != nullptr) dir_ = templ;
    path_ = dir_ + "/rendezvous.conf";
    std::ofstream(path_) << text;
  }
  ~TempConfig() {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

TEST(ServiceFlagsTest, ConfigFileSetsFlagsAndTheCommandLineWins) {
  TempConfig conf(
      "# the service on this host\n"
      "\n"
      "listen = 0.0.0.0:29400\n"
      "  state-dir=/var/lib/elastrun  \n"
      "; durations as on the command line\n"
      "lease-timeout = 500ms\n"
      "max-nodes = 7\n"
      "insecure = true\n"
      "token = \" spaced \"\n");
  Result r = Parse({"--config", conf.path(), "--listen", "127.0.0.1:0"});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.listen, "127.0.0.1:0");  // the command line wins
  EXPECT_EQ(r.flags.state_dir, "/var/lib/elastrun");
  EXPECT_EQ(r.flags.lease_timeout, absl::Milliseconds(500));
  EXPECT_EQ(r.flags.heartbeat_interval, absl::Seconds(1));  // not in the file
  EXPECT_EQ(r.flags.max_nodes, 7);
  EXPECT_EQ(r.flags.token, " spaced ");
  EXPECT_TRUE(r.flags.insecure);
  EXPECT_FALSE(Parse({"--listen", "127.0.0.1:0"}).flags.insecure);
  EXPECT_THAT(Parse({"--help"}).out, HasSubstr("--insecure"));
  // The order of --config among the flags does not matter.
  r = Parse({"--lease-timeout", "2s", "--config=" + conf.path()});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.listen, "0.0.0.0:29400");
  EXPECT_EQ(r.flags.lease_timeout, absl::Seconds(2));
  // --token-file on the command line wins over the file's token (they
  // exclude each other, as flags).
  r = Parse({"--config", conf.path(), "--token-file", "/etc/elastrun/token"});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.token_file, "/etc/elastrun/token");
  EXPECT_EQ(r.flags.token, "");
  EXPECT_THAT(Parse({"--help"}).out, HasSubstr("--config FILE"));
}

TEST(ServiceFlagsTest, ConfigFileErrorsNameTheFileTheLineAndTheKey) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"listen = 127.0.0.1:1\n\nlissen = x\n",
            ":3: unknown key \"lissen\" (known: listen, state-dir, metrics-listen,"},
           {"# ok\nmax-nodes = 0\n", ":2: --max-nodes"},
           {"max-nodes = many\n", ":1: --max-nodes"},
           {"lease-timeout = soon\n", ":1: --lease-timeout: "},
           {"node-expiry = 1m\nlease-timeout = 2s\nheartbeat-interval = 1x\n",
            ":3: --heartbeat-interval"},
           {"listen\n", ":1: expected `name = value`, got \"listen\""},
           {"= 1\n", ":1: unknown key \"\""},
           {"--listen = 1\n", ":1: unknown key \"--listen\""},
           {"help = true\n", ":1: unknown key \"help\""},
           {"config = /etc/other.conf\n", ":1: unknown key \"config\""},
           {"state-dir =\n", ":1: state-dir needs a value"},
           {"listen = a:1\nlisten = b:2\n", ":2: listen is already set on line 1"},
           {"token = t\ntoken-file = /f\n", ":2: token-file and token (line 1) exclude each other"},
           {"tls-cert = s.crt\n", ":1: --tls-cert needs --tls-key"}}) {
    TempConfig conf(text);
    Result r = Parse({"--config", conf.path()});
    EXPECT_EQ(r.code, 2) << text;
    EXPECT_THAT(r.err, HasSubstr("elastrun-rendezvous: " + conf.path() + says)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("Run 'elastrun-rendezvous --help' for usage.\n"));
  }
  // A value from the command line is not the file's: no line is named.
  TempConfig conf("listen = 127.0.0.1:1\n");
  Result r = Parse({"--config", conf.path(), "--lease-timeout", "soon"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("elastrun-rendezvous: --lease-timeout"));
  Result missing = Parse({"--config", "/nonexistent/rendezvous.conf"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("elastrun-rendezvous: --config /nonexistent/rendezvous.conf: "
                                     "cannot read: No such file or directory"));
  Result folder = Parse({"--config", "/tmp"});
  EXPECT_EQ(folder.code, 2);
  EXPECT_THAT(folder.err, HasSubstr("--config /tmp: cannot read"));
}

}  // namespace
}  // namespace elastrun::rendezvous
