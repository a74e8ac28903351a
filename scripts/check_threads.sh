#!/usr/bin/env bash
# The thread checks, one clang build for both (build-tsan/, torch off):
#   1. clang's -Wthread-safety as errors (cmake/threads.cmake): the
#      ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations must hold;
#   2. ThreadSanitizer: the service, daemon, agent, CLI, snapshot-area and
#      trainer-core (checkpoint persister) unit tests run instrumented, and any race report fails them.
# Exits non-zero on a broken build, a failing test or a race report.
#
#   scripts/check_threads.sh            # build + run
#   ELASTRUN_TSAN_BUILD_DIR=/tmp/t scripts/check_threads.sh
#
# Debian's Abseil, gRPC and protobuf are not instrumented: tests/tsan/absl_sync.cc
# tells TSan about absl::Mutex, and tests/tsan/tsan.supp lists what is left
# inside those libraries (each entry says why it is not our race).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ELASTRUN_TSAN_BUILD_DIR:-$root/build-tsan}"
jobs="${ELASTRUN_BUILD_JOBS:-2}"
start=$SECONDS

# Unit tests of the threaded parts (the e2e tests need torch), and the
# binaries, so that their main.cc files pass the thread-safety analysis too.
# tsan_canary_test checks the TSan set-up itself: a race is reported, and
# Abseil's locks are not taken for races.
TESTS=(tsan_canary_test common_test tls_test auth_test metrics_test flags_test rendezvous_core_test
       rendezvous_service_test rendezvous_coordinator_test rendezvous_server_test
       rendezvous_observe_test rendezvous_flags_test
       agent_test agent_process_test cgroup_test runner_test daemon_test daemon_flags_test cred_socket_test cli_test
       worker_snapshot_test trainer_core_test)
BINARIES=(elastrun-rendezvous elastrund elastrun)

fail() { echo "check_threads: $*" >&2; exit 1; }

bash "$root/scripts/setup.sh"
command -v clang++ >/dev/null ||
  fail "clang++ not found; scripts/setup.sh installs clang (Debian package clang)"
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'int main() { return 0; }' >"$probe/probe.cc"
clang++ -fsanitize=thread "$probe/probe.cc" -o "$probe/probe" >"$probe/log" 2>&1 ||
  { cat "$probe/log" >&2
    fail "clang cannot build a -fsanitize=thread program; its runtime comes" \
         "with libclang-rt-14-dev (scripts/setup.sh installs it)"; }
# clang 14's TSan cannot map its shadow memory when the kernel randomizes
# mmap with more bits than it knows ("unexpected memory mapping"); then the
# tests (and the test discovery at build time) run with ASLR off.
run=()
if ! "$probe/probe" >>"$probe/log" 2>&1; then
  setarch "$(uname -m)" -R "$probe/probe" >>"$probe/log" 2>&1 ||
    { cat "$probe/log" >&2; fail "a -fsanitize=thread program does not run here"; }
  echo "check_threads: TSan needs ASLR off on this kernel; running under setarch -R"
  run=(setarch "$(uname -m)" -R)
fi

mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DELASTRUN_WITH_TORCH=OFF -DELASTRUN_TSAN=ON \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; fail "configure failed"; }
"${run[@]}" ninja -C "$build" -j "$jobs" "${TESTS[@]}" "${BINARIES[@]}"
built=$SECONDS
echo "check_threads: clang build (thread-safety analysis + TSan) took $((built - start)) s"

# halt_on_error=0: every race of a test is printed, and the test still fails
# (TSan's exit code). Tests not built here (config, e2e) are left out.
export TSAN_OPTIONS="suppressions=$root/tests/tsan/tsan.supp second_deadlock_stack=1 halt_on_error=0 ${TSAN_OPTIONS:-}"
status=0
"${run[@]}" ctest --test-dir "$build" --output-on-failure -j "${ELASTRUN_TEST_JOBS:-2}" --timeout 600 \
  -E '_NOT_BUILT' -LE e2e || status=$?
echo "check_threads: TSan tests took $((SECONDS - built)) s (all: $((SECONDS - start)) s)"
exit $status
