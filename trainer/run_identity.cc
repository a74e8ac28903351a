#include "trainer/run_identity.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/emitter.h"
#include "trainer/digest.h"
#include "trainer/options.h"

namespace elastrun::trainer {
namespace {

bool PlainRunIdByte(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' ||
         c == ':' || c == '@' || c == '+' || c == '-';
}

// Replaces section `name` of `root` by its schema-checked form (defaults
// filled) when it passes the schema.
void FillDefaults(config::Node& root, const char* name, const config::Schema& schema) {
  config::Node* section = root.Find(name);
  if (section == nullptr || !section->is_map()) return;
  absl::StatusOr<config::Node> applied = schema.Apply(*section, name);
  if (applied.ok()) *section = *std::move(applied);
}

}  // namespace

std::string RunIdentity::Tag() const {
  if (run_id.empty() && config_digest.empty()) return "";
  return Sha256Hex(absl::StrCat(run_id, "\n", config_digest)).substr(0, 8);
}

std::string RunIdentity::Describe() const {
  return absl::StrCat("run '", run_id, "', config ",
                      config_digest.empty() ? "unrecorded" : config_digest.substr(0, 12));
}

std::string RunIdentity::DiffersFrom(const RunIdentity& other) const {
  std::string why;
  if (run_id != other.run_id) {
    absl::StrAppend(&why, "run '", run_id, "' vs '", other.run_id, "'");
  }
  if (config_digest != other.config_digest) {
    if (config_digest.empty()) {
      absl::StrAppend(&why, why.empty() ? "" : "; ",
                      "written before checkpoints recorded their run");
    } else {
      absl::StrAppend(&why, why.empty() ? "" : "; ", "config ", config_digest.substr(0, 12),
                      " vs ", other.config_digest.substr(0, 12),
                      " (seed, model, optimizer, schedule or data differ)");
    }
  }
  return why;
}

const std::vector<std::string>& ResumableKeys() {
  static const std::vector<std::string>* keys = new std::vector<std::string>{
      "train.epochs",      "train.output_dir", "train.checkpoint_period",
      "train.checkpoint_iters", "train.snapshot_iters", "train.log_period", "train.threads",
      "train.run_name",    "data.root",        "data.num_workers",
      "scheduler.epochs",  "train.device",     "train.ddp"};
  return *keys;
}

namespace {

// Keys added after runs were already checkpointed, with the default that
// is what those runs did: at that default they are left out of the digest,
// so the runs still resume after an upgrade.
const std::vector<std::pair<std::string, std::string>>& LaterKeys() {
  static const auto* keys =
      new std::vector<std::pair<std::string, std::string>>{{"train.amp_dtype", "float16"},
                                                           {"train.sync_bn", "false"},
                                                           {"data.yaml", ""},
                                                           {"data.hyp", ""},
                                                           {"data.cache_mb", "0"},
                                                           {"data.prefetch", "2"}};
  return *keys;
}

// The value at "section.key", or nullptr.
config::Node* At(config::Node& root, const std::string& key) {
  const size_t dot = key.find('.');
  config::Node* section = root.Find(key.substr(0, dot));
  return section == nullptr ? nullptr : section->Find(key.substr(dot + 1));
}

void EraseKey(config::Node& root, const std::string& key) {
  const size_t dot = key.find('.');
  config::Node* section = root.Find(key.substr(0, dot));
  if (section != nullptr) section->Erase(key.substr(dot + 1));
}

}  // namespace

std::string ConfigDigest(const config::Node& resolved) {
  config::Node root = resolved;
  FillDefaults(root, "data", DataSchema());
  FillDefaults(root, "train", TrainSchema());
  for (const std::string& key : ResumableKeys()) EraseKey(root, key);
  for (const auto& [key, default_value] : LaterKeys()) {
    const config::Node* value = At(root, key);
    if (value != nullptr && value->ScalarText() == default_value) EraseKey(root, key);
  }
  return Sha256Hex(config::ToYaml(root)).substr(0, 32);
}

std::string ChooseRunId(const std::string& run_name, const std::string& launcher_run_id) {
  return run_name.empty() ? launcher_run_id : run_name;
}

std::string EncodeRunIdField(const std::string& run_id) {
  if (run_id.empty()) return "%";
  std::string out;
  for (char c : run_id) {
    if (PlainRunIdByte(c)) {
      out += c;
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

bool DecodeRunIdField(const std::string& field, std::string* run_id) {
  run_id->clear();
  if (field == "%") return true;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '%') {
      if (!PlainRunIdByte(field[i])) return false;
      *run_id += field[i];
      continue;
    }
    int byte = 0;
    if (i + 3 > field.size() || !absl::SimpleHexAtoi(field.substr(i + 1, 2), &byte)) {
      return false;
    }
    *run_id += static_cast<char>(byte);
    i += 2;
  }
  return true;
}

}  // namespace elastrun::trainer
