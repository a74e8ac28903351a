// The detector end to end (elastrun-train with `_target_: YoloV5`), as a
// user runs it: a tiny dataset made by elastrun-detect-data, two ranks under
// `elastrun run`, and what the user then checks: the weights and
// results.csv of a run whose rank was killed mid-epoch against an
// uninterrupted one, the files of a run folder (parsed as a user parses
// them), SyncBN on two ranks, and bad inputs answered with clear errors.
//
// Kept small for 2 CI cores: 48 train and 16 val 64x64 images, batch 4 per
// rank, 2 epochs (a run takes a few seconds). One object of 48-64 px per
// image: boxes that an untrained detector's boxes already overlap, so that
// two epochs give true positives, non-zero mAP and a per-class table (YOLOv5
// prints class rows only when some prediction is right). Skipped when
// elastrun-train is not built (ELASTRUN_WITH_TORCH=OFF).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// Generous: a run takes seconds on 2 cores.
constexpr absl::Duration kRunDeadline = absl::Minutes(3);
constexpr int kTrainImages = 48, kValImages = 16;
// 48 images in batches of 4 on 2 ranks: 6 iterations an epoch, so global
// iteration 8 is the third batch of epoch 2.
constexpr int kItersPerEpoch = 6;
constexpr int kKillAt = 8;
// elastrun-detect-data's classes (Fashion-MNIST's), by index.
const std::vector<std::string>& ClassNames() {
  static const auto* names = new std::vector<std::string>{
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return *names;
}

// YOLOv5's results.csv columns (train.py), in its order.
constexpr char kYoloV5Header[] =
    "epoch,train/box_loss,train/obj_loss,train/cls_loss,metrics/precision,metrics/recall,"
    "metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,val/obj_loss,val/cls_loss,x/lr0,"
    "x/lr1,x/lr2";

// results.csv as column name -> the rows' values (as written).
struct Csv {
  std::string header;
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> rows;
  std::string Column(const std::string& name, size_t row) const {
    for (size_t c = 0; c < names.size(); ++c) {
      if (names[c] == name && row < rows.size() && c < rows[row].size()) return rows[row][c];
    }
    return "<none>";
  }
};
Csv ParseCsv(const std::string& text) {
  Csv csv;
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty()) return csv;
  csv.header = lines[0];
  csv.names = absl::StrSplit(lines[0], ',');
  for (size_t i = 1; i < lines.size(); ++i) csv.rows.push_back(absl::StrSplit(lines[i], ','));
  return csv;
}

// The hash of the last "final: ... params_sha256=HEX" line, or "".
std::string FinalParams(const std::string& log) {
  static const std::regex* re = new std::regex("final: [^\\n]*params_sha256=([0-9a-f]+)");
  std::string last;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), *re);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1];
  }
  return last;
}

// Lines of `log` with rank 0's "[rank0]:" prefix taken off.
std::vector<std::string> Rank0Lines(const std::string& log) {
  std::vector<std::string> out;
  for (absl::string_view l : absl::StrSplit(log, '\n')) {
    if (absl::ConsumePrefix(&l, "[rank0]:")) out.emplace_back(l);
  }
  return out;
}

// Where the run was not a crash: an exit code of its own (not a signal's
// 128+N) of 1 or 2, and no C++ runtime abort.
void ExpectCleanFailure(const testing::RunResult& r) {
  EXPECT_THAT(r.exit_code, AnyOf(1, 2)) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("terminate called"))) << r.output;
}

