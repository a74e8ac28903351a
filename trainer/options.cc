#include "trainer/options.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "trainer/detect/hyp.h"

namespace elastrun::trainer {

using config::Node;
using config::Schema;
using config::Type;

const Schema& DataSchema() {
  static const Schema* schema = [] {
    auto* s = new Schema("data");
    s->Optional("root", Type::String(), "'/usr/share/datasets/fashion-mnist'",
                "Folder with the Fashion-MNIST IDX files (gzipped or plain).")
        .Optional("batch_size", Type::Int(), "64", "Per-worker batch.")
        .Optional("synthetic", Type::Bool(), "false",
                  "Random learnable tensors instead of files (tests, benchmarks).")
        .Optional("synthetic_train_size", Type::Int(), "60000", "Synthetic train samples.")
        .Optional("synthetic_test_size", Type::Int(), "10000", "Synthetic test samples.")
        .Optional("num_classes", Type::Int(), "10", "Classes.")
        .Optional("image_size", Type::Int(), "28", "Image height and width.")
        .Optional("num_workers", Type::Int(), "0",
                  "Loader threads (the detector; the classifier holds its data in memory).")
        .Optional("drop_last", Type::Bool(), "false",
                  "Cut (true) or pad (false) to equal shards.")
        .Optional("yaml", Type::String(), "''",
                  "The detector's dataset: a YOLOv5 data.yaml (path, train, val, nc, names).")
        .Optional("hyp", Type::String(), "''",
                  "The detector's YOLOv5 hyp.yaml ('': hyp.scratch-low's values); the "
                  "config's hyp: section overrides its keys.")
        .Optional("cache_mb", Type::Int(), "0",
                  "The detector's decoded images kept in memory, MiB per rank (YOLOv5's "
                  "--cache ram); 0: off. The same batches either way.")
        .Optional("prefetch", Type::Int(), "2",
                  "The detector's batches loaded ahead of training per rank (at least 1).");
    return s;
  }();
  return *schema;
}

namespace {

Schema DdpSchema() {
  Schema s("ddp");
  s.Optional("find_unused_parameters", Type::Bool(), "false",
             "Allow parameters the loss does not use in a step (walks the autograd graph "
             "every synced step).")
      .Optional("static_graph", Type::Bool(), "false",
                "The same parameters are used (or unused) in every step.")
      .Optional("broadcast_buffers", Type::Bool(), "true",
                "Broadcast rank 0's buffers (BatchNorm statistics) before every synced forward.")
      .Optional("bucket_cap_mb", Type::Double(), "25", "Gradient bucket size in MiB (> 0).")
      .Optional("gradient_as_bucket_view", Type::Bool(), "false",
                "Gradients as views into the allreduce buckets (no copy, less memory).");
  return s;
}

}  // namespace

const Schema& TrainSchema() {
  static const Schema* schema = [] {
    auto* s = new Schema("train");
    s->Optional("epochs", Type::Int(), "10", "Epochs.")
        .Optional("seed", Type::Int(), "0", "Seed of weights, sampler and dropout.")
        .Optional("output_dir", Type::String(), "'runs/default'",
                  "Run folder: metrics.csv, config.yaml, checkpoints.")
        .Optional("checkpoint_period", Type::Int(), "1",
                  "Checkpoint every N epochs (0: never; best.ckpt follows every best epoch "
                  "whatever this says).")
        .Optional("checkpoint_iters", Type::Int(), "0",
                  "Also checkpoint every N iterations within an epoch (0: off); taken at "
                  "the next optimizer step.")
        .Optional("snapshot_iters", Type::Int(), "0",
                  "Snapshot the state into the agent's memory every N optimizer steps "
                  "(0: every step, or fewer if a copy costs over 2% of a step; -1: off).")
        .Optional("log_period", Type::Int(), "50", "Progress line every N iterations.")
        .Optional("threads", Type::Int(), "1", "Intra-op threads per rank.")
        .Optional("device", Type::String(), "'auto'",
                  "auto (the LOCAL_RANK's GPU when CUDA is usable, else cpu), cpu, cuda "
                  "(the LOCAL_RANK's GPU) or cuda:N.")
        .Optional("amp", Type::Bool(), "false",
                  "Mixed precision: autocast to amp_dtype (float16 with dynamic loss "
                  "scaling, on CUDA only; bfloat16 also on a CPU).")
        .Optional("amp_dtype", Type::String(), "'float16'",
                  "float16 or bfloat16: the autocast type of train.amp.")
        .Optional("sync_bn", Type::Bool(), "false",
                  "SyncBatchNorm: BatchNorm statistics over every rank (the detector).")
        .Optional("ddp", Type::Struct(DdpSchema()),
                  "{find_unused_parameters: false, static_graph: false, broadcast_buffers: true, "
                  "bucket_cap_mb: 25, gradient_as_bucket_view: false}",
                  "DistributedDataParallel's arguments (PyTorch's defaults).")
        .Optional("run_name", Type::String(), "''",
                  "Run id in checkpoints (default: the launcher's); the same name resumes "
                  "across submissions.");
    return s;
  }();
  return *schema;
}

DataOptions DataOptionsFrom(const Node& n) {
  DataOptions o;
  o.root = n.Find("root")->ScalarText();
  o.batch_size = n.Find("batch_size")->as_int();
  o.synthetic = n.Find("synthetic")->as_bool();
  o.synthetic_train_size = n.Find("synthetic_train_size")->as_int();
  o.synthetic_test_size = n.Find("synthetic_test_size")->as_int();
  o.num_classes = n.Find("num_classes")->as_int();
  o.image_size = n.Find("image_size")->as_int();
  o.num_workers = n.Find("num_workers")->as_int();
  o.drop_last = n.Find("drop_last")->as_bool();
  o.yaml = n.Find("yaml")->ScalarText();
  o.hyp = n.Find("hyp")->ScalarText();
  o.cache_mb = n.Find("cache_mb")->as_int();
  o.prefetch = n.Find("prefetch")->as_int();
  return o;
}

TrainOptions TrainOptionsFrom(const Node& n) {
  TrainOptions o;
  o.epochs = n.Find("epochs")->as_int();
  o.seed = n.Find("seed")->as_int();
  o.output_dir = n.Find("output_dir")->ScalarText();
  o.checkpoint_period = n.Find("checkpoint_period")->as_int();
  o.checkpoint_iters = n.Find("checkpoint_iters")->as_int();
  o.snapshot_iters = n.Find("snapshot_iters")->as_int();
  o.log_period = n.Find("log_period")->as_int();
  o.threads = n.Find("threads")->as_int();
  o.device = n.Find("device")->ScalarText();
  o.amp = n.Find("amp")->as_bool();
  o.amp_dtype = n.Find("amp_dtype")->ScalarText();
  o.sync_bn = n.Find("sync_bn")->as_bool();
  const Node& ddp = *n.Find("ddp");
  o.ddp.find_unused_parameters = ddp.Find("find_unused_parameters")->as_bool();
  o.ddp.static_graph = ddp.Find("static_graph")->as_bool();
  o.ddp.broadcast_buffers = ddp.Find("broadcast_buffers")->as_bool();
  o.ddp.bucket_cap_mb = ddp.Find("bucket_cap_mb")->as_double();
  o.ddp.gradient_as_bucket_view = ddp.Find("gradient_as_bucket_view")->as_bool();
  o.run_name = n.Find("run_name")->ScalarText();
  return o;
}

absl::StatusOr<DeviceChoice> ParseDevice(const std::string& text) {
  DeviceChoice d;
  if (text == "auto") return d;
  if (text == "cpu") {
    d.kind = DeviceChoice::Kind::kCpu;
    return d;
  }
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "cuda")) {
    d.kind = DeviceChoice::Kind::kCuda;
    if (rest.empty()) return d;
    int index = -1;
    if (absl::ConsumePrefix(&rest, ":") && !rest.empty() &&
        rest.find_first_not_of("0123456789") == absl::string_view::npos &&
        absl::SimpleAtoi(rest, &index) && index <= 1024) {
      d.index = index;
      return d;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not auto, cpu, cuda or cuda:N"));
}

namespace {

constexpr char kIntro[] = R"(usage: elastrun-train --config FILE [key=value ...] [flags]

Trains a model with DDP, one process per rank. Run it under
`elastrun run --nproc-per-node N` (or torchrun); alone it trains on one
process. key=value words override the config (Hydra's grammar: a.b=1 sets,
+a.new=1 adds, ~a.b deletes). The model's _target_ picks what is trained:
MLP or CNN, a Fashion-MNIST classifier (configs/fashion_mnist_*.yaml);
YoloV5, a detector on a YOLOv5 dataset with YOLOv5's recipe
(configs/detect_fashion_yolov5n.yaml; data.yaml=FILE, hyp.KEY=VALUE).
)";

// `--resume` without a PATH, when an override follows it (ParseFlags).
constexpr char kResumeLatest[] = "--resume-latest-checkpoint";

// The flags of elastrun-train, bound to `f`.
std::unique_ptr<CLI::App> NewTrainApp(Flags* f) {
  std::unique_ptr<CLI::App> app = flags::NewApp("elastrun-train", kIntro);
  app->add_option("--config", f->config, "trainer config (YAML; _base_, ${...}, _target_)")
      ->type_name("FILE");
  app->add_flag("--print-config", f->print_config,
                "print the resolved config as YAML and exit")
      ->disable_flag_override();
  app->add_flag("--list-targets", f->list_targets,
                "print every registered _target_ with its arguments")
      ->disable_flag_override();
  app->add_option("--resume", "resume from PATH, or the newest checkpoint of the run")
      ->type_name("[PATH]")
      ->expected(0, 1);
  app->add_flag(kResumeLatest)->group("");  // see ParseFlags
  app->add_option("overrides", f->overrides)->group("");
  return app;
}

}  // namespace

