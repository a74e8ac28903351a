#include "trainer/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace elastrun::trainer {
namespace {

void WriteInt(torch::serialize::OutputArchive& a, const std::string& key, int64_t v) {
  a.write(key, c10::IValue(v));
}
int64_t ReadInt(torch::serialize::InputArchive& a, const std::string& key) {
  c10::IValue v;
  a.read(key, v);
  return v.toInt();
}

}  // namespace

std::string SerializeState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                           const TrainPosition& p, const std::string& config_yaml) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  // Accumulated gradients (only between optimizer steps).
  torch::serialize::OutputArchive grads;
  int64_t i = 0;
  for (const at::Tensor& param : model.parameters()) {
    if (param.grad().defined()) grads.write(absl::StrCat("g", i), param.grad());
    ++i;
  }
  archive.write("grads", grads);
  WriteInt(archive, "epoch", p.epoch);
  // The older build's per-rank position (see TrainPosition::legacy_*).
  WriteInt(archive, "iteration", std::max<int64_t>(p.legacy_iteration, 0));
  WriteInt(archive, "last_opt_step", p.legacy_last_opt_step);
  WriteInt(archive, "micro_batches", p.micro_batches);
  WriteInt(archive, "world_size", p.world_size);
  archive.write("best_acc", c10::IValue(p.best_acc));
  archive.write("loss_sum", c10::IValue(p.loss_sum));
  archive.write("seen", c10::IValue(p.seen));
  archive.write("amp_scale", c10::IValue(p.amp_scale));
  WriteInt(archive, "amp_growth_tracker", p.amp_growth_tracker);
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng", gen.get_state());
  }
  archive.write("config", c10::IValue(config_yaml));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

absl::Status RestoreState(const std::string& bytes, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer, TrainPosition* position,
                          std::string* config_yaml) {
  try {
    // Onto the model's device: loading a parameter from another device
    // would move it there.
    c10::optional<torch::Device> device;
    for (const at::Tensor& param : model.parameters()) device = param.device();
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), device);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    // Loading gives each parameter the file's storage and layout; give every
    // one back the layout this model was built with (channels-last
    // convolutions), whatever layout wrote the file, or the run computes
    // with other kernels than it was configured for.
    std::vector<at::MemoryFormat> formats;
    for (const at::Tensor& param : model.parameters()) {
      formats.push_back(param.suggest_memory_format());
    }
    model.load(model_archive);
    {
      torch::NoGradGuard no_grad;
      size_t k = 0;
      for (at::Tensor& param : model.parameters()) {
        if (k < formats.size() && param.suggest_memory_format() != formats[k]) {
          param.set_data(param.clone(formats[k]));
        }
        ++k;
      }
    }
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
    torch::serialize::InputArchive grads;
    archive.read("grads", grads);
    int64_t i = 0;
    for (at::Tensor& param : model.parameters()) {
      at::Tensor g;
      if (grads.try_read(absl::StrCat("g", i), g)) {
        param.mutable_grad() = g.clone();
      } else {
        param.mutable_grad() = at::Tensor();
      }
      ++i;
    }
    TrainPosition p;
    p.epoch = ReadInt(archive, "epoch");
    p.legacy_iteration = ReadInt(archive, "iteration");
    p.legacy_last_opt_step = ReadInt(archive, "last_opt_step");
    p.micro_batches = ReadInt(archive, "micro_batches");
    p.world_size = ReadInt(archive, "world_size");
    c10::IValue best;
    archive.read("best_acc", best);
    p.best_acc = best.toDouble();
    archive.read("loss_sum", best);
    p.loss_sum = best.toDouble();
    archive.read("seen", best);
    p.seen = best.toDouble();
    archive.read("amp_scale", best);
    p.amp_scale = best.toDouble();
    p.amp_growth_tracker = ReadInt(archive, "amp_growth_tracker");
    at::Tensor rng;
    archive.read("rng", rng);
    rng = rng.to(torch::kCPU);
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    c10::IValue config;
    archive.read("config", config);
    if (position != nullptr) *position = p;
    if (config_yaml != nullptr) *config_yaml = config.toStringRef();
  } catch (const c10::Error& e) {
    return absl::DataLossError(
        absl::StrCat("checkpoint does not fit this model or optimizer: ",
                     e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace elastrun::trainer
