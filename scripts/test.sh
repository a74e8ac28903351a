#!/usr/bin/env bash
# The test command: installs, builds, and runs every test (ctest), then the
# thread checks (clang's thread-safety analysis and the ThreadSanitizer run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# The config fuzzer, bounded: clang + ASan/UBSan/libFuzzer, no crash, hang or leak.
bash common/config/run_fuzzer.sh "${ELASTRUN_FUZZ_SECONDS:-60}"
# Every test; ctest's summary closes this part of the output.
status=0
(cd build && ctest --output-on-failure -j "${ELASTRUN_TEST_JOBS:-2}" --timeout 600) || status=$?
# The thread checks run even when a test above failed, so one run shows both.
bash scripts/check_threads.sh || status=$?
exit $status
