// snapshot_bench: what capturing a rank's training state costs the training
// thread, per model. Beside a plain memcpy of the same bytes, it times the
// snapshot (StateImage::Plan + SnapshotArea::BeginWrite + WriteTo + Commit
// into snapshot memory), the checkpoint as the trainer takes it now (that
// snapshot + CheckpointPersister::Persist, which returns once the slot is
// pinned) and, apart, the persister's background work until Flush returns,
// and the checkpoint as it was taken before the snapshot tiers
// (SerializeState + SaveCheckpoint with fsync, all on the training thread).
// bench/snapshot_compare.py runs it beside Python's torch.save and prints
// the table; see bench/README.md.
//
// Wall time is read from the real steady clock: measuring it is the point.
#include <errno.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_file.h"
#include "trainer/models.h"
#include "trainer/optimizer.h"
#include "trainer/persister.h"
#include "trainer/resume.h"
#include "trainer/state_image.h"
#include "worker/snapshot_area.h"

namespace elastrun::bench {
namespace {

using trainer::StateExtras;
using trainer::StateImage;

struct Options {
  std::vector<std::string> models = {"mlp", "cnn", "big"};
  int reps = 7;                      // Measured repetitions per model (medians of these).
  int warmup = 2;                    // Unmeasured first; 2 grows both snapshot slots.
  std::string shm_dir = "/dev/shm";  // Where the snapshot memory lives.
  std::string disk_dir;              // Checkpoint files; "" = $TMPDIR or /tmp.
  bool json = false;                 // One JSON line per model, every sample.
};

// A model with its optimizer after one step (so SGD's momentum buffers
// exist and the state is as big as in training).
struct Subject {
  std::string name;
  std::string description;
  trainer::Model model;
  std::unique_ptr<trainer::Optimizer> optimizer;
  int64_t params = 0;
};

// The models of configs/fashion_mnist_{mlp,cnn}.yaml, and a wide MLP whose
// parameters plus momentum are ~100 MB.
Subject MakeSubject(const std::string& name) {
  Subject s;
  s.name = name;
  int64_t batch = 64;
  if (name == "cnn") {
    trainer::CnnOptions o;
    o.dropout = 0.25;
    s.model = trainer::MakeCnn(o);
    s.description = "CNN [32,64] conv, fc 128, channels-last";
    batch = 128;
  } else {
    trainer::MlpOptions o;
    o.hidden = name == "big" ? std::vector<int64_t>{4096, 2048, 512}
                             : std::vector<int64_t>{256, 256};
    o.dropout = name == "big" ? 0.0 : 0.1;
    s.model = trainer::MakeMlp(o);
    s.description = absl::StrCat("MLP 784-", absl::StrJoin(o.hidden, "-"), "-10");
  }
  trainer::OptimizerSpec spec;  // SGD, momentum 0.937, Nesterov: the configs'.
  // Cannot fail: both models have parameters.
  s.optimizer = trainer::Optimizer::Create(spec, *s.model, spec.weight_decay).value();
  for (const at::Tensor& p : s.model->parameters()) s.params += p.numel();
  s.model->train();
  at::Tensor x = torch::randn({batch, 1, 28, 28});
  at::Tensor y = torch::randint(0, 10, {batch}, torch::kLong);
  torch::nn::functional::cross_entropy(s.model->forward(x), y).backward();
  s.optimizer->Step();
  return s;
}

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One repetition's figures, in milliseconds.
struct Sample {
  double memcpy_ms = 0;
  double snapshot_ms = 0;
  double checkpoint_ms = 0;  // Snapshot + Persist (the training thread's part).
  double persist_ms = 0;     // Persist's return to Flush's (background).
  double old_ms = 0;         // SerializeState + SaveCheckpoint.
  double serialize_ms = 0;   // SerializeState alone (part of old_ms).
};

// Everything a repetition writes to, made once per model.
struct Bench {
  Subject* subject = nullptr;
  StateExtras extras;
  trainer::RunIdentity run{"snapshot-bench", "0123456789abcdef"};
  std::unique_ptr<worker::SnapshotArea> area;
  std::unique_ptr<trainer::CheckpointPersister> persister;
  std::string new_dir, old_dir;  // Checkpoint folders of the two paths.
  std::vector<char> src, dst;    // The memcpy's buffers.
  int64_t key = 0;
};

// What the training thread does for a snapshot (TrainLoop::CaptureState).
absl::Status Snapshot(Bench& b) {
  const StateImage image = StateImage::Plan(
      *b.subject->model, b.subject->optimizer->torch_optimizer(), b.extras);
  absl::StatusOr<char*> dst = b.area->BeginWrite(image.size());
  if (!dst.ok()) return dst.status();
  image.WriteTo(*dst);
  b.area->Commit(++b.key, trainer::SnapshotMeta(b.run, 1));
  return absl::OkStatus();
}

// The checkpoint as the trainer took it before the snapshot tiers; the
// serialization's share in `*serialize_ms`.
absl::Status OldCheckpoint(Bench& b, double* serialize_ms) {
  trainer::CheckpointBlob blob;
  blob.key = ++b.key;
  blob.run = b.run;
  const Clock::time_point t = Clock::now();
  blob.payload =
      trainer::SerializeState(*b.subject->model, b.subject->optimizer->torch_optimizer(),
                              b.extras.position, b.extras.config_yaml);
  *serialize_ms = MsSince(t);
  return trainer::SaveCheckpoint(b.old_dir, blob, /*best=*/false);
}

// Each timed copy follows an untimed one of the same kind: its source is
// in cache as far as it fits, as the tensors are right after the optimizer
// step that precedes a snapshot in training, and memcpy and snapshot are
// compared in the same state. (The checkpoint follows them likewise.)
absl::Status Repetition(Bench& b, Sample& s) {
  std::memcpy(b.dst.data(), b.src.data(), b.src.size());
  Clock::time_point t = Clock::now();
  std::memcpy(b.dst.data(), b.src.data(), b.src.size());
  s.memcpy_ms = MsSince(t);

  if (absl::Status st = Snapshot(b); !st.ok()) return st;
  t = Clock::now();
  if (absl::Status st = Snapshot(b); !st.ok()) return st;
  s.snapshot_ms = MsSince(t);

  t = Clock::now();
  if (absl::Status st = Snapshot(b); !st.ok()) return st;
  if (absl::Status st = b.persister->Persist(/*best=*/false); !st.ok()) return st;
  s.checkpoint_ms = MsSince(t);
  t = Clock::now();
  if (absl::Status st = b.persister->Flush(); !st.ok()) return st;
  s.persist_ms = MsSince(t);

  t = Clock::now();
  if (absl::Status st = OldCheckpoint(b, &s.serialize_ms); !st.ok()) return st;
  s.old_ms = MsSince(t);
  return absl::OkStatus();
}

// The measured paths really wrote the state: the newest snapshot and the
// newest checkpoint file hold the image of the model as it is.
absl::Status Verify(Bench& b) {
  const std::string want =
      StateImage::Plan(*b.subject->model, b.subject->optimizer->torch_optimizer(),
                       b.extras)
          .ToString();
  std::vector<worker::SnapshotSlot> slots = b.area->Valid();
  if (slots.empty() || slots[0].bytes != want) {
    return absl::InternalError("the newest snapshot is not the model's state image");
  }
  absl::StatusOr<trainer::CheckpointBlob> file =
      trainer::LoadNewestCheckpoint(b.new_dir, b.run, nullptr);
  if (!file.ok()) return file.status();
  if (file->payload != want) {
    return absl::InternalError("the persisted checkpoint is not the model's state image");
  }
  return absl::OkStatus();
}

// A fresh folder under `parent`, removed by the caller.
absl::StatusOr<std::string> TempDir(const std::string& parent) {
  std::string tmpl = parent + "/elastrun-snapshot-bench-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make a folder in ", parent, ": ", std::strerror(errno)));
  }
  return tmpl;
}

