#include "launcher/cli/spec.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::string ErrorOf(const absl::StatusOr<v1::JobSpec>& s) {
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : std::string(s.status().message());
}

absl::StatusOr<v1::JobSpec> Yaml(const std::string& text,
                                 const std::vector<std::string>& overrides = {}) {
  return JobSpecFromYamlString(text, "job.yaml", overrides);
}

TEST(CliSpecTest, ExampleJobFileLoads) {
  absl::StatusOr<v1::JobSpec> s = JobSpecFromYaml(
      std::string(ELASTRUN_CONFIGS_DIR) + "/jobs/fashion_mnist_mlp.yaml", {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name(), "fashion-mnist-mlp");
  EXPECT_EQ(s->min_nodes(), 1);
  EXPECT_EQ(s->max_nodes(), 4);
  EXPECT_EQ(s->nproc_per_node(), 2);
  EXPECT_EQ(s->max_restarts(), 3);
  EXPECT_THAT(s->argv(), ElementsAre("elastrun-train", "--config",
                                     "configs/fashion_mnist_mlp.yaml"));
}

TEST(CliSpecTest, EveryExampleJobFileLoads) {
  for (const char* name : {"fashion_mnist_mlp.yaml", "test_worker.yaml"}) {
    absl::StatusOr<v1::JobSpec> s =
        JobSpecFromYaml(std::string(ELASTRUN_CONFIGS_DIR) + "/jobs/" + name, {});
    EXPECT_TRUE(s.ok()) << name << ": " << s.status();
  }
}

TEST(CliSpecTest, AllFieldsAndDefaults) {
  absl::StatusOr<v1::JobSpec> s = Yaml(
      "command: [python, train.py]\n"
      "env: {SEED: 7, MODE: fast}\n"
      "working_dir: /data\n"
      "run_id: mlp-a\n"
      "pool: gpu\n"
      "last_call_timeout: 250ms\n"
      "join_timeout: 2\n"
      "wait_for_nodes: true\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name(), "");  // the service names it "job"
  EXPECT_EQ(s->min_nodes(), 1);
  EXPECT_EQ(s->max_nodes(), 1);
  EXPECT_EQ(s->nproc_per_node(), 1);
  EXPECT_EQ(s->max_restarts(), 0);
  EXPECT_THAT(s->env(), UnorderedElementsAre(Pair("SEED", "7"), Pair("MODE", "fast")));
  EXPECT_EQ(s->working_dir(), "/data");
  EXPECT_EQ(s->run_id(), "mlp-a");
  EXPECT_EQ(s->pool(), "gpu");
  EXPECT_EQ(s->last_call_timeout().nanos(), 250000000);
  EXPECT_EQ(s->join_timeout().seconds(), 2);
  EXPECT_TRUE(s->wait_for_nodes());

  absl::StatusOr<v1::JobSpec> bare = Yaml("command: [x]\n");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->wait_for_nodes());         // refused if no node could hold it
  EXPECT_FALSE(bare->has_last_call_timeout());  // the service's default applies
  EXPECT_FALSE(bare->has_join_timeout());
  EXPECT_FALSE(bare->has_hang_timeout());  // derived from the step time
}

TEST(CliSpecTest, HangTimeoutFromFileAndFlag) {
  EXPECT_EQ(Yaml("command: [x]\nhang_timeout: 10m\n")->hang_timeout().seconds(), 600);
  EXPECT_EQ(Yaml("command: [x]\nhang_timeout: off\n")->hang_timeout().seconds(), -1);
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\nhang_timeout: soon\n")),
              HasSubstr("hang_timeout"));
  SpecFlags f;
  f.program = {"x"};
  f.hang_timeout = {"off"};
  EXPECT_EQ(ApplySpecFlags(f, DefaultJobSpec(), false)->hang_timeout().seconds(), -1);
  f.hang_timeout = {"later"};
  EXPECT_THAT(ErrorOf(ApplySpecFlags(f, DefaultJobSpec(), false)),
              HasSubstr("--hang-timeout"));
}

