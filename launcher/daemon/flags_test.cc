#include "launcher/daemon/flags.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

struct Result {
  std::optional<int> code;
  DaemonFlags flags;
  std::string out, err;
};

Result Parse(const std::vector<std::string>& args,
             std::map<std::string, std::string> env = {}, bool is_root = false) {
  std::ostringstream out, err;
  Result r;
  r.code = ParseDaemonFlags(
      args,
      [env](const std::string& k) -> std::optional<std::string> {
        auto it = env.find(k);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      "host1", is_root, out, err, &r.flags);
  r.out = out.str();
  r.err = err.str();
  return r;
}

TEST(DaemonFlagsTest, ValuesDefaultsAndEnvironment) {
  Result r = Parse(
      {"--rendezvous", "10.0.0.1:29400", "--slots=4", "--labels", "gpu=a100,zone=b",
       "--pool", "gpu.a100", "--shutdown-timeout", "5s", "--standby", "--no-snapshots"},
      {{"ELASTRUN_TOKEN", "t"}});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.rendezvous_host, "10.0.0.1");
  EXPECT_EQ(r.flags.rendezvous_port, 29400);
  EXPECT_EQ(r.flags.node_id, "host1");
  EXPECT_EQ(r.flags.slots, 4);
  EXPECT_EQ(r.flags.labels, (std::map<std::string, std::string>{{"gpu", "a100"}, {"zone", "b"}}));
  EXPECT_EQ(r.flags.pool, "gpu.a100");
  EXPECT_EQ(r.flags.shutdown_timeout, absl::Seconds(5));
  EXPECT_TRUE(r.flags.standby);
  EXPECT_TRUE(r.flags.no_snapshots);
  EXPECT_EQ(r.flags.token, "t");
  // No home, not root: the last resort.
  EXPECT_EQ(r.flags.state_dir, "/tmp/elastrund-host1");
  EXPECT_EQ(r.flags.log_dir, "/tmp/elastrund-host1/logs");

  Result env = Parse({"--node-id", "n2"}, {{"ELASTRUN_RENDEZVOUS", "127.0.0.1:7"}});
  ASSERT_EQ(env.code, std::nullopt) << env.err;
  EXPECT_EQ(env.flags.rendezvous_port, 7);
  EXPECT_EQ(env.flags.slots, 0);  // main's default
  EXPECT_FALSE(env.flags.no_snapshots);
  EXPECT_EQ(env.flags.log_dir, "/tmp/elastrund-n2/logs");
  // A flag wins over the environment.
  Result both = Parse({"--rendezvous=127.0.0.1:8"}, {{"ELASTRUN_RENDEZVOUS", "127.0.0.1:7"}});
  EXPECT_EQ(both.flags.rendezvous_port, 8);
  EXPECT_EQ(both.flags.token, "");  // main reads the default token file
  Result sock = Parse({"--rendezvous=h:1"}, {{"ELASTRUN_CRED_SOCKET", "/x/cred.sock"}});
  EXPECT_EQ(sock.flags.cred_socket, "/x/cred.sock");
}

TEST(DaemonFlagsTest, TokenFileFromEnvironmentIsCheckedLikeTheFlag) {
  char templ[] = "/tmp/elastrun-daemon-flags-XXXXXX";
  ASSERT_NE(mkdtemp(templ), nullptr);
  const std::string path = std::string(templ) + "/token";
  std::ofstream(path) << "t0k\n";
  chmod(path.c_str(), 0600);
  Result ok = Parse({"--rendezvous=h:1"}, {{"ELASTRUN_TOKEN_FILE", path}});
  ASSERT_EQ(ok.code, std::nullopt) << ok.err;
  EXPECT_EQ(ok.flags.token, "t0k");
  chmod(path.c_str(), 0644);
  Result open = Parse({"--rendezvous=h:1"}, {{"ELASTRUN_TOKEN_FILE", path}});
  EXPECT_EQ(open.code, 2);
  EXPECT_THAT(open.err, HasSubstr("chmod 600 " + path));
  Result flag = Parse({"--rendezvous=h:1", "--token-file", path});
  EXPECT_EQ(flag.code, 2);
  EXPECT_THAT(flag.err, HasSubstr("--token-file: token file " + path + " is open to group"));
  unlink(path.c_str());
  rmdir(templ);
}

