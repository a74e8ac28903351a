// Precompiled header of the torch targets in worker/ (and of the test
// worker, which reuses it). Only the c10d and ATen headers we use: the full
// <torch/torch.h> would double the cost of every translation unit.
#ifndef ELASTRUN_WORKER_TORCH_PCH_H_
#define ELASTRUN_WORKER_TORCH_PCH_H_

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/version.h>  // TORCH_VERSION_MAJOR/MINOR: the guards of the 2.x API
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
// Since LibTorch 2.0 ProcessGroupGloo.hpp no longer includes ProcessGroup.hpp.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#endif  // ELASTRUN_WORKER_TORCH_PCH_H_
