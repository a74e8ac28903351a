#!/usr/bin/env bash
# The main job: builds elastrun, then trains an MLP on Fashion-MNIST with
# elastic DDP on this node: `elastrun run` starts two `elastrun-train`
# workers (c10d TCPStore + Gloo, PyTorch's c10d::Reducer). To show what
# elastrun is for, rank 1 is killed in the middle of epoch 2
# (ELASTRUN_TRAIN_FAIL_AT, a test hook of the trainer): the launcher restarts
# the group from standby workers and training resumes from the last
# checkpoint. The last line reads "final: epoch=2 test_acc=0.86...".
#
# The run has a fixed id, and elastrun-train resumes any run whose own
# checkpoints it finds; so that every invocation shows the whole demo (and
# not a finished run resumed), the demo's own run folder is cleared first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ -d build/runs/fashion_mnist_mlp ]; then
  echo "main job: clearing the previous demo run (build/runs/fashion_mnist_mlp)"
  rm -rf build/runs/fashion_mnist_mlp
fi
export ELASTRUN_TRAIN_FAIL_AT=1:700
exec build/bin/elastrun run --nproc-per-node 2 --max-restarts 1 --standby \
  --log-dir build/logs --run-id fashion_mnist_mlp \
  build/bin/elastrun-train --config configs/fashion_mnist_mlp.yaml \
  train.epochs=2 train.output_dir=build/runs/fashion_mnist_mlp
