#!/usr/bin/env bash
# The main job: builds elastrun, then runs a small elastic job on this node
# under `elastrun run`: two C++ workers (c10d TCPStore + Gloo allreduce), one
# of which is killed once mid-run to show the restart (from standby workers
# that were started ahead of time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/bin/elastrun run --nproc-per-node 2 --max-restarts 1 --standby --log-dir build/logs \
  build/bin/elastrun-test-worker --steps 20 --step-ms 50 \
  --fail-rank 1 --fail-mode sigkill --fail-at-step 10
