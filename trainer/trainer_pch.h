// Precompiled header of the torch translation units of trainer/ (and of
// its test, which reuses it). The modules, optimizers and serialization of
// the C++ frontend plus c10d's Reducer; not <torch/torch.h>, whose data
// loaders, JIT and CUDA parts the trainer does not use.
#ifndef ELASTRUN_TRAINER_TRAINER_PCH_H_
#define ELASTRUN_TRAINER_TRAINER_PCH_H_

#include <ATen/ATen.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize.h>
#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#endif  // ELASTRUN_TRAINER_TRAINER_PCH_H_
