// Every file under configs/ must load, so a broken config fails CI; the
// trainer configs must also survive the YAML round trip.
#include <filesystem>

#include "common/config/config.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(ConfigsTest, EveryConfigLoadsAndRoundTrips) {
  int count = 0;
  for (const auto& entry : fs::recursive_directory_iterator(ELASTRUN_CONFIGS_DIR)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    // Fragments under base/ may refer to keys their includers define
    // (${data.batch_size}), so they are checked without interpolation.
    const bool fragment = entry.path().parent_path().filename() == "base";
    absl::StatusOr<Node> n = fragment ? LoadFile(entry.path().string())
                                      : LoadConfig(entry.path().string());
    ASSERT_TRUE(n.ok()) << n.status();
    absl::StatusOr<Node> back = ParseYaml(ToYaml(*n), "emitted.yaml");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, *n) << ToYaml(*n);
    ++count;
  }
  EXPECT_GE(count, 5);
}

TEST(ConfigsTest, TrainerConfigsHaveTheExpectedSections) {
  for (const char* name : {"fashion_mnist_mlp.yaml", "fashion_mnist_cnn.yaml"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Node> n = LoadConfig(fs::path(ELASTRUN_CONFIGS_DIR) / name);
    ASSERT_TRUE(n.ok()) << n.status();
    for (const char* section : {"model", "optimizer", "scheduler", "data", "train"}) {
      EXPECT_NE(n->Find(section), nullptr) << section;
    }
    for (const char* key : {"lr0", "momentum", "weight_decay", "nbs"}) {
      EXPECT_NE(n->Find("optimizer")->Find(key), nullptr) << key;
    }
    for (const char* key : {"lrf", "one_cycle", "warmup_epochs", "warmup_momentum",
                            "warmup_bias_lr"}) {
      EXPECT_NE(n->Find("scheduler")->Find(key), nullptr) << key;
    }
    // Interpolations are resolved and follow overrides.
    EXPECT_EQ(n->Find("model")->Find("num_classes")->as_int(), 10);
  }
  absl::StatusOr<Node> cnn = LoadConfig(
      fs::path(ELASTRUN_CONFIGS_DIR) / "fashion_mnist_cnn.yaml", {"data.batch_size=32"});
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  EXPECT_EQ(cnn->Find("optimizer")->Find("batch_size")->as_int(), 32);
  EXPECT_EQ(cnn->Find("train")->Find("epochs")->as_int(), 15);
  EXPECT_EQ(cnn->Find("scheduler")->Find("epochs")->as_int(), 15);
}

TEST(ConfigsTest, JobSpecValidatesAgainstAJobSchema) {
  const Schema job = Schema("JobSpec")
                         .Required("name", Type::String(), "Job name.")
                         .Required("nnodes", Type::String(), "N or MIN:MAX.")
                         .Optional("nproc_per_node", Type::Int(), "1", "Workers per node.")
                         .Optional("max_restarts", Type::Int(), "3", "Restarts.")
                         .Required("command", Type::List(Type::String()), "Command.");
  absl::StatusOr<Node> n =
      LoadConfig(fs::path(ELASTRUN_CONFIGS_DIR) / "jobs" / "fashion_mnist_mlp.yaml");
  ASSERT_TRUE(n.ok()) << n.status();
  absl::StatusOr<Node> checked = job.Apply(*n, "");
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->Find("nnodes")->as_string(), "1:4");
}

TEST(ConfigsTest, OverrideErrorOnRealConfigSuggestsKey) {
  absl::StatusOr<Node> n = LoadConfig(
      fs::path(ELASTRUN_CONFIGS_DIR) / "fashion_mnist_mlp.yaml", {"optimizer.lr=0.1"});
  EXPECT_THAT(testing::ErrorOf(n), HasSubstr("did you mean: optimizer.lr0?"));
}

}  // namespace
}  // namespace elastrun::config
