#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions are called by name
# Usage: scripts/gpu_check.sh KIT OUT [STEP...]
#
# Issue 13's checks on a GPU machine that has CUDA, CMake, Ninja and pip
# PyTorch and nothing else (no Debian packages, no network): builds elastrun
# against KIT (made by scripts/device_kit.sh on a Debian 12 machine) and pip's
# LibTorch, then runs, step by step:
#   machine   nvidia-smi, torch's version and CUDA
#   build     elastrun, elastrund, elastrun-rendezvous, elastrun-train and the
#             torch tests, in build-gpu/ (kept between calls on a warm machine)
#   version   `elastrun --version` (must say CUDA ..., NCCL on)
#   unit      worker_process_group_test and trainer_test (the GPU tests too)
#   train     the main job's MLP on one GPU under `elastrun run` (synthetic
#             data: the machine has no dataset package), then one rank per
#             GPU of the CNN over NCCL (`--nproc-per-node gpu`), AMP float16
#   bench     bench/gpu_bench.py (both tables)
# Default: every step, in that order. Each step's output goes to
# OUT/<step>.log and one line per step to OUT/summary.txt (step, exit code,
# seconds) as it ends, so a call cut short by a time limit still leaves what
# was done. Exit 0 only if every step asked for passed. TORCH_DIR=DIR (the
# folder of TorchConfig.cmake) builds against another LibTorch than pip's;
# PYTHON names the interpreter (default python3).
set -uo pipefail

if [ $# -lt 2 ]; then
  awk 'NR >= 3 && /^#/ { sub(/^# ?/, ""); print; next } NR >= 3 { exit }' "$0" >&2
  exit 2
fi
KIT=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && OUT=$(cd "$2" && pwd) || exit 2
shift 2
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(machine build version unit train bench)
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$SRC/build-gpu
BIN=$BUILD/bin
PY=${PYTHON:-python3}

run_step() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $(( $(date +%s) - start ))s" | tee -a "$OUT/summary.txt"
  return "$rc"
}

machine() {
  nvidia-smi &&
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpus", torch.cuda.device_count(), "cxx11 abi", torch.compiled_with_cxx11_abi())' &&
    ldd --version | head -n1
}

build() {
  local torch_dir=${TORCH_DIR:-}
  [ -n "$torch_dir" ] ||
    torch_dir=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch
  "$KIT/build.sh" "$SRC" "$BUILD" "$torch_dir" elastrun elastrund elastrun-rendezvous \
    elastrun-train elastrun-test-worker worker_process_group_test trainer_test
}

version() {
  "$BIN/elastrun" --version | tee /dev/stderr | grep -q 'NCCL on'
}

unit() {
  local rc=0
  "$BIN/worker_process_group_test" || rc=1
  "$BIN/trainer_test" --gtest_filter='Device*:Placement*:Autocast*:Ddp*:Train*:StateImage*' ||
    rc=1
  return "$rc"
}

train() {
  local dir rc=0
  dir=$(mktemp -d)
  "$BIN/elastrun" run --nproc-per-node 1 --max-restarts 1 --standby --log-dir "$dir/logs" \
    "$BIN/elastrun-train" --config "$SRC/configs/fashion_mnist_mlp.yaml" data.synthetic=true \
    train.epochs=2 train.device=cuda "train.output_dir=$dir/mlp" || rc=1
  "$BIN/elastrun" run --nproc-per-node gpu --max-restarts 1 --log-dir "$dir/logs" \
    "$BIN/elastrun-train" --config "$SRC/configs/fashion_mnist_cnn.yaml" data.synthetic=true \
    train.epochs=1 train.amp=true "train.output_dir=$dir/cnn" || rc=1
  rm -rf "$dir"
  return "$rc"
}

bench() {
  "$PY" "$SRC/bench/gpu_bench.py" --bin-dir "$BIN" --python "$PY"
}

for step in "${STEPS[@]}"; do
  case $step in
    machine | build | version | unit | train | bench) ;;
    *)
      echo "gpu_check: unknown step '$step' (machine build version unit train bench)" >&2
      exit 2
      ;;
  esac
done
failed=0
for step in "${STEPS[@]}"; do
  run_step "$step" "$step" || failed=1
  # Nothing runs without the binaries.
  if [ "$step" = build ] && [ $failed -ne 0 ]; then break; fi
done
exit $failed
