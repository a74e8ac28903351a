#!/usr/bin/env bash
# The test command: installs, builds, and runs every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# The config fuzzer, bounded: clang + ASan/UBSan/libFuzzer, no crash, hang or leak.
bash common/config/run_fuzzer.sh "${ELASTRUN_FUZZ_SECONDS:-60}"
# Every test; ctest's summary closes the output.
cd build
ctest --output-on-failure -j "${ELASTRUN_TEST_JOBS:-2}" --timeout 600
