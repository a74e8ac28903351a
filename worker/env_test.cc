#include "worker/env.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Vars = std::map<std::string, std::string>;

EnvLookup LookupIn(const Vars& vars) {
  return [&vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// What torchrun sets for rank 3 of 4 (2 nodes x 2), second attempt.
Vars Torchrun() {
  return {{"RANK", "3"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"GROUP_RANK", "1"},
          {"GROUP_WORLD_SIZE", "2"},
          {"ROLE_RANK", "3"},
          {"ROLE_WORLD_SIZE", "4"},
          {"ROLE_NAME", "trainer"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RESTART_COUNT", "1"},
          {"TORCHELASTIC_MAX_RESTARTS", "3"},
          {"TORCHELASTIC_RUN_ID", "job-7"},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"},
          {"TORCHELASTIC_ERROR_FILE", "/tmp/err.json"},
          {"OMP_NUM_THREADS", "1"}};
}

TEST(WorkerEnvTest, ReadsEveryTorchrunVariable) {
  Vars vars = Torchrun();
  vars["ELASTRUN_AGENT_SOCKET"] = "/run/elastrun/a.sock";
  vars["ELASTRUN_ROUND"] = "5";
  vars["ELASTRUN_SNAPSHOT"] = "/elastrun-job-7";
  absl::StatusOr<WorkerEnv> env =
      WorkerEnv::FromLookup(LookupIn(vars), EnvStrictness::kTorchrun);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->group_world_size, 2);
  EXPECT_EQ(env->role_rank, 3);
  EXPECT_EQ(env->role_world_size, 4);
  EXPECT_EQ(env->role_name, "trainer");
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->restart_count, 1);
  EXPECT_EQ(env->max_restarts, 3);
  EXPECT_EQ(env->run_id, "job-7");
  EXPECT_EQ(env->error_file, "/tmp/err.json");
  EXPECT_FALSE(env->use_agent_store);
  EXPECT_EQ(env->omp_num_threads, 1);
  EXPECT_EQ(env->agent_socket, "/run/elastrun/a.sock");
  EXPECT_EQ(env->round, 5);
  EXPECT_EQ(env->snapshot, "/elastrun-job-7");
}

TEST(WorkerEnvTest, MinimalFillsTheRestAsOneNodeFirstAttempt) {
  Vars vars = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", "1234"}};
  absl::StatusOr<WorkerEnv> env = WorkerEnv::FromLookup(LookupIn(vars));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 0);
  EXPECT_EQ(env->group_world_size, 1);
  EXPECT_EQ(env->role_rank, 1);
  EXPECT_EQ(env->role_world_size, 2);
  EXPECT_EQ(env->role_name, "default");
  EXPECT_EQ(env->restart_count, 0);
  EXPECT_FALSE(env->use_agent_store);
  EXPECT_FALSE(env->omp_num_threads.has_value());
  EXPECT_FALSE(env->round.has_value());
  EXPECT_TRUE(env->error_file.empty());
}

TEST(WorkerEnvTest, AgentStoreTrue) {
  Vars vars = Torchrun();
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  absl::StatusOr<WorkerEnv> env = WorkerEnv::FromLookup(LookupIn(vars));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->use_agent_store);
}

TEST(WorkerEnvTest, ToVariablesRoundTrips) {
  Vars vars = Torchrun();
  vars["ELASTRUN_ROUND"] = "9";
  vars["ELASTRUN_AGENT_SOCKET"] = "/s";
  absl::StatusOr<WorkerEnv> env = WorkerEnv::FromLookup(LookupIn(vars));
  ASSERT_TRUE(env.ok()) << env.status();
  Vars again;
  for (const auto& [name, value] : env->ToVariables()) again[name] = value;
  EXPECT_EQ(again, vars);
  absl::StatusOr<WorkerEnv> env2 =
      WorkerEnv::FromLookup(LookupIn(again), EnvStrictness::kTorchrun);
  ASSERT_TRUE(env2.ok()) << env2.status();
  EXPECT_EQ(*env, *env2);
}