TEST(CliSpecTest, NnodesAsNumberOrRange) {
  absl::StatusOr<v1::JobSpec> s = Yaml("nnodes: 3\ncommand: [x]\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->min_nodes(), 3);
  EXPECT_EQ(s->max_nodes(), 3);
}

TEST(CliSpecTest, OverridesApply) {
  absl::StatusOr<v1::JobSpec> s = Yaml("nnodes: '1:2'\ncommand: [x]\n",
                                       {"nnodes=2:4", "+env.SEED=3", "max_restarts=5"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->min_nodes(), 2);
  EXPECT_EQ(s->max_nodes(), 4);
  EXPECT_EQ(s->max_restarts(), 5);
  EXPECT_EQ(s->env().at("SEED"), "3");
}

TEST(CliSpecTest, UnknownKeyNamesPositionAndSuggests) {
  EXPECT_THAT(
      ErrorOf(Yaml("command: [x]\nmax_restart: 2\n")),
      HasSubstr("job.yaml:2:1: max_restart: unknown key 'max_restart' for JobSpec"));
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\nmax_restart: 2\n")),
              HasSubstr("did you mean: max_restarts?"));
}

TEST(CliSpecTest, WrongTypeNamesPositionAndField) {
  EXPECT_THAT(
      ErrorOf(Yaml("command: [x]\nnproc_per_node: two\n")),
      HasSubstr("job.yaml:2:17: nproc_per_node: expected int, got string \"two\""));
  EXPECT_THAT(ErrorOf(Yaml("command: x\n")),
              HasSubstr("job.yaml:1:10: command: expected list<string>"));
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\nenv: [A]\n")),
              HasSubstr("job.yaml:2:6: env: expected map<string>"));
}

TEST(CliSpecTest, ValueErrorsNameField) {
  EXPECT_THAT(ErrorOf(Yaml("nnodes: '4:2'\ncommand: [x]\n")),
              HasSubstr("job.yaml:1:9: nnodes: MIN 4 is greater than MAX 2"));
  EXPECT_THAT(ErrorOf(Yaml("nnodes: 0\ncommand: [x]\n")),
              HasSubstr("job.yaml:1:9: nnodes:"));
  EXPECT_THAT(ErrorOf(Yaml("nproc_per_node: 0\ncommand: [x]\n")),
              HasSubstr("job.yaml:1:17: nproc_per_node: 0 is out of range"));
  EXPECT_THAT(ErrorOf(Yaml("max_restarts: -1\ncommand: [x]\n")),
              HasSubstr("job.yaml:1:15: max_restarts: -1 must be in 0.."));
  EXPECT_THAT(ErrorOf(Yaml("name: 'a b'\ncommand: [x]\n")),
              HasSubstr("job.yaml:1:7: name: \"a b\" has a character outside"));
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\nenv: {1A: x}\n")),
              HasSubstr("job.yaml:2:7: env.1A: \"1A\" is not a variable name"));
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\njoin_timeout: 0\n")),
              HasSubstr("job.yaml:2:15: join_timeout: must be greater than 0"));
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\npool: 'a b'\n")),
              HasSubstr("job.yaml:2:7: pool: \"a b\" has a character outside"));
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\nlast_call_timeout: soon\n")),
              HasSubstr("job.yaml:2:20: last_call_timeout: 'soon' is not a duration"));
}

TEST(CliSpecTest, NoCommandNamesField) {
  EXPECT_THAT(ErrorOf(Yaml("name: j\n")), HasSubstr("missing required key 'command'"));
  EXPECT_THAT(ErrorOf(Yaml("command: []\n")),
              HasSubstr("job.yaml:1:10: command: no command"));
  EXPECT_THAT(ErrorOf(Yaml("command: ['', x]\n")),
              HasSubstr("job.yaml:1:11: command[0]: the program name is empty"));
}