// Runs warm-up and measured repetitions of one model; the state's size in
// `*bytes`.
absl::Status Measure(const Options& o, Subject& subject, const std::string& shm,
                     const std::string& disk, size_t* bytes,
                     std::vector<Sample>* samples) {
  Bench b;
  b.subject = &subject;
  // A resolved config and some metrics rows ride along, as in training.
  b.extras.config_yaml = std::string(4096, '#');
  b.extras.metrics_rows = std::string(1024, '0');
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    b.extras.rng = gen.get_state();
  }
  absl::StatusOr<std::unique_ptr<worker::SnapshotArea>> area =
      worker::SnapshotArea::Open(shm, "rank0");
  if (!area.ok()) return area.status();
  b.area = *std::move(area);
  b.new_dir = disk + "/new";
  b.old_dir = disk + "/old";
  b.persister =
      std::make_unique<trainer::CheckpointPersister>(b.area.get(), b.new_dir, b.run);
  *bytes =
      StateImage::Plan(*subject.model, subject.optimizer->torch_optimizer(), b.extras)
          .size();
  b.src.assign(*bytes, 1);  // Written: every page faulted in before timing.
  b.dst.assign(*bytes, 2);
  Sample s;
  for (int i = 0; i < o.warmup; ++i) {
    if (absl::Status st = Repetition(b, s); !st.ok()) return st;
  }
  for (int i = 0; i < o.reps; ++i) {
    if (absl::Status st = Repetition(b, s); !st.ok()) return st;
    samples->push_back(s);
  }
  // The last repetition ended with an old checkpoint; take one more
  // snapshot and checkpoint so that Verify sees the new path's newest.
  if (absl::Status st = Snapshot(b); !st.ok()) return st;
  if (absl::Status st = b.persister->Persist(false); !st.ok()) return st;
  if (absl::Status st = b.persister->Flush(); !st.ok()) return st;
  return Verify(b);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::vector<double> Column(const std::vector<Sample>& samples, double Sample::*field) {
  std::vector<double> v;
  for (const Sample& s : samples) v.push_back(s.*field);
  return v;
}

