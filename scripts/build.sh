#!/usr/bin/env bash
# Installs what is missing, then configures and builds elastrun into build/.
# Extra arguments go to CMake (for example -DCMAKE_BUILD_TYPE=Release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja "$@" >/dev/null
# Each LibTorch translation unit needs ~1 GB; two jobs fit every machine we build on.
ninja -C build -j "${ELASTRUN_BUILD_JOBS:-2}"