TEST(CliSpecTest, OverrideSetsAKeyLeftToItsDefault) {
  absl::StatusOr<v1::JobSpec> s = Yaml("command: [x]\n", {"nproc_per_node=4"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->nproc_per_node(), 4);
  EXPECT_THAT(
      ErrorOf(Yaml("command: [x]\n", {"nproc_per_node=0"})),
      HasSubstr("override #1 'nproc_per_node=0':1:16: nproc_per_node: 0 is out of "
                "range"));
}

TEST(CliSpecTest, BadOverrideIsRefused) {
  EXPECT_THAT(ErrorOf(Yaml("command: [x]\n", {"nnodse=2"})), HasSubstr("nnodse"));
}

TEST(CliSpecTest, MissingFileIsNotFound) {
  absl::StatusOr<v1::JobSpec> s = JobSpecFromYaml("/nonexistent/job.yaml", {});
  EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
}

TEST(CliSpecTest, FlagsBuildSpec) {
  SpecFlags f;
  f.name = {"mnist"};
  f.nnodes = {"2:3"};
  f.nproc_per_node = {"4"};
  f.max_restarts = {"2"};
  f.env = {"A=1", "B=x=y"};
  f.working_dir = {"/w"};
  f.run_id = {"mlp-a"};
  f.pool = {"gpu.a100"};
  f.join_timeout = {"30s"};
  f.hang_timeout = {"90s"};
  f.program = {"python", "train.py", "--epochs", "3"};
  absl::StatusOr<v1::JobSpec> s = ApplySpecFlags(f, DefaultJobSpec(), false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name(), "mnist");
  EXPECT_EQ(s->min_nodes(), 2);
  EXPECT_EQ(s->max_nodes(), 3);
  EXPECT_EQ(s->nproc_per_node(), 4);
  EXPECT_EQ(s->max_restarts(), 2);
  EXPECT_THAT(s->env(), UnorderedElementsAre(Pair("A", "1"), Pair("B", "x=y")));
  EXPECT_EQ(s->working_dir(), "/w");
  EXPECT_EQ(s->run_id(), "mlp-a");
  EXPECT_EQ(s->pool(), "gpu.a100");
  EXPECT_EQ(s->join_timeout().seconds(), 30);
  EXPECT_EQ(s->hang_timeout().seconds(), 90);
  EXPECT_FALSE(s->wait_for_nodes());
  EXPECT_THAT(s->argv(), ElementsAre("python", "train.py", "--epochs", "3"));
  f.wait_for_nodes = true;
  s = ApplySpecFlags(f, DefaultJobSpec(), false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->wait_for_nodes());
}

TEST(CliSpecTest, FlagsDefaults) {
  SpecFlags f;
  f.program = {"x"};
  absl::StatusOr<v1::JobSpec> s = ApplySpecFlags(f, DefaultJobSpec(), false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->min_nodes(), 1);
  EXPECT_EQ(s->max_nodes(), 1);
  EXPECT_EQ(s->nproc_per_node(), 1);
  EXPECT_EQ(s->max_restarts(), 0);
}

TEST(CliSpecTest, FlagErrorsNameFlag) {
  auto with = [](auto set) {
    SpecFlags f;
    f.program = {"x"};
    set(f);
    return ApplySpecFlags(f, DefaultJobSpec(), false);
  };
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.nnodes = {"3:2"}; })),
              HasSubstr("--nnodes: MIN 3 is greater than MAX 2"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.nproc_per_node = {"0"}; })),
              HasSubstr("--nproc-per-node: 0 is out of range"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.nproc_per_node = {"gpu"}; })),
              HasSubstr("--nproc-per-node"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.max_restarts = {"-2"}; })),
              HasSubstr("--max-restarts: -2"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.env = {"NOVALUE"}; })),
              HasSubstr("--env: \"NOVALUE\" is not NAME=VALUE"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.name = {"a/b"}; })),
              HasSubstr("--name: \"a/b\" has a character outside"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.pool = {"gpu/a100"}; })),
              HasSubstr("--pool: \"gpu/a100\" has a character outside"));
  EXPECT_THAT(ErrorOf(with([](SpecFlags& f) { f.join_timeout = {"0"}; })),
              HasSubstr("--join-timeout: must be greater than 0"));
  EXPECT_THAT(ErrorOf(ApplySpecFlags(SpecFlags(), DefaultJobSpec(), false)),
              HasSubstr("no command"));
}