TEST(DaemonFlagsTest, StateDirDefaultsByUserAndOverrides) {
  const std::map<std::string, std::string> env = {{"ELASTRUN_RENDEZVOUS", "127.0.0.1:7"},
                                                  {"HOME", "/home/u"},
                                                  {"XDG_STATE_HOME", "/xdg"}};
  Result root = Parse({"--node-id", "n1"}, env, /*is_root=*/true);
  ASSERT_EQ(root.code, std::nullopt) << root.err;
  EXPECT_EQ(root.flags.state_dir, "/var/lib/elastrund/n1");
  EXPECT_EQ(root.flags.log_dir, "/var/lib/elastrund/n1/logs");

  EXPECT_EQ(Parse({"--node-id", "n1"}, env).flags.state_dir, "/xdg/elastrund/n1");
  Result home = Parse({"--node-id", "a/b"}, {{"ELASTRUN_RENDEZVOUS", "127.0.0.1:7"},
                                             {"HOME", "/home/u"},
                                             {"XDG_STATE_HOME", "relative"}});
  // A relative XDG_STATE_HOME is ignored; a node id never makes a subfolder.
  EXPECT_EQ(home.flags.state_dir, "/home/u/.local/state/elastrund/a_b");

  Result given = Parse({"--state-dir", "/s", "--log-dir", "/l"}, env);
  EXPECT_EQ(given.flags.state_dir, "/s");
  EXPECT_EQ(given.flags.log_dir, "/l");
  EXPECT_EQ(Parse({"--state-dir", "/s"}, env).flags.log_dir, "/s/logs");
}

TEST(DaemonFlagsTest, UsageErrorsNameTheFlagAndExit2) {
  for (const auto& [args, says] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--rendezvous", "h:1", "--slot", "2"}, "unknown flag --slot"},
           {{"--rendezvous"}, "--rendezvous needs a value"},
           {{}, "--rendezvous HOST:PORT (or $ELASTRUN_RENDEZVOUS) is required"},
           {{"--rendezvous", "nocolon"}, "--rendezvous"},
           {{"--rendezvous", "h:1", "--slots", "0"}, "--slots"},
           {{"--rendezvous", "h:1", "--labels", "a"}, "--labels: \"a\" is not key=value"},
           {{"--rendezvous", "h:1", "--pool", "a b"},
            "--pool: \"a b\" is not a pool name"},
           {{"--rendezvous", "h:1", "--shutdown-timeout", "x"}, "--shutdown-timeout"},
           {{"--rendezvous", "h:1", "--token-file", "/nonexistent/t"}, "--token-file"},
           {{"--rendezvous", "h:1", "--standby=maybe"}, "--standby"}}) {
    Result r = Parse(args);
    EXPECT_EQ(r.code, 2) << says;
    EXPECT_THAT(r.err, HasSubstr("elastrund: " + says)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("Run 'elastrund --help' for usage.\n"));
  }
}

TEST(DaemonFlagsTest, HelpListsEveryFlagAndVersionPrints) {
  Result help = Parse({"--help"});
  EXPECT_EQ(help.code, 0);
  for (const char* flag :
       {"--rendezvous HOST:PORT", "--node-id ID", "--slots N", "--advertise-addr ADDR",
        "--labels K=V,...", "--pool NAME", "--log-dir DIR", "--token TOKEN",
        "--token-file FILE", "--shutdown-timeout DUR", "--standby", "--no-snapshots",
        "--cred-socket PATH", "$ELASTRUN_TOKEN_FILE", "--version", "--help",
        "BASE/elastrun-UID/JOB@NODE/"}) {
    EXPECT_THAT(help.out, HasSubstr(flag));
  }
  Result version = Parse({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.out, VersionLine("elastrund") + "\n");
}

TEST(DaemonFlagsTest, TlsFromFlagsOrEnvironment) {
  const std::map<std::string, std::string> env = {
      {"ELASTRUN_RENDEZVOUS", "127.0.0.1:7"},
      {"ELASTRUN_TLS_CA", "env-ca.crt"},
      {"ELASTRUN_TLS_CERT", "env.crt"},
      {"ELASTRUN_TLS_KEY", "env.key"},
      {"ELASTRUN_TLS_SERVER_NAME", "env.name"}};
  Result from_env = Parse({}, env);
  ASSERT_EQ(from_env.code, std::nullopt) << from_env.err;
  EXPECT_EQ(from_env.flags.tls.ca, "env-ca.crt");
  EXPECT_EQ(from_env.flags.tls.cert, "env.crt");
  EXPECT_EQ(from_env.flags.tls.key, "env.key");
  EXPECT_EQ(from_env.flags.tls.server_name, "env.name");
  // A flag wins over the environment.
  Result flags = Parse({"--tls-ca", "ca.crt", "--tls-cert", "c.crt", "--tls-key", "c.key",
                        "--tls-server-name", "svc"},
                       env);
  ASSERT_EQ(flags.code, std::nullopt) << flags.err;
  EXPECT_EQ(flags.flags.tls.ca, "ca.crt");
  EXPECT_EQ(flags.flags.tls.cert, "c.crt");
  EXPECT_EQ(flags.flags.tls.key, "c.key");
  EXPECT_EQ(flags.flags.tls.server_name, "svc");
  EXPECT_FALSE(tls::ClientWantsTls(Parse({"--rendezvous", "h:1"}).flags.tls));

  for (const auto& [args, says] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--tls-cert", "c.crt"}, "--tls-cert needs --tls-key"},
           {{"--tls-cert", "c.crt", "--tls-key", "c.key"},
            "--tls-cert and --tls-key (a client certificate) need --tls-ca"},
           {{"--tls-server-name", "svc"}, "--tls-server-name needs --tls-ca"}}) {
    Result r = Parse(args, {{"ELASTRUN_RENDEZVOUS", "h:1"}});
    EXPECT_EQ(r.code, 2) << says;
    EXPECT_THAT(r.err, HasSubstr("elastrund: " + says)) << r.err;
  }
  EXPECT_THAT(Parse({"--help"}).out, HasSubstr("--tls-ca FILE"));
}

