// A rank's whole training state as one flat byte image: what a snapshot
// copies into shared memory every optimizer step and what a checkpoint file
// holds. Writing one is a plan (names, shapes, offsets; cheap) and then one
// memcpy per tensor straight into the destination (the snapshot's shared
// memory): no serialization on the training thread.
//
// Layout: the text line "ELASTRUN-STATE 2 <index bytes>\n", the index (text,
// one record per line), zero padding to a 64-byte boundary, then the raw
// data of every tensor and blob at the offsets the index gives:
//   p <field> <value>                        position (TrainPosition)
// Format 1 (an older build) counted the position in batches per rank; it is
// still read, into TrainPosition's legacy fields.
//   s <group> <param> <step>                 AdamW's step counter
//   b <name> <offset> <bytes>                config YAML, metrics rows
//   t <name> <dtype> <dims> <sizes..> <strides..> <offset> <bytes>
// Tensor names: "m.<param>" and "u.<buffer>" of the model,
// "o.<group>.<param>.<field>" of the optimizer, "rng" (CPU generator),
// "rng.cuda" (the training GPU's generator, when training on one).
// Tensors keep their strides (channels-last stays channels-last). The
// image is device-free: GPU tensors are copied to the host when planned,
// and restored onto the device of the model they are loaded into, so a
// state taken on a GPU resumes on a CPU and the other way round.
#ifndef ELASTRUN_TRAINER_STATE_IMAGE_H_
#define ELASTRUN_TRAINER_STATE_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/checkpoint.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

// The generators dropout draws from: the CPU's, and the training GPU's
// (undefined when training on a CPU).
struct Generators {
  at::Tensor cpu;
  at::Tensor cuda;
};

// What an image holds besides model and optimizer.
struct StateExtras {
  TrainPosition position;
  std::string config_yaml;   // The resolved config the run trains with.
  std::string metrics_rows;  // metrics.csv's rows so far, without the header.
  // False for a checkpoint of an older build (no rows): metrics.csv is then
  // appended to as it stands.
  bool rows_carried = true;
  Generators rng;            // The generators' states (dropout).
};

// The layout of one image. Plan it, then WriteTo a buffer of size() bytes;
// the tensors must not change in between (one thread drives both).
class StateImage {
 public:
  static StateImage Plan(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                         const StateExtras& extras);
  size_t size() const { return size_; }
  // Copies the index and every tensor's bytes into `dst`.
  void WriteTo(char* dst) const;
  // The image as a string (tests, and a process without snapshot memory).
  std::string ToString() const;

 private:
  struct Part {
    const void* data = nullptr;
    size_t offset = 0;
    size_t bytes = 0;
  };
  std::string head_;  // Header line, index and padding.
  std::vector<Part> parts_;
  // What the parts point into: the tensors, dense host copies where they
  // were not.
  std::vector<at::Tensor> keep_;
  size_t size_ = 0;
};

// Whether `bytes` starts like an image (else: an older torch archive).
bool IsStateImage(absl::string_view bytes);

// Loads an image into an identically built model and optimizer (creating
// the optimizer's per-parameter state), and returns the rest in `*extras`
// (the generator state is returned, not applied). Everything is checked
// before any tensor is touched: every record lies inside the bytes, its
// shape and strides address exactly its bytes, and it has the shape and
// type of what it restores; on any error the model and the optimizer are
// unchanged. DataLoss naming what does not fit (a tensor missing or of
// another shape or type: another model) or what is malformed (a crafted or
// truncated image).
absl::Status RestoreImage(absl::string_view bytes, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer, StateExtras* extras);

// The states of the default generators of the CPU and, for a CUDA
// `device`, of that GPU; and setting them (a state that is not there, or
// a GPU's on a CPU run, is left alone).
Generators GeneratorStates(const torch::Device& device);
void SetGeneratorStates(const Generators& states, const torch::Device& device);

// A digest of the part of an image every rank holds alike when it holds
// the same state: the position's shared fields (epoch, samples done,
// lineage, branch, accumulation), the parameters and the optimizer's state
// (not the buffers, the generators or the rank's own loss sums). Two ranks'
// images of one step have equal digests; images of different states (a
// lineage counted twice, an optimizer state that drifted) do not. XXH3,
// 64 bits: it guards against mistakes, not against an adversary.
// DataLoss as RestoreImage for a malformed image.
absl::StatusOr<uint64_t> ContentDigest(absl::string_view bytes);

// The image's position and blobs only (no model needed).
absl::Status ReadImageExtras(absl::string_view bytes, StateExtras* extras);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_STATE_IMAGE_H_