TEST(CliSpecTest, FlagsOverrideAJobFile) {
  absl::StatusOr<v1::JobSpec> file = Yaml("nnodes: '1:4'\ncommand: [x]\n");
  ASSERT_TRUE(file.ok());
  SpecFlags f;
  f.nnodes = {"2"};
  absl::StatusOr<v1::JobSpec> s = ApplySpecFlags(f, *file, true);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->min_nodes(), 2);
  EXPECT_EQ(s->max_nodes(), 2);
  EXPECT_THAT(s->argv(), ElementsAre("x"));
  f.program = {"y"};
  EXPECT_THAT(ErrorOf(ApplySpecFlags(f, *file, true)), HasSubstr("not both"));
}

v1::JobSpec WithEnv(std::map<std::string, std::string> env) {
  v1::JobSpec spec;
  spec.mutable_env()->insert(env.begin(), env.end());
  return spec;
}

std::map<std::string, std::string> EnvOf(const v1::JobSpec& spec) {
  return std::map<std::string, std::string>(spec.env().begin(), spec.env().end());
}

const std::vector<std::string> kSubmitter = {"PATH=/usr/bin",
                                             "MYVAR=mine",
                                             "ELASTRUN_TOKEN=secret",
                                             "ELASTRUN_TOKEN_FILE=/t",
                                             "ELASTRUN_CREDENTIAL=c",
                                             "ELASTRUN_MY_TOKEN=x",
                                             "BASH_FUNC_f%%=() { :; }",
                                             "ELASTRUN_RENDEZVOUS=h:1",
                                             "A=submitter"};

TEST(CliSpecTest, ExportAllSendsTheWholeEnvironmentButElastrunSecrets) {
  for (const std::string value : {"ALL", ""}) {
    v1::JobSpec spec = WithEnv({{"A", "flag"}});
    ASSERT_TRUE(ApplyExport(value, kSubmitter, &spec).ok());
    EXPECT_TRUE(spec.replace_env());
    EXPECT_EQ(EnvOf(spec), (std::map<std::string, std::string>{
                               {"A", "flag"},  // --env / the job file win
                               {"ELASTRUN_RENDEZVOUS", "h:1"},
                               {"MYVAR", "mine"},
                               {"PATH", "/usr/bin"}}));
  }
}

TEST(CliSpecTest, ExportNoneKeepsTheDaemonsEnvironment) {
  v1::JobSpec spec = WithEnv({{"A", "flag"}});
  ASSERT_TRUE(ApplyExport("NONE", kSubmitter, &spec).ok());
  EXPECT_FALSE(spec.replace_env());
  EXPECT_EQ(EnvOf(spec), (std::map<std::string, std::string>{{"A", "flag"}}));
}

TEST(CliSpecTest, ExportListAddsNamedVariablesToTheDaemons) {
  v1::JobSpec spec = WithEnv({{"A", "flag"}});
  ASSERT_TRUE(ApplyExport("MYVAR,UNSET_HERE,B=given,A=list", kSubmitter, &spec).ok());
  EXPECT_FALSE(spec.replace_env());
  EXPECT_EQ(EnvOf(spec), (std::map<std::string, std::string>{
                             {"A", "flag"}, {"B", "given"}, {"MYVAR", "mine"}}));
  // ALL in a list: everything, plus the values given.
  v1::JobSpec all;
  ASSERT_TRUE(ApplyExport("ALL,EDITOR=vi", kSubmitter, &all).ok());
  EXPECT_TRUE(all.replace_env());
  EXPECT_EQ(EnvOf(all).at("EDITOR"), "vi");
  EXPECT_EQ(EnvOf(all).count("ELASTRUN_TOKEN"), 0u);
}

TEST(CliSpecTest, ExportErrorsNameTheFlagAndTheItem) {
  for (const std::string bad : {"NONE,MYVAR", "1X", "A-B=1", "=x"}) {
    v1::JobSpec spec;
    absl::Status st = ApplyExport(bad, kSubmitter, &spec);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << bad;
    EXPECT_THAT(st.message(), HasSubstr("--export: \"")) << bad;
  }
}

}  // namespace
}  // namespace elastrun::launcher
