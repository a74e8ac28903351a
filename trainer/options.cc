#include "trainer/options.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/status_macros.h"

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
                  "Accepted for compatibility; data are held in memory.")
        .Optional("drop_last", Type::Bool(), "false",
                  "Cut (true) or pad (false) to equal shards.");
    return s;
  }();
  return *schema;
}

const Schema& TrainSchema() {
  static const Schema* schema = [] {
    auto* s = new Schema("train");
    s->Optional("epochs", Type::Int(), "10", "Epochs.")
        .Optional("seed", Type::Int(), "0", "Seed of weights, sampler and dropout.")
        .Optional("output_dir", Type::String(), "'runs/default'",
                  "Run folder: metrics.csv, config.yaml, checkpoints.")
        .Optional("checkpoint_period", Type::Int(), "1",
                  "Checkpoint every N epochs (0: never).")
        .Optional("checkpoint_iters", Type::Int(), "0",
                  "Also checkpoint every N iterations within an epoch (0: off).")
        .Optional("log_period", Type::Int(), "50", "Progress line every N iterations.")
        .Optional("threads", Type::Int(), "1", "Intra-op threads per rank.")
        .Optional("amp", Type::Bool(), "false",
                  "Mixed precision; CPU build: fp32 with dynamic loss scaling, no autocast.");
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
  return o;
}

TrainOptions TrainOptionsFrom(const Node& n) {
  TrainOptions o;
  o.epochs = n.Find("epochs")->as_int();
  o.seed = n.Find("seed")->as_int();
  o.output_dir = n.Find("output_dir")->ScalarText();
  o.checkpoint_period = n.Find("checkpoint_period")->as_int();
  o.checkpoint_iters = n.Find("checkpoint_iters")->as_int();
  o.log_period = n.Find("log_period")->as_int();
  o.threads = n.Find("threads")->as_int();
  o.amp = n.Find("amp")->as_bool();
  return o;
}

const char kUsage[] =
    "usage: elastrun-train --config FILE [key=value ...] [flags]\n"
    "  --config FILE     trainer config (YAML; _base_, ${...}, _target_)\n"
    "  key=value         override (Hydra grammar: a.b=1, +a.new=1, ~a.b)\n"
    "  --print-config    print the resolved config as YAML and exit\n"
    "  --list-targets    print every registered _target_ with its arguments\n"
    "  --resume [PATH]   resume from PATH, or the newest checkpoint of the run\n"
    "  --help            this text\n"
    "Run it under `elastrun run --nproc-per-node N` (or torchrun) for DDP;\n"
    "alone it trains on one process.\n";

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    if (name.empty()) return absl::InvalidArgumentError("empty argument");
    if (!absl::StartsWith(name, "--") && name != "-h") {
      flags.overrides.push_back(name);  // key=value, +key=value, ~key
      continue;
    }
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    auto no_value = [&]() -> absl::Status {
      if (value) return absl::InvalidArgumentError(name + " takes no value");
      return absl::OkStatus();
    };
    if (name == "--config") {
      if (!value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config needs a file");
        value = args[++i];
      }
      flags.config = *value;
    } else if (name == "--print-config") {
      RETURN_IF_ERROR(no_value());
      flags.print_config = true;
    } else if (name == "--list-targets") {
      RETURN_IF_ERROR(no_value());
      flags.list_targets = true;
    } else if (name == "--help" || name == "-h") {
      flags.help = true;
    } else if (name == "--resume") {
      // The path is optional: take the next argument only if it is neither
      // a flag nor an override.
      if (!value && i + 1 < args.size() && !absl::StartsWith(args[i + 1], "-") &&
          args[i + 1].find('=') == std::string::npos) {
        value = args[++i];
      }
      flags.resume = value.value_or("");
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", args[i], "'"));
    }
  }
  if (flags.config.empty() && !flags.list_targets && !flags.help) {
    return absl::InvalidArgumentError("--config FILE is required");
  }
  return flags;
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
  for (const char* section : {"model", "optimizer", "scheduler"}) {
    absl::StatusOr<config::Object> object = config::InstantiateAt(root, section);
    if (!object.ok()) return object.status();
  }
  return out;
}

}  // namespace elastrun::trainer