TEST(WorkerEnvTest, ErrorsNameTheVariableAndTheLauncher) {
  struct Case {
    const char* name;
    const char* value;  // nullptr: unset
    const char* expected;
  };
  const Case cases[] = {
      {"RANK", nullptr, "RANK is not set"},
      {"WORLD_SIZE", nullptr, "WORLD_SIZE is not set"},
      {"MASTER_ADDR", nullptr, "MASTER_ADDR is not set"},
      {"MASTER_ADDR", "", "MASTER_ADDR is empty"},
      {"MASTER_PORT", nullptr, "MASTER_PORT is not set"},
      {"RANK", "two", "RANK: 'two' is not a whole number"},
      {"RANK", "-1", "RANK: -1 is out of range"},
      {"RANK", "4", "RANK=4 is not below WORLD_SIZE=4"},
      {"WORLD_SIZE", "0", "WORLD_SIZE: 0 is out of range"},
      {"WORLD_SIZE", "3.5", "WORLD_SIZE: '3.5' is not a whole number"},
      {"LOCAL_RANK", "2", "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
      {"LOCAL_WORLD_SIZE", "5", "LOCAL_WORLD_SIZE=5 is greater than WORLD_SIZE=4"},
      {"GROUP_RANK", "2", "GROUP_RANK=2 is not below GROUP_WORLD_SIZE=2"},
      {"ROLE_RANK", "4", "ROLE_RANK=4 is not below ROLE_WORLD_SIZE=4"},
      {"MASTER_PORT", "65536", "MASTER_PORT: 65536 is out of range"},
      {"MASTER_PORT", "0", "MASTER_PORT: 0 is out of range"},
      {"MASTER_PORT", "http", "MASTER_PORT: 'http' is not a whole number"},
      {"TORCHELASTIC_RESTART_COUNT", "-2", "TORCHELASTIC_RESTART_COUNT: -2"},
      {"TORCHELASTIC_MAX_RESTARTS", "x", "TORCHELASTIC_MAX_RESTARTS: 'x'"},
      {"TORCHELASTIC_USE_AGENT_STORE", "1",
       "TORCHELASTIC_USE_AGENT_STORE='1' is neither True nor False"},
      {"OMP_NUM_THREADS", "0", "OMP_NUM_THREADS: 0 is out of range"},
      {"ELASTRUN_ROUND", "r1", "ELASTRUN_ROUND: 'r1' is not a whole number"},
  };
  for (const Case& c : cases) {
    Vars vars = Torchrun();
    if (c.value == nullptr) {
      vars.erase(c.name);
    } else {
      vars[c.name] = c.value;
    }
    absl::StatusOr<WorkerEnv> env = WorkerEnv::FromLookup(LookupIn(vars));
    ASSERT_FALSE(env.ok()) << c.name << "=" << (c.value ? c.value : "(unset)");
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(env.status().message()),
                AllOf(HasSubstr(c.expected), HasSubstr("`elastrun run` or torchrun")))
        << c.name;
  }
}

TEST(WorkerEnvTest, TorchrunStrictnessRequiresEverythingTorchrunSets) {
  for (const char* name :
       {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE"}) {
    Vars vars = Torchrun();
    vars.erase(name);
    // (Without GROUP_WORLD_SIZE, the default of 1 is below GROUP_RANK=1.)
    if (std::string(name) != "GROUP_WORLD_SIZE") {
      EXPECT_TRUE(WorkerEnv::FromLookup(LookupIn(vars)).ok()) << name;
    }
    absl::StatusOr<WorkerEnv> env =
        WorkerEnv::FromLookup(LookupIn(vars), EnvStrictness::kTorchrun);
    ASSERT_FALSE(env.ok()) << name;
    EXPECT_THAT(std::string(env.status().message()),
                HasSubstr(std::string(name) + " is not set"));
  }
  // These two torchrun may leave unset.
  Vars vars = Torchrun();
  vars.erase("OMP_NUM_THREADS");
  vars.erase("TORCHELASTIC_ERROR_FILE");
  EXPECT_TRUE(WorkerEnv::FromLookup(LookupIn(vars), EnvStrictness::kTorchrun).ok());
}

TEST(WorkerEnvTest, FromEnvironmentReadsTheProcessEnvironment) {
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("MASTER_ADDR", "localhost", 1);
  ::setenv("MASTER_PORT", "4242", 1);
  absl::StatusOr<WorkerEnv> env = WorkerEnv::FromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 4242);
  ::unsetenv("RANK");
  EXPECT_FALSE(WorkerEnv::FromEnvironment().ok());
}

}  // namespace
}  // namespace elastrun::worker