std::string Usage() {
  Flags f;
  return NewTrainApp(&f)->help();
}

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  // `--resume x=1`: x=1 is an override, not the PATH; CLI11 would take it
  // as the PATH, so that --resume is passed as the hidden flag below.
  std::vector<std::string> words = args;
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "--resume" && words[i + 1].find('=') != std::string::npos) {
      words[i] = kResumeLatest;
    }
  }
  Flags f;
  std::unique_ptr<CLI::App> app = NewTrainApp(&f);
  const flags::Outcome parsed = flags::TryParse(*app, words);
  switch (parsed.kind) {
    case flags::Outcome::kHelp:
      f.help = true;
      return f;
    case flags::Outcome::kVersion:
      f.version = true;
      return f;
    case flags::Outcome::kError:
      return absl::InvalidArgumentError(parsed.message);
    case flags::Outcome::kOk:
      break;
  }
  if (const CLI::Option* resume = app->get_option("--resume"); resume->count() > 0) {
    f.resume = resume->results().empty() ? "" : resume->results().back();
  }
  if (app->get_option(kResumeLatest)->count() > 0) f.resume = "";
  if (f.config.empty() && !f.list_targets) {
    return absl::InvalidArgumentError("--config FILE is required");
  }
  return f;
}

absl::StatusOr<TrainerConfig> LoadTrainerConfig(const std::string& path,
                                                const std::vector<std::string>& overrides) {
  TrainerConfig out;
  ASSIGN_OR_RETURN(out.resolved, config::LoadConfig(path, overrides));
  const Node& root = out.resolved;
  for (const char* section : {"model", "optimizer", "scheduler", "data", "train"}) {
    if (root.Find(section) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": missing top-level section '", section,
          "' (a trainer config has model, optimizer, scheduler, data, train)"));
    }
  }
  // Every top-level key is a section the trainer reads: a misspelt one, or
  // YOLOv5's hyperparameters given to a model that has none, is an error
  // rather than silently ignored.
  for (const config::MapEntry& e : root.entries()) {
    if (e.key == "model" || e.key == "optimizer" || e.key == "scheduler" || e.key == "data" ||
        e.key == "train" || e.key == "hyp") {
      continue;
    }
    return config::ErrorAt(e.value.mark(), e.key,
                           "not a section of a trainer config (model, optimizer, scheduler, "
                           "data, train, and hyp for the detector)");
  }
  ASSIGN_OR_RETURN(Node data, DataSchema().Apply(*root.Find("data"), "data"));
  ASSIGN_OR_RETURN(Node train, TrainSchema().Apply(*root.Find("train"), "train"));
  out.data = DataOptionsFrom(data);
  out.train = TrainOptionsFrom(train);
  if (out.data.batch_size <= 0) {
    return config::ErrorAt(data.Find("batch_size")->mark(), "data.batch_size",
                           "must be positive");
  }
  if (out.train.epochs <= 0) {
    return config::ErrorAt(train.Find("epochs")->mark(), "train.epochs",
                           "must be positive");
  }
  if (!(out.train.ddp.bucket_cap_mb > 0)) {
    return config::ErrorAt(train.Find("ddp")->Find("bucket_cap_mb")->mark(),
                           "train.ddp.bucket_cap_mb", "must be positive (MiB)");
  }
  if (absl::Status d = ParseDevice(out.train.device).status(); !d.ok()) {
    return config::ErrorAt(train.Find("device")->mark(), "train.device", d.message());
  }
  if (out.train.amp_dtype != "float16" && out.train.amp_dtype != "bfloat16") {
    return config::ErrorAt(train.Find("amp_dtype")->mark(), "train.amp_dtype",
                           absl::StrCat("'", out.train.amp_dtype,
                                        "' is not float16 or bfloat16"));
  }
  for (const char* section : {"model", "optimizer", "scheduler"}) {
    absl::StatusOr<config::Object> object = config::InstantiateAt(root, section);
    if (!object.ok()) return object.status();
  }
  // The detector's hyperparameters (data.hyp and the hyp section) are
  // checked here, so that --print-config refuses what training would.
  const Node* target = root.Find("model")->Find("_target_");
  const bool detector = target != nullptr && target->kind() == Node::Kind::kString &&
                        target->as_string() == "YoloV5";
  if (const Node* hyp = root.Find("hyp"); hyp != nullptr && !detector) {
    return config::ErrorAt(hyp->mark(), "hyp",
                           "only the detector (model._target_: YoloV5) takes YOLOv5's "
                           "hyperparameters");
  }
  if (detector) {
    absl::StatusOr<detect::Hyp> hyp = detect::LoadHyp(out.data.hyp, root.Find("hyp"));
    if (!hyp.ok()) return hyp.status();
  }
  return out;
}

}  // namespace elastrun::trainer