TEST(DaemonFlagsTest, ConfigFileSetsFlagsBeforeTheEnvironment) {
  char templ[] = "/tmp/elastrun-daemon-config-XXXXXX";
  ASSERT_NE(mkdtemp(templ), nullptr);
  const std::string dir = templ;
  const std::string token = dir + "/token";
  std::ofstream(token) << "t0k\n";
  chmod(token.c_str(), 0600);
  const std::string conf = dir + "/elastrund.conf";
  std::ofstream(conf) << "# this node\n"
                         "rendezvous = 10.0.0.1:29400\n"
                         "node-id = gpu-7\n"
                         "slots = 8\n"
                         "labels = gpu=a100,zone=b\n"
                         "token-file = " << token << "\n"
                         "cred-socket = none\n"
                         "shutdown-timeout = 1m\n"
                         "standby = true\n"
                         "no-snapshots = false\n";
  Result r = Parse({"--config", conf, "--slots", "2"},
                   {{"ELASTRUN_RENDEZVOUS", "127.0.0.1:7"}, {"ELASTRUN_TOKEN", "env"}});
  ASSERT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(r.flags.rendezvous_host, "10.0.0.1");  // the file wins over the environment
  EXPECT_EQ(r.flags.node_id, "gpu-7");
  EXPECT_EQ(r.flags.slots, 2);  // the command line wins over the file
  EXPECT_EQ(r.flags.labels, (std::map<std::string, std::string>{{"gpu", "a100"}, {"zone", "b"}}));
  EXPECT_EQ(r.flags.token, "t0k");
  EXPECT_EQ(r.flags.cred_socket, "none");
  EXPECT_EQ(r.flags.shutdown_timeout, absl::Minutes(1));
  EXPECT_TRUE(r.flags.standby);
  EXPECT_FALSE(r.flags.no_snapshots);
  EXPECT_EQ(r.flags.state_dir, "/tmp/elastrund-gpu-7");
  // --token on the command line wins over the file's token-file.
  Result flag = Parse({"--config", conf, "--token", "cli"});
  ASSERT_EQ(flag.code, std::nullopt) << flag.err;
  EXPECT_EQ(flag.flags.token, "cli");

  // Errors name the file, the line and the key, whoever finds them.
  chmod(token.c_str(), 0644);
  Result open = Parse({"--config", conf});
  EXPECT_EQ(open.code, 2);
  EXPECT_THAT(open.err, HasSubstr("elastrund: " + conf + ":6: --token-file: token file " +
                                  token + " is open to group"));
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"rendezvous = h:1\nslots = 0\n", ":2: --slots"},
           {"rendezvous = h:1\nstandby = maybe\n", ":2: --standby: \"maybe\" is not a valid value"},
           {"rendezvous = h\n", ":1: --rendezvous"},
           {"rendezvous = h:1\nlabels = gpu\n", ":2: --labels: \"gpu\" is not key=value"},
           {"rendezvous = h:1\nshutdown-timeout = long\n", ":2: --shutdown-timeout"},
           {"rendezvous = h:1\nslot = 2\n", ":2: unknown key \"slot\" (known: rendezvous, node-id, "
                                            "slots,"}}) {
    std::ofstream(conf, std::ios::trunc) << text;
    Result bad = Parse({"--config", conf});
    EXPECT_EQ(bad.code, 2) << text;
    EXPECT_THAT(bad.err, HasSubstr("elastrund: " + conf + says)) << bad.err;
  }
  unlink(conf.c_str());
  unlink(token.c_str());
  rmdir(templ);
}

}  // namespace
}  // namespace elastrun::launcher
