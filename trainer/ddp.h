// Distributed data parallel through PyTorch's own c10d::Reducer, driven
// from C++ the way torch.nn.parallel.DistributedDataParallel drives it:
// gradient buckets (a small first bucket, then ~25 MiB) allreduced while
// backward still runs, averaged over ranks.
//
// A training step:
//   ddp->BeforeForward(sync);          // rebuild buckets, sync buffers
//   at::Tensor loss = ...forward...;
//   ddp->BeforeBackward(loss, sync);   // arm the reducer's hooks
//   loss.backward();                   // buckets allreduce as grads finish
// sync = false accumulates locally (DDP's no_sync()); the next synced
// backward reduces the sum.
//
// On Debian's LibTorch reducer.hpp needs trainer/shim (see the header
// there). Builds against LibTorch 1.13 and 2.x.
#ifndef ELASTRUN_TRAINER_DDP_H_
#define ELASTRUN_TRAINER_DDP_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/options.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

struct DdpOptions {
  // Python DDP's _DEFAULT_FIRST_BUCKET_BYTES and bucket_cap_mb=25: the
  // buckets once rebuilt in the order gradients arrived (after the first
  // synced step; from the start with find_unused_parameters and no
  // static_graph, which never rebuild).
  size_t first_bucket_bytes = size_t{1} << 20;
  size_t bucket_bytes = size_t{25} << 20;
  // Broadcast buffers (BatchNorm statistics) from rank 0 before every synced
  // forward, as DDP's broadcast_buffers=True. Create() broadcasts them once
  // either way, as DDP's constructor does.
  bool broadcast_buffers = true;
  // Bucket size of broadcast_coalesced (Python DDP: 250 MiB).
  size_t broadcast_bytes = size_t{250} << 20;
  // DDP's find_unused_parameters: every synced backward first walks the
  // loss's autograd graph and marks the parameters it does not reach as
  // ready (their gradients stay as they were). Without it, a parameter
  // that gets no gradient leaves its bucket unreduced, and the next synced
  // step throws a c10::Error naming train.ddp.find_unused_parameters.
  bool find_unused_parameters = false;
  // DDP's static_graph: the same parameters are used (or unused) in every
  // step. The first synced step reduces every gradient in one go after its
  // backward and records which parameters went unused; later steps need no
  // graph walk even with unused parameters.
  bool static_graph = false;
  // DDP's gradient_as_bucket_view: parameter gradients are views into the
  // reducer's buckets (no copy out after the allreduce; less memory). A
  // gradient reset to undefined becomes a view again in the next synced
  // backward.
  bool gradient_as_bucket_view = false;
  // A one-element parameter of the wrapper's own (not the model's, never
  // in the optimizer or a checkpoint) rides in the gradient buckets: its
  // gradient is each rank's vote to stop after the step in progress, and
  // the step's allreduce adds the votes up, so all ranks agree on the step
  // to stop after with no collective of their own (StopTerm, StopVoted).
  // With it, every synced forward's loss must include StopTerm.
  bool stop_vote = false;
};

// Wraps one module on one rank. The module and the process group must
// outlive this object. Not thread-safe: one thread drives the steps.
class DistributedDataParallel {
 public:
  // Broadcasts parameters and buffers from rank 0 (every rank then starts
  // from rank 0's state), assigns buckets and builds the Reducer.
  // Errors: Internal with torch's message (e.g. a peer left during the
  // broadcast).
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(
      std::shared_ptr<torch::nn::Module> module,
      c10::intrusive_ptr<c10d::ProcessGroup> group, const DdpOptions& options = {});
  ~DistributedDataParallel();

  // Copies parameters and buffers of rank `root` to every rank.
  void BroadcastState(int root = 0);
  void BeforeForward(bool sync);
  void BeforeBackward(const at::Tensor& loss, bool sync);

  // This rank's vote for the step in progress, as a term to add to the
  // loss of each of its forwards: zero, so the loss and every other
  // gradient stay what they were (an undefined tensor without stop_vote).
  at::Tensor StopTerm(bool stop) const;
  // After the synced backward of a step: whether any rank voted to stop in
  // any of its micro-batches; clears the votes.
  bool StopVoted();

  // Bucket assignment (parameter indices per bucket, in reduction order):
  // the reducer's current one (one bucket until the first synced step
  // rebuilds them, unless find_unused_parameters without static_graph).
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

 private:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          c10::intrusive_ptr<c10d::ProcessGroup> group,
                          const DdpOptions& options);

  std::shared_ptr<torch::nn::Module> module_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  DdpOptions options_;
  std::vector<at::Tensor> params_;  // The reducer's, in its order.
  std::vector<at::Tensor> buffers_;
  at::Tensor stop_vote_;  // Zero; its gradient is the votes.
  std::vector<std::vector<size_t>> buckets_;
  std::unique_ptr<c10d::Reducer> reducer_;
  // Buffers are broadcast after a synced backward (DDP's
  // require_forward_param_sync).
  bool buffers_need_sync_ = false;
  int64_t synced_forwards_ = 0;  // DDP's num_iterations
};

// The DdpOptions of a config's `train.ddp` section (stop_vote left false).
DdpOptions DdpOptionsFrom(const TrainOptions& train);

// Python's Optimizer.zero_grad(set_to_none=False): zeroes each defined
// gradient in place, detaching it first only if it has a grad_fn. LibTorch
// 1.13's torch::optim::Optimizer::zero_grad() detaches every gradient in
// place, which throws for gradient_as_bucket_view's gradients (views).
void ZeroGrad(const std::vector<at::Tensor>& params);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_DDP_H_
