#!/usr/bin/env bash
# The main job: builds elastrun, then trains an MLP on Fashion-MNIST with
# elastic DDP on this node: `elastrun run` starts two `elastrun-train`
# workers (c10d TCPStore + Gloo, PyTorch's c10d::Reducer). To show what
# elastrun is for, rank 1 is killed in the middle of epoch 2
# (ELASTRUN_TRAIN_FAIL_AT, a test hook of the trainer): the launcher restarts
# the group from standby workers, and training resumes at the step it died
# at, from the snapshot every rank keeps in the launcher's memory
# (train.snapshot_iters=1: one per optimizer step). The log says which step
# and where the state came from. Then the same run without the fault: the
# two must end with bitwise the same weights.
#
# The runs have fixed ids, and elastrun-train resumes any run whose own
# checkpoints it finds; so that every invocation shows the whole demo (and
# not a finished run resumed), the demo's run folders are cleared first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
for run in fashion_mnist_mlp fashion_mnist_mlp_clean; do
  if [ -d "build/runs/$run" ]; then
    echo "main job: clearing the previous demo run (build/runs/$run)"
    rm -rf "build/runs/$run"
  fi
done

# run ID [VAR=VALUE...]: the demo's training run, its output on the terminal
# and in build/runs/ID.log.
run() {
  local id=$1
  shift
  mkdir -p build/runs
  env "$@" build/bin/elastrun run --nproc-per-node 2 --max-restarts 1 --standby \
    --log-dir build/logs --run-id "$id" \
    build/bin/elastrun-train --config configs/fashion_mnist_mlp.yaml \
    train.epochs=2 train.snapshot_iters=1 "train.output_dir=build/runs/$id" \
    2>&1 | tee "build/runs/$id.log"
}

run fashion_mnist_mlp ELASTRUN_TRAIN_FAIL_AT=1:700
echo
echo "main job: the same run without the fault, to compare the weights"
run fashion_mnist_mlp_clean | grep -E '^\[rank0\]:(epoch [0-9]+/[0-9]+:|final:)' || true
params() { grep -o 'final: .*params_sha256=[0-9a-f]*' "build/runs/$1.log" | grep -o '[0-9a-f]*$'; }
faulted=$(params fashion_mnist_mlp)
clean=$(params fashion_mnist_mlp_clean)
echo
grep -h '^\[rank0\]:resumed at' build/runs/fashion_mnist_mlp.log | sed 's/^\[rank0\]:/main job: /'
if [ -n "$faulted" ] && [ "$faulted" = "$clean" ]; then
  echo "main job: the run that lost rank 1 ends with bitwise the weights of the run that did not"
  echo "  (params_sha256=$faulted)"
  grep -h '^\[rank0\]:final:' build/runs/fashion_mnist_mlp.log | sed 's/^\[rank0\]://'
else
  echo "main job: the weights differ: faulted ${faulted:-none}, uninterrupted ${clean:-none}" >&2
  exit 1
fi