class DetectE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    train_ = testing::BinDir() + "/elastrun-train";
    data_tool_ = testing::BinDir() + "/elastrun-detect-data";
    if (!testing::FileExists(train_) || !testing::FileExists(data_tool_)) {
      GTEST_SKIP() << train_ << " or " << data_tool_
                   << " is not built (configure with ELASTRUN_WITH_TORCH=ON); the detector's "
                      "end-to-end tests are skipped";
    }
    dir_ = testing::MakeTempDir("detect_e2e");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=detect-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                           "-", getpid(), "-", dir_);
    // The detector's config as shipped (hyp.scratch-low's augmentation).
    config_ = testing::SourceDir() + "/configs/detect_fashion_yolov5n.yaml";
  }
  void TearDown() override {
    // Whatever a failed assertion left running (testing::Run reaps its own).
    if (!marker_.empty()) {
      for (pid_t pid : testing::ProcessesWithEnv(marker_)) kill(pid, SIGKILL);
    }
    // Checkpoints take megabytes: keep the folder only to look into a failure.
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  // The tiny dataset in dir_/`name`; returns its data.yaml.
  std::string MakeDataset(const std::string& name) {
    const std::string out = dir_ + "/" + name;
    auto r = testing::Run({data_tool_, out, "--train", std::to_string(kTrainImages), "--val",
                           std::to_string(kValImages), "--size", "64", "--objects", "1:1",
                           "--object-size", "48:64", "--threads", "1"},
                          {marker_}, kRunDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << r->output;
    return out + "/data.yaml";
  }

  // The training command's arguments after the binary: the detector's
  // config made small, writing to `output_dir`.
  std::vector<std::string> TrainArgs(const std::string& data_yaml,
                                     const std::string& output_dir,
                                     const std::vector<std::string>& overrides = {},
                                     const std::string& config = "") {
    std::vector<std::string> args = {"--config",
                                     config.empty() ? config_ : config,
                                     "data.yaml=" + data_yaml,
                                     "data.image_size=64",
                                     "data.batch_size=4",
                                     "data.num_workers=1",
                                     "train.epochs=2",
                                     "train.log_period=0",
                                     "train.output_dir=" + output_dir};
    args.insert(args.end(), overrides.begin(), overrides.end());
    return args;
  }

  // Two ranks of elastrun-train under `elastrun run` (one restart allowed).
  testing::RunResult RunTwoRanks(const std::string& data_yaml, const std::string& output_dir,
                                 const std::vector<std::string>& overrides = {},
                                 const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {testing::BinDir() + "/elastrun", "run",
                                     "--nproc-per-node", "2", "--max-restarts", "1", train_};
    for (std::string& a : TrainArgs(data_yaml, output_dir, overrides)) argv.push_back(a);
    std::vector<std::string> full_env = {marker_, "OMP_NUM_THREADS=1"};
    full_env.insert(full_env.end(), env.begin(), env.end());
    auto r = testing::Run(argv, full_env, kRunDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  // elastrun-train alone: one process, no launcher.
  testing::RunResult RunAlone(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {train_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = testing::Run(argv, {marker_, "OMP_NUM_THREADS=1"}, kRunDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  std::string train_, data_tool_, dir_, marker_, config_;
};

// A copy of the dataset folder `from` at `to`, its data.yaml's `path:`
// pointing at the copy.
void CopyDataset(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  std::string yaml = testing::ReadFile(to + "/data.yaml");
  std::vector<std::string> lines = absl::StrSplit(yaml, '\n');
  for (std::string& l : lines) {
    if (absl::StartsWith(l, "path:")) l = "path: '" + to + "'";
  }
  std::ofstream(to + "/data.yaml", std::ios::trunc) << absl::StrJoin(lines, "\n");
}

// The classes of the labels in a YOLO labels folder.
std::set<int> LabelClasses(const std::string& labels_dir) {
  std::set<int> classes;
  for (const std::string& f : testing::ListFiles(labels_dir)) {
    for (absl::string_view line :
         absl::StrSplit(testing::ReadFile(labels_dir + "/" + f), '\n', absl::SkipEmpty())) {
      int c = -1;
      if (absl::SimpleAtoi(line.substr(0, line.find(' ')), &c)) classes.insert(c);
    }
  }
  return classes;
}

// A user kills a rank in the middle of epoch 2; the launcher restarts the
// group, every rank resumes from its snapshot in memory, and the run ends
// as if nothing had happened: the same weights and EMA (params_sha256), and
// the same results.csv metrics as an uninterrupted run.
TEST_F(DetectE2eTest, KillMidEpochResumesBitwise) {
  const std::string data = MakeDataset("data");
  ASSERT_FALSE(data.empty());
  const testing::RunResult clean = RunTwoRanks(data, dir_ + "/clean");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  const testing::RunResult killed =
      RunTwoRanks(data, dir_ + "/killed", {},
                  {absl::StrCat("ELASTRUN_TRAIN_FAIL_AT=1:", kKillAt)});
  ASSERT_EQ(killed.exit_code, 0) << killed.output;

  // The kill happened, inside epoch 2, and the group resumed from memory.
  static_assert(kKillAt > kItersPerEpoch && kKillAt < 2 * kItersPerEpoch - 1);
  EXPECT_THAT(killed.output,
              HasSubstr(absl::StrCat("rank 1: injected SIGKILL at iteration ", kKillAt)));
  EXPECT_THAT(killed.output, HasSubstr("restarting (1 of 1)")) << killed.output;
  EXPECT_THAT(killed.output,
              ContainsRegex("resumed at epoch 2, iteration [0-9]+ from the snapshot in memory"))
      << killed.output;
  EXPECT_THAT(clean.output, Not(HasSubstr("resumed"))) << clean.output;

  const std::string params = FinalParams(clean.output);
  ASSERT_FALSE(params.empty()) << clean.output;
  EXPECT_EQ(FinalParams(killed.output), params) << killed.output;

  const Csv a = ParseCsv(testing::ReadFile(dir_ + "/clean/results.csv"));
  const Csv b = ParseCsv(testing::ReadFile(dir_ + "/killed/results.csv"));
  EXPECT_TRUE(absl::StartsWith(a.header, kYoloV5Header)) << a.header;
  EXPECT_EQ(b.header, a.header);
  ASSERT_EQ(a.rows.size(), 2u) << testing::ReadFile(dir_ + "/clean/results.csv");
  ASSERT_EQ(b.rows.size(), 2u) << testing::ReadFile(dir_ + "/killed/results.csv");
  for (size_t row = 0; row < 2; ++row) {
    EXPECT_EQ(b.Column("epoch", row), std::to_string(row + 1));
    for (const char* column : {"metrics/precision", "metrics/recall", "metrics/mAP_0.5",
                               "metrics/mAP_0.5:0.95", "val/box_loss", "val/obj_loss",
                               "val/cls_loss", "x/lr0", "x/lr1", "x/lr2"}) {
      EXPECT_EQ(b.Column(column, row), a.Column(column, row))
          << column << " of epoch " << row + 1 << " differs from the uninterrupted run's";
    }
    // The epoch's mean training losses: the killed epoch's batches before
    // the kill count too.
    for (const char* column : {"train/box_loss", "train/obj_loss", "train/cls_loss"}) {
      EXPECT_EQ(b.Column(column, row), a.Column(column, row))
          << column << " of epoch " << row + 1 << " differs from the uninterrupted run's";
    }
  }
  // Non-zero: the comparison above is of real numbers.
  double map50 = 0;
  EXPECT_TRUE(absl::SimpleAtod(a.Column("metrics/mAP_0.5", 1), &map50));
  EXPECT_GT(map50, 0) << testing::ReadFile(dir_ + "/clean/results.csv");
}

// The files and lines a YOLOv5 user looks for after a run.
TEST_F(DetectE2eTest, OutputsAUserExpects) {
  const std::string data = MakeDataset("data");
  ASSERT_FALSE(data.empty());
  const std::string run = dir_ + "/run";
  const testing::RunResult r = RunTwoRanks(data, run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = Rank0Lines(r.output);

  // AutoAnchor at the start, before the first epoch.
  size_t autoanchor = lines.size(), first_epoch = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (autoanchor == lines.size() && absl::StartsWith(lines[i], "AutoAnchor:")) autoanchor = i;
    if (first_epoch == lines.size() && absl::StartsWith(lines[i], "epoch 1/2:")) first_epoch = i;
  }
  ASSERT_LT(autoanchor, lines.size()) << "no AutoAnchor line\n" << r.output;
  EXPECT_LT(autoanchor, first_epoch) << r.output;
  EXPECT_THAT(lines[autoanchor], HasSubstr("Best Possible Recall (BPR)"));

  // results.csv: YOLOv5's columns, a row per epoch.
  const Csv csv = ParseCsv(testing::ReadFile(run + "/results.csv"));
  EXPECT_TRUE(absl::StartsWith(csv.header, kYoloV5Header)) << csv.header;
  ASSERT_EQ(csv.rows.size(), 2u);
  for (const auto& row : csv.rows) EXPECT_EQ(row.size(), csv.names.size());

  // The plots: whole SVG documents.
  for (const char* svg : {"results.svg", "labels.svg", "PR_curve.svg"}) {
    const std::string text = testing::ReadFile(run + "/" + svg);
    EXPECT_THAT(text, HasSubstr("<svg")) << svg;
    EXPECT_THAT(std::string(absl::StripTrailingAsciiWhitespace(text)),
                ::testing::EndsWith("</svg>"))
        << svg;
  }

  // hyp.yaml: YOLOv5's keys, this run's values.
  const std::string hyp = testing::ReadFile(run + "/hyp.yaml");
  for (const char* key :
       {"lr0:", "lrf:", "momentum:", "weight_decay:", "warmup_epochs:", "warmup_momentum:",
        "warmup_bias_lr:", "box:", "cls:", "cls_pw:", "obj:", "obj_pw:", "iou_t:",
        "anchor_t:", "fl_gamma:", "hsv_h:", "hsv_s:", "hsv_v:", "degrees:", "translate:",
        "scale:", "shear:", "perspective:", "flipud:", "fliplr:", "mosaic:", "mixup:",
        "copy_paste:"}) {
    EXPECT_THAT(hyp, ContainsRegex(absl::StrCat("(^|\n)", key, " "))) << key << "\n" << hyp;
  }
  // The config's hyp: section wins over hyp.scratch-low's value.
  EXPECT_THAT(hyp, ContainsRegex("(^|\n)warmup_epochs: 1\\.0 ")) << hyp;

  // The per-class table, printed at the end and in per_class.txt: the
  // header, "all", then one row per class with labels in the val split.
  const std::string table = testing::ReadFile(run + "/per_class.txt");
  std::vector<std::string> rows = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_GE(rows.size(), 2u) << table;
  EXPECT_THAT(rows[0], ContainsRegex("Class +Images +Instances +P +R +mAP50 +mAP50-95"));
  EXPECT_THAT(rows[1], ContainsRegex(absl::StrCat("^ *all +", kValImages, " +")));
  std::vector<std::string> class_rows;
  for (size_t i = 2; i < rows.size(); ++i) {
    class_rows.emplace_back(absl::StripLeadingAsciiWhitespace(rows[i]));
  }
  std::vector<std::string> expected;
  for (int c : LabelClasses(dir_ + "/data/labels/val")) expected.push_back(ClassNames()[c]);
  ASSERT_EQ(class_rows.size(), expected.size()) << table;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(absl::StartsWith(class_rows[i], expected[i] + " ")) << expected[i] << "\n"
                                                                    << table;
  }
  for (const std::string& row : rows) {
    EXPECT_NE(std::find(lines.begin(), lines.end(), row), lines.end())
        << "not printed: " << row << "\n"
        << r.output;
  }

  // COCO JSON, read with python3's json module as a user's script would.
  const std::string python = "/usr/bin/python3";
  if (testing::FileExists(python)) {
    const std::string script = dir_ + "/check_coco.py";
    std::ofstream(script) << R"(import json, sys
inst = json.load(open(sys.argv[1]))
preds = json.load(open(sys.argv[2]))
n_images, n_labels = int(sys.argv[3]), int(sys.argv[4])
for key in ("images", "annotations", "categories"):
    assert isinstance(inst.get(key), list), "instances: no list " + key
images = {im["id"]: im for im in inst["images"]}
assert len(images) == len(inst["images"]) == n_images, len(inst["images"])
for im in inst["images"]:
    assert isinstance(im["file_name"], str) and im["width"] > 0 and im["height"] > 0, im
cats = {c["id"]: c["name"] for c in inst["categories"]}
assert len(cats) == 10, cats
assert len(inst["annotations"]) == n_labels, len(inst["annotations"])
for a in inst["annotations"]:
    assert a["image_id"] in images and a["category_id"] in cats, a
    x, y, w, h = a["bbox"]
    im = images[a["image_id"]]
    assert w > 0 and h > 0 and x >= 0 and y >= 0, a
    assert x + w <= im["width"] + 1e-6 and y + h <= im["height"] + 1e-6, a
assert isinstance(preds, list) and preds, "no predictions"
for p in preds:
    assert p["image_id"] in images, ("prediction of an image not in the instances", p)
    assert p["category_id"] in cats, p
    assert len(p["bbox"]) == 4 and p["bbox"][2] >= 0 and p["bbox"][3] >= 0, p
    assert 0 < p["score"] <= 1, p
seen = {p["image_id"] for p in preds}
# Both ranks' shares of the val split.
assert len(seen) > n_images // 2, sorted(seen)
print("coco ok", len(inst["annotations"]), len(preds))
)";
    int val_labels = 0;
    for (const std::string& f : testing::ListFiles(dir_ + "/data/labels/val")) {
      for (absl::string_view l : absl::StrSplit(
               testing::ReadFile(dir_ + "/data/labels/val/" + f), '\n', absl::SkipEmpty())) {
        val_labels += !absl::StripAsciiWhitespace(l).empty();
      }
    }
    auto check = testing::Run({python, script, run + "/val_instances.json",
                               run + "/predictions.json", std::to_string(kValImages),
                               std::to_string(val_labels)},
                              {}, kRunDeadline);
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_EQ(check->exit_code, 0) << check->output;
    EXPECT_THAT(check->output, HasSubstr("coco ok"));
  } else {
    ADD_FAILURE() << python << " is missing: the COCO JSON files were not parsed";
  }

  // Checkpoints: last and best, beside the numbered ones.
  const std::vector<std::string> ckpts = testing::ListFiles(run + "/checkpoints");
  EXPECT_THAT(ckpts, ::testing::IsSupersetOf({"last.ckpt", "best.ckpt"}))
      << absl::StrJoin(ckpts, " ");
  EXPECT_THAT(ckpts, ::testing::Contains(::testing::StartsWith("ckpt_")))
      << absl::StrJoin(ckpts, " ");
}

// train.sync_bn on two ranks: the BatchNorm layers reduce over both, and
// the run finishes.
// SyncBN under bfloat16 autocast (train.amp on a CPU): the statistics in
// the weights' float32, as torch.nn.SyncBatchNorm computes them.
TEST_F(DetectE2eTest, SyncBnTrainsOnTwoRanks) {
  const std::string data = MakeDataset("data");
  ASSERT_FALSE(data.empty());
  const testing::RunResult r =
      RunTwoRanks(data, dir_ + "/run",
                  {"train.sync_bn=true", "+train.amp=true", "+train.amp_dtype=bfloat16"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ContainsRegex("SyncBatchNorm: [1-9][0-9]* BatchNorm layers reduce "
                                      "over 2 ranks"))
      << r.output;
  EXPECT_THAT(r.output, HasSubstr("amp: autocast bfloat16")) << r.output;
  EXPECT_THAT(r.output, HasSubstr("final: epoch=2")) << r.output;
}

// A fresh run (another run name) in a folder that holds an earlier run's
// record keeps that record under numbered names, as YOLOv5 keeps runs, and
// writes its own from the start: hyp.yaml and labels.svg are the new run's.
TEST_F(DetectE2eTest, FreshRunKeepsTheEarlierRunsRecord) {
  const std::string data = MakeDataset("data");
  ASSERT_FALSE(data.empty());
  const std::string out = dir_ + "/shared_run";
  for (const char* name : {"+train.run_name=first", "+train.run_name=second"}) {
    const testing::RunResult r = RunAlone(TrainArgs(data, out, {"train.epochs=1", name}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  for (const char* file : {"results.1.csv", "hyp.1.yaml", "labels.1.svg", "per_class.1.txt",
                           "predictions.1.json", "results.csv", "hyp.yaml", "labels.svg",
                           "per_class.txt", "predictions.json"}) {
    EXPECT_TRUE(fs::exists(out + "/" + file)) << file;
  }
}

// Bad inputs, one process each: a corrupt image is left out and named, a
// box beyond its image clipped and counted; what cannot train is an error
// naming the file, line, key or folder. Never a crash.
// The detector's hyp is checked when the config loads, so that
// --print-config (which `elastrun evolve` runs before training anything)
// refuses what training would.
TEST_F(DetectE2eTest, PrintConfigChecksTheHyp) {
  auto print = [&](const std::string& override_) {
    return RunAlone({"--config", config_, override_, "--print-config"});
  };
  testing::RunResult ok = print("++hyp.anchor_t=4.5");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("anchor_t: 4.5")) << ok.output;
  for (const auto& [override_, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"++hyp.nonsense=1", "unknown key 'nonsense' for hyp"},
           {"++hyp.copy_paste=0.5", "copy_paste needs segment labels"},
           {"++hyp.anchors=5", "anchors per output layer must be 3"}}) {
    testing::RunResult r = print(override_);
    EXPECT_EQ(r.exit_code, 2) << override_ << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << r.output;
  }
}

TEST_F(DetectE2eTest, BadInputIsAClearError) {
  const std::string base = MakeDataset("data");
  ASSERT_FALSE(base.empty());
  const std::string base_dir = dir_ + "/data";

  {
    SCOPED_TRACE("a corrupt JPEG and a box reaching beyond its image");
    const std::string d = dir_ + "/damaged";
    CopyDataset(base_dir, d);
    const std::string corrupt = d + "/images/train/000003.jpg";
    std::ofstream(corrupt, std::ios::trunc) << "this is not a JPEG, only garbage bytes\n";
    std::ofstream(d + "/labels/train/000000.txt", std::ios::app) << "1 0.95 0.5 0.3 0.2\n";
    const testing::RunResult r =
        RunAlone(TrainArgs(d + "/data.yaml", dir_ + "/damaged_run", {"train.epochs=1"}));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("ignoring corrupt image/label: " + corrupt)) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("train: ", kTrainImages - 1, " images")))
        << r.output;
    EXPECT_THAT(r.output, HasSubstr("1 corrupt (left out)")) << r.output;
    EXPECT_THAT(r.output, HasSubstr("1 boxes clipped to their image")) << r.output;
    EXPECT_THAT(r.output, HasSubstr(d + "/labels/train/000000.txt:2: 1 box(es) reaching "
                                        "beyond the image clipped"))
        << r.output;
    EXPECT_THAT(r.output, HasSubstr("final: epoch=1")) << r.output;
    EXPECT_THAT(r.output, Not(HasSubstr("terminate called"))) << r.output;
  }
  {
    SCOPED_TRACE("a label of class >= nc");
    const std::string d = dir_ + "/bad_class";
    CopyDataset(base_dir, d);
    std::ofstream(d + "/labels/train/000005.txt", std::ios::app) << "12 0.5 0.5 0.2 0.2\n";
    const testing::RunResult r = RunAlone(TrainArgs(d + "/data.yaml", dir_ + "/bad_class_run"));
    ExpectCleanFailure(r);
    EXPECT_THAT(r.output, HasSubstr(d + "/labels/train/000005.txt:2: class 12"));
    EXPECT_THAT(r.output, HasSubstr("nc=10")) << r.output;
  }
  {
    SCOPED_TRACE("an empty labels folder");
    const std::string d = dir_ + "/no_labels";
    CopyDataset(base_dir, d);
    for (const std::string& f : testing::ListFiles(d + "/labels/train")) {
      fs::remove(d + "/labels/train/" + f);
    }
    const testing::RunResult r = RunAlone(TrainArgs(d + "/data.yaml", dir_ + "/no_labels_run"));
    ExpectCleanFailure(r);
    EXPECT_THAT(r.output, HasSubstr("no label file for any of")) << r.output;
    EXPECT_THAT(r.output, HasSubstr(d + "/labels/train is empty")) << r.output;
  }
  {
    SCOPED_TRACE("data.yaml's val: names a missing folder");
    const std::string d = dir_ + "/no_val";
    CopyDataset(base_dir, d);
    std::string yaml = testing::ReadFile(d + "/data.yaml");
    const size_t at = yaml.find("\nval: images/val");
    ASSERT_NE(at, std::string::npos) << yaml;
    yaml.replace(at, std::string("\nval: images/val").size(), "\nval: images/missing");
    std::ofstream(d + "/data.yaml", std::ios::trunc) << yaml;
    const testing::RunResult r = RunAlone(TrainArgs(d + "/data.yaml", dir_ + "/no_val_run"));
    ExpectCleanFailure(r);
    EXPECT_THAT(r.output, HasSubstr(d + "/data.yaml")) << r.output;
    EXPECT_THAT(r.output, HasSubstr("val: 'images/missing'")) << r.output;
    EXPECT_THAT(r.output, HasSubstr("does not exist")) << r.output;
  }
  {
    SCOPED_TRACE("copy_paste in the config's hyp");
    const std::string config = dir_ + "/copy_paste.yaml";
    std::ofstream(config) << "_base_: " << config_ << "\nhyp:\n  copy_paste: 0.5\n";
    const testing::RunResult r = RunAlone(TrainArgs(base, dir_ + "/copy_paste_run", {}, config));
    ExpectCleanFailure(r);
    EXPECT_THAT(r.output, HasSubstr(config)) << r.output;
    EXPECT_THAT(r.output, HasSubstr("hyp.copy_paste")) << r.output;
  }
}

}  // namespace
}  // namespace elastrun