void PrintJson(const Subject& subject, size_t bytes, const std::vector<Sample>& samples) {
  std::string line = absl::StrCat(
      "{\"model\": \"", subject.name, "\", \"description\": \"", subject.description,
      "\", \"params\": ", subject.params, ", \"bytes\": ", bytes);
  const std::pair<const char*, double Sample::*> fields[] = {
      {"memcpy_ms", &Sample::memcpy_ms},
      {"snapshot_ms", &Sample::snapshot_ms},
      {"checkpoint_ms", &Sample::checkpoint_ms},
      {"persist_ms", &Sample::persist_ms},
      {"old_ms", &Sample::old_ms},
      {"serialize_ms", &Sample::serialize_ms}};
  for (const auto& [name, field] : fields) {
    std::vector<std::string> v;
    for (double x : Column(samples, field)) v.push_back(absl::StrFormat("%.4f", x));
    absl::StrAppend(&line, ", \"", name, "\": [", absl::StrJoin(v, ", "), "]");
  }
  std::printf("%s}\n", line.c_str());
  std::fflush(stdout);
}

void PrintRow(const Subject& subject, size_t bytes, const std::vector<Sample>& samples) {
  const double memcpy_ms = Median(Column(samples, &Sample::memcpy_ms));
  const double snapshot_ms = Median(Column(samples, &Sample::snapshot_ms));
  std::printf("%-6s %8.2f %9.3f %11.3f %6.2fx %13.3f %13.3f %11.3f\n",
              subject.name.c_str(), static_cast<double>(bytes) / 1e6, memcpy_ms,
              snapshot_ms, snapshot_ms / memcpy_ms,
              Median(Column(samples, &Sample::checkpoint_ms)),
              Median(Column(samples, &Sample::persist_ms)),
              Median(Column(samples, &Sample::old_ms)));
  std::fflush(stdout);
}

int ParseFlags(int argc, char** argv, Options& o) {
  CLI::App app(
      "Times the training thread's stall per snapshot and per checkpoint, beside a\n"
      "memcpy of the same bytes and the old checkpoint path. See bench/README.md.",
      "snapshot_bench");
  app.add_option("--models", o.models, "mlp,cnn,big")
      ->delimiter(',')
      ->check(CLI::IsMember({"mlp", "cnn", "big"}))
      ->capture_default_str();
  app.add_option("--reps", o.reps, "measured repetitions per model")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup,
                 "unmeasured repetitions first (2 grows both slots)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--shm-dir", o.shm_dir, "parent of the snapshot memory's folder")
      ->capture_default_str();
  app.add_option("--disk-dir", o.disk_dir,
                 "parent of the checkpoint folders ($TMPDIR or /tmp)");
  app.add_flag("--json", o.json, "one JSON line per model with every sample");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.disk_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    o.disk_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  return -1;
}

// Measures one model in fresh folders, removed afterwards.
absl::Status RunModel(const Options& o, const std::string& name) {
  Subject subject = MakeSubject(name);
  absl::StatusOr<std::string> shm = TempDir(o.shm_dir);
  if (!shm.ok()) return shm.status();
  absl::StatusOr<std::string> disk = TempDir(o.disk_dir);
  if (!disk.ok()) {
    std::filesystem::remove_all(*shm);
    return disk.status();
  }
  size_t bytes = 0;
  std::vector<Sample> samples;
  absl::Status st = Measure(o, subject, *shm, *disk, &bytes, &samples);
  std::error_code ec;
  std::filesystem::remove_all(*shm, ec);
  std::filesystem::remove_all(*disk, ec);
  if (!st.ok()) return st;
  if (o.json) {
    PrintJson(subject, bytes, samples);
  } else {
    PrintRow(subject, bytes, samples);
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Options o;
  if (int rc = ParseFlags(argc, argv, o); rc >= 0) return rc;
  // One thread: the state's copy is the same, and the one forward/backward
  // step that makes the momentum buffers stays off the other core.
  torch::set_num_threads(1);
  if (!o.json) {
    std::printf("medians of %d repetitions after %d warm-up, milliseconds\n", o.reps,
                o.warmup);
    std::printf("%-6s %8s %9s %11s %7s %13s %13s %11s\n", "model", "MB", "memcpy",
                "snapshot", "ratio", "ckpt stall", "bg persist", "old ckpt");
  }
  for (const std::string& name : o.models) {
    absl::Status st;
    try {
      st = RunModel(o, name);
    } catch (const c10::Error& e) {
      st = absl::InternalError(e.what_without_backtrace());
    }
    if (!st.ok()) {
      std::fprintf(stderr, "snapshot_bench: %s: %s\n", name.c_str(),
                   st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace elastrun::bench

int main(int argc, char** argv) { return elastrun::bench::Main(argc, argv); }
