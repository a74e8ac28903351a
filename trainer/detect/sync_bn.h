// SyncBatchNorm for the detector (YOLOv5's --sync-bn): a BatchNorm2d whose
// training forward normalises with the statistics of the whole global
// batch, reduced over a c10d process group, as torch.nn.SyncBatchNorm does.
//
// SyncBatchNorm2d has torch::nn::BatchNorm2d's options, parameters and
// buffers under the same names (weight, bias, running_mean, running_var,
// num_batches_tracked), so checkpoints of either load into the other. Without a group, with a group of one rank,
// or in eval() it computes exactly what BatchNorm2d computes (the same
// at::batch_norm call, bitwise). With a group of several ranks, in
// training:
//   forward   every rank's per-channel count, sum and sum of squares
//             (from its local mean and biased variance, in float64) are
//             summed over the group; the global mean and biased variance
//             normalise the input, running_var takes the unbiased variance
//             over the global count (momentum and num_batches_tracked as
//             BatchNorm2d).
//   backward  sum(dy) and sum(dy * (x - mean)) are summed over the group
//             (torch's SyncBatchNorm backward); the input gradient is that
//             of the global batch. The weight and bias gradients stay
//             local, as torch's: DDP's gradient allreduce averages them.
// Every rank of the group must run the same BatchNorm layers in the same
// order in forward and backward (collectives are issued inline); on CPU
// tensors that is Gloo, on CUDA tensors the group's CUDA backend.
#ifndef ELASTRUN_TRAINER_DETECT_SYNC_BN_H_
#define ELASTRUN_TRAINER_DETECT_SYNC_BN_H_

#include <cstdint>

#include "trainer/trainer_pch.h"

namespace elastrun::trainer::detect {

// Not derived from torch::nn::BatchNorm2dImpl: LibTorch does not export
// the out-of-line members of its BatchNormImplBase that a derived class's
// vtables need. The same state and options, declared here.
class SyncBatchNorm2dImpl : public torch::nn::Cloneable<SyncBatchNorm2dImpl> {
 public:
  explicit SyncBatchNorm2dImpl(int64_t num_features)
      : SyncBatchNorm2dImpl(torch::nn::BatchNorm2dOptions(num_features)) {}
  explicit SyncBatchNorm2dImpl(const torch::nn::BatchNorm2dOptions& options);

  // Input [N, C, H, W]; see the file comment. Throws c10::Error as
  // BatchNorm2d does (not 4-D, wrong channel count, one value per channel
  // over the whole group in training) and when a collective fails.
  at::Tensor forward(const at::Tensor& input);

  // The group to reduce statistics over; null (the default) or a group of
  // one rank makes this a plain BatchNorm2d. The group must outlive every
  // backward of a forward run with it.
  void SetProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> group) {
    group_ = std::move(group);
  }
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return group_; }

  // BatchNorm2d's: (re)registers the state, then resets it (weight 1,
  // bias 0, running mean 0 and variance 1, no batches tracked).
  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  torch::nn::BatchNorm2dOptions options;
  // Undefined without affine (weight, bias) or track_running_stats (the rest).
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};
TORCH_MODULE(SyncBatchNorm2d);

// Sets `group` on every SyncBatchNorm2d in `model`'s tree (itself
// included); a null group turns synchronisation off again. Returns how many
// layers it set.
int UseSyncBatchNorm(torch::nn::Module& model, c10::intrusive_ptr<c10d::ProcessGroup> group);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_SYNC_BN_H_
