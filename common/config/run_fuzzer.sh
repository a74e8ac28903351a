#!/usr/bin/env bash
# Builds the config fuzzer with clang (ASan + UBSan + libFuzzer) in its own
# build folder and runs it for SECONDS (default 60). Exits non-zero on a
# crash, hang, leak, or a broken build.
#
#   common/config/run_fuzzer.sh 60
#
# The corpus starts from configs/ (each file alone, and the model configs
# with their _base_ files inlined) plus a few override lines; what the
# fuzzer learns stays in build-fuzz/config_fuzz_corpus between runs, and
# crashing inputs land in build-fuzz/config_fuzz_artifacts/.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${ELASTRUN_FUZZ_BUILD_DIR:-$root/build-fuzz}"

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DELASTRUN_WITH_TORCH=OFF -DELASTRUN_BUILD_TESTS=OFF -DELASTRUN_FUZZ=ON \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
ninja -C "$build" config_fuzzer

corpus="$build/config_fuzz_corpus"
artifacts="$build/config_fuzz_artifacts"
mkdir -p "$corpus" "$artifacts"

# Seeds: every config alone...
i=0
while IFS= read -r -d '' f; do
  cp "$f" "$corpus/seed_file_$i.yaml"
  i=$((i + 1))
done < <(find "$root/configs" -name '*.yaml' -print0 | sort -z)
# ...the model configs with their bases as in-memory files f2/f3, plus
# overrides (input format: see config_fuzzer.cc)...
sep=$'\n%%\n'
for model in fashion_mnist_mlp fashion_mnist_cnn; do
  main="$(sed 's|^_base_:.*|_base_: [f2.yaml, f3.yaml]|' "$root/configs/$model.yaml")"
  overrides=$'optimizer.lr0=0.02\nmodel.hidden=[512,256]\n+train.note=\'a b\'\n~train.log_period\ndata.batch_size=${train.epochs}'
  printf '%s%s%s%s%s%s%s' "$main" "$sep" "$overrides" "$sep" \
    "$(cat "$root/configs/base/fashion_mnist.yaml")" "$sep" \
    "$(cat "$root/configs/base/sgd_yolov5.yaml")" >"$corpus/seed_$model.txt"
done
# ...and small inputs that reach the test factories and error paths.
printf 'm: {_target_: Opt, model: {_target_: Lin, in: 2, out: 3}, lr: ${x}}\nx: 0.5\n' \
  >"$corpus/seed_opt.txt"
printf 's:\n  _target_: Seq\n  layers:\n    - {_target_: Lin, in: 1, out: 1}\n  tail: ${s.layers[0]}\n%s+s.extra=1\ns.layers.0.in=4\n' "$sep" \
  >"$corpus/seed_seq.txt"
printf 'a: ${b}\nb: "x\\${c}${d}"\nd: [1, {e: &r [2]}, *r]\n%s~a\n++b=[${d}]\n%s_base_: main.yaml\n' "$sep" "$sep" \
  >"$corpus/seed_cycle.txt"

"$build/bin/config_fuzzer" "$corpus" \
  -dict="$root/common/config/config_fuzzer.dict" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -artifact_prefix="$artifacts/" -print_final_stats=1
