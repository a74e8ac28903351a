// The classifier task (task.h): an MLP or CNN on Fashion-MNIST (or its
// synthetic stand-in), cross-entropy, accuracy on the test split; the run
// folder's metrics.csv and plots.svg.
#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/config.h"
#include "common/status_macros.h"
#include "trainer/data.h"
#include "trainer/metrics.h"
#include "trainer/models.h"
#include "trainer/plot.h"
#include "trainer/resume.h"
#include "trainer/sampler.h"
#include "trainer/task.h"
#include "worker/progress.h"

namespace elastrun::trainer {
namespace {

std::unordered_map<std::string, TaskFactory>& Factories() {
  static auto* factories = new std::unordered_map<std::string, TaskFactory>();
  return *factories;
}

class ClassifierTask : public Task {
 public:
  explicit ClassifierTask(const TaskContext& c) : c_(c) {}

  absl::Status Build() {
    const TrainerConfig& cfg = *c_.cfg;
    const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
    ASSIGN_OR_RETURN(config::Object object, config::InstantiateAt(cfg.resolved, "model"));
    ASSIGN_OR_RETURN(std::shared_ptr<Model> m, object.Get<Model>());
    model_ = *m;
    // Drawn on the host, so every device starts from the same weights.
    if (!c_.placement->device.is_cpu()) model_->to(c_.placement->device);
    ASSIGN_OR_RETURN(train_set_, LoadDataset(cfg.data, /*train=*/true, seed));
    ASSIGN_OR_RETURN(test_set_, LoadDataset(cfg.data, /*train=*/false, seed));
    return absl::OkStatus();
  }

  std::shared_ptr<torch::nn::Module> model() override { return model_.ptr(); }
  torch::nn::Module& state_module() override { return *model_; }
  int64_t train_size() const override { return train_set_.size(); }
  int64_t test_size() const override { return test_set_.size(); }

  absl::StatusOr<at::Tensor> Loss(int64_t /*epoch*/, const std::vector<int64_t>& indices,
                                  size_t begin, size_t end) override {
    Batch batch = MakeBatchOn(train_set_, indices, begin, end, c_.placement->device);
    // Backward runs outside autocast, as PyTorch's AMP recipe has it: its
    // ops take the forward's types.
    AutocastScope autocast(*c_.placement);
    return torch::nn::functional::cross_entropy(model_->forward(batch.x), batch.y);
  }

  // Each rank scores its unpadded shard; correct, loss and count are
  // summed. The sums stay on the device until the end (no wait per batch),
  // in double as the host would add them.
  absl::StatusOr<TaskEval> Evaluate(const EpochTrain& train) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    const std::vector<int64_t> shard = EvalShard(test_set_.size(), c_.world, c_.rank);
    constexpr size_t kBatch = 1000;
    const auto dev_double =
        at::TensorOptions().dtype(at::kDouble).device(c_.placement->device);
    at::Tensor correct = at::zeros({}, dev_double);
    at::Tensor loss_sum = at::zeros({}, dev_double);
    for (size_t b = 0; b < shard.size(); b += kBatch) {
      const size_t e = std::min(shard.size(), b + kBatch);
      worker::ReportBusy();  // A long evaluation is not a hang.
      Batch batch = MakeBatchOn(test_set_, shard, b, e, c_.placement->device);
      AutocastScope autocast(*c_.placement);
      at::Tensor logits = model_->forward(batch.x);
      correct += logits.argmax(1).eq(batch.y).sum();
      loss_sum +=
          torch::nn::functional::cross_entropy(
              logits, batch.y,
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
              .to(at::kDouble);
    }
    std::vector<double> sums = {correct.item<double>(), loss_sum.item<double>(),
                                static_cast<double>(shard.size())};
    RETURN_IF_ERROR(SumOverRanks(c_.group, sums));
    model_->train();
    TaskEval eval;
    eval.loss = sums[1] / sums[2];
    eval.acc = eval.score = sums[0] / sums[2];
    EpochMetrics m;
    m.epoch = train.epoch;
    m.train_loss = train.loss;
    m.test_loss = eval.loss;
    m.test_acc = eval.acc;
    m.lr = train.lr;
    m.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - train.start)
            .count();
    m.images_per_sec = train.images_per_sec;
    eval.row = MetricsRow(m);
    eval.line = absl::StrFormat(
        "epoch %d/%d: train_loss %.4f test_loss %.4f test_acc %.4f lr %.5g %.1fs %.0f "
        "img/s",
        m.epoch, c_.cfg->train.epochs, m.train_loss, m.test_loss, m.test_acc, m.lr,
        m.seconds, m.images_per_sec);
    return eval;
  }

  std::string csv_name() const override { return "metrics.csv"; }
  std::string csv_header() const override { return kMetricsHeader; }
  std::vector<std::string> record_files() const override {
    return {"metrics.csv", "config.yaml", "plots.svg"};
  }
  absl::Status WritePlots(const std::string& output_dir) override {
    return trainer::WritePlots(output_dir + "/metrics.csv", output_dir + "/plots.svg");
  }

 private:
  const TaskContext c_;
  Model model_{nullptr};
  Dataset train_set_;
  Dataset test_set_;
};

}  // namespace

bool RegisterTask(const char* model_target, TaskFactory factory) {
  Factories()[model_target] = factory;
  return true;
}

absl::StatusOr<std::unique_ptr<Task>> MakeClassifierTask(const TaskContext& context) {
  auto task = std::make_unique<ClassifierTask>(context);
  RETURN_IF_ERROR(task->Build());
  return std::unique_ptr<Task>(std::move(task));
}

absl::StatusOr<std::unique_ptr<Task>> MakeTask(const TaskContext& context) {
  const config::Node* model = context.cfg->resolved.Find("model");
  const config::Node* target = model != nullptr ? model->Find("_target_") : nullptr;
  if (target != nullptr && target->is_scalar()) {
    auto it = Factories().find(target->ScalarText());
    if (it != Factories().end()) return it->second(context);
  }
  return MakeClassifierTask(context);
}

}  // namespace elastrun::trainer
