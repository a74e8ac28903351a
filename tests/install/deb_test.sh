#!/usr/bin/env bash
# The .deb, as a user gets it (issue 12):
#   1. cpack builds it from this build tree; its control data (name,
#      version, architecture, Depends, conffiles) is checked, and apt
#      simulates installing it on a system with nothing installed;
#   2. it is unpacked (dpkg -x) into a fresh root: the files are where the
#      README says, every program finds its libraries, `elastrun --version`,
#      `elastrund --help`, the man pages and the bash completion work;
#   3. in a private mount namespace the unpacked /usr is laid over this
#      machine's /usr (overlayfs, read-only; nothing of the machine changes),
#      so the package sits at its real paths, as after `apt install`: a
#      service and two daemons from /usr/bin run the installed job specs as
#      written (hello; with LibTorch: the test worker and the MLP trainer),
#      workers find the Python helper, and a C++ worker is built with
#      find_package(elastrun) and run with `elastrun run`.
#
#   deb_test.sh BUILD_DIR VERSION SOURCE_DIR
#
# Exits 77 (ctest: skipped) with a line saying why when a tool is missing or
# the overlay cannot be mounted (not root); then part 3 did not run.
set -euo pipefail
# In pipes, grep without -q: -q stops reading at the first match, and the
# writer's SIGPIPE would then fail the pipeline under pipefail.

if [ "${1:-}" = --inside ]; then
  shift
  inside=1
else
  inside=0
fi
build=$(cd "$1" && pwd)
version=$2
source_dir=$(cd "$3" && pwd)

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
log() { echo "== $*"; }

# Waits up to $1 seconds for the command after it to succeed; polls every
# 0.1 s (a shell has no event to wait on for a file's content).
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}

have_torch() { [ -x /usr/bin/elastrun-train ]; }

# ---------------------------------------------------------------------------
# Part 3, run by part 2 through unshare: the package at /usr.
inside_namespace() {
  local tmp=$1
  [ "$(command -v elastrun)" = /usr/bin/elastrun ] || fail "elastrun is not /usr/bin/elastrun"
  local jobs=/usr/share/elastrun/configs/jobs
  pids=()
  trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done;
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done' EXIT

  install -m 0600 /dev/null "$tmp/token"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/token"
  export ELASTRUN_TOKEN_FILE=$tmp/token
  unset ELASTRUN_TOKEN ELASTRUN_RENDEZVOUS ELASTRUN_CRED_SOCKET

  log "service and two daemons from /usr/bin"
  elastrun-rendezvous --listen 127.0.0.1:0 --state-dir "$tmp/service" \
    --token-file "$tmp/token" > "$tmp/service.out" 2>&1 &
  pids+=($!)
  wait_for 30 grep -q "^listening on " "$tmp/service.out" ||
    fail "the service did not start: $(cat "$tmp/service.out")"
  export ELASTRUN_RENDEZVOUS
  ELASTRUN_RENDEZVOUS=$(sed -n 's/^listening on //p' "$tmp/service.out" | head -1)
  for n in a b; do
    elastrund --rendezvous "$ELASTRUN_RENDEZVOUS" --node-id "node-$n" --slots 2 \
      --state-dir "$tmp/state-$n" --cred-socket none --shutdown-timeout 5s \
      --token-file "$tmp/token" > "$tmp/daemon-$n.out" 2>&1 &
    pids+=($!)
  done
  nodes_up() { [ "$(elastrun nodes 2>/dev/null | grep -c ALIVE)" -eq 2 ]; }
  wait_for 30 nodes_up || fail "daemons did not register: $(cat "$tmp"/daemon-*.out)"

  # Jobs run in the submitter's folder, as a user's would (not the checkout).
  mkdir -p "$tmp/work"
  cd "$tmp/work"

  # run_spec SPEC TIMEOUT [OVERRIDES...]: submits, waits, prints the job id.
  run_spec() {
    local spec=$1 timeout=$2; shift 2
    local job
    job=$(elastrun submit "$spec" "$@") || fail "submit $spec refused"
    if ! elastrun wait "$job" --timeout "$timeout" > "$tmp/wait.out"; then
      elastrun status "$job" >&2 || true
      elastrun logs "$job" 2>&1 | tail -30 >&2 || true
      fail "job $job of $spec did not succeed: $(cat "$tmp/wait.out")"
    fi
    echo "$job"
  }

  log "hello.yaml as written"
  local t0=$SECONDS job
  job=$(run_spec $jobs/hello.yaml 60s)
  elastrun logs "$job" > "$tmp/hello.log"
  for r in 0 1; do
    grep -q "hello from rank $r of 2" "$tmp/hello.log" ||
      fail "no line of rank $r in the logs of $job: $(cat "$tmp/hello.log")"
  done
  echo "hello: $((SECONDS - t0)) s"

  log "the workers' Python helper is the installed one"
  job=$(elastrun submit --name helper -- /usr/bin/python3 -c \
        'import elastrun; print("helper at", elastrun.__file__)') || fail "submit refused"
  elastrun wait "$job" --timeout 60s > /dev/null || fail "helper job $job failed"
  elastrun logs "$job" | grep "helper at /usr/share/elastrun/python/elastrun/__init__.py" > /dev/null ||
    fail "workers did not import the installed helper: $(elastrun logs "$job")"

  log "find_package(elastrun): a C++ worker built against the package"
  t0=$SECONDS
  cmake -S "$source_dir/tests/install/consumer" -B "$tmp/consumer" \
    -DCMAKE_BUILD_TYPE=Release > "$tmp/consumer.log" 2>&1 ||
    fail "configuring the consumer failed: $(tail -30 "$tmp/consumer.log")"
  cmake --build "$tmp/consumer" >> "$tmp/consumer.log" 2>&1 ||
    fail "building the consumer failed: $(tail -30 "$tmp/consumer.log")"
  elastrun run --nproc-per-node 2 "$tmp/consumer/consumer_worker" > "$tmp/run.out" 2>&1 ||
    fail "elastrun run of the consumer failed: $(cat "$tmp/run.out")"
  local want_sum=1  # 0 + 1 through the Gloo all-reduce
  for r in 0 1; do
    if ! have_torch; then want_sum=$r; fi  # torch-free: the rank itself
    grep -q "consumer rank $r of 2: sum $want_sum" "$tmp/run.out" ||
      fail "no line of rank $r: $(cat "$tmp/run.out")"
  done
  echo "consumer: $((SECONDS - t0)) s"

  if ! have_torch; then
    echo "SKIP (part): built without LibTorch: no elastrun-train, no test worker;" \
         "the fashion_mnist_mlp and test_worker job specs are not installed"
    [ ! -e $jobs/fashion_mnist_mlp.yaml ] || fail "MLP spec installed without its trainer"
    return 0
  fi

  log "test_worker.yaml as written (2 nodes, one failure and one restart)"
  t0=$SECONDS
  job=$(run_spec $jobs/test_worker.yaml 120s)
  elastrun status "$job" | grep "restarts: *1 of 2" > /dev/null ||
    fail "expected one restart: $(elastrun status "$job")"
  echo "test worker: $((SECONDS - t0)) s"

  if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    echo "SKIP (part): Debian's dataset-fashion-mnist is not installed:" \
         "the fashion_mnist_mlp job spec was not run"
    return 0
  fi
  log "fashion_mnist_mlp.yaml as written"
  t0=$SECONDS
  job=$(run_spec $jobs/fashion_mnist_mlp.yaml 300s)
  elastrun logs "$job" | grep "final: epoch=" > /dev/null ||
    fail "the trainer did not finish: $(elastrun logs "$job" | tail -20)"
  ls "$tmp"/work/runs/fashion_mnist_mlp/* > /dev/null ||
    fail "no run folder under the submitter's folder"
  echo "mlp: $((SECONDS - t0)) s"
}

if [ $inside = 1 ]; then
  inside_namespace "$4"
  echo "PASS (installed system)"
  exit 0
fi

# ---------------------------------------------------------------------------
# Parts 1 and 2.
for tool in cpack dpkg-deb dpkg-shlibdeps file; do
  command -v $tool > /dev/null ||
    skip "$tool is missing (Debian's cmake, dpkg-dev and file: scripts/setup.sh)"
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/elastrun-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
torch=0
[ -x "$build/bin/elastrun-train" ] && torch=1

log "cpack -G DEB from $build"
t0=$SECONDS
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" > "$tmp/cpack.log" 2>&1 ||
  fail "cpack failed: $(tail -30 "$tmp/cpack.log")"
deb=$(ls "$tmp"/pkg/elastrun_*.deb)
echo "built $(basename "$deb") in $((SECONDS - t0)) s"
[ "$(basename "$deb")" = "elastrun_${version}_$(dpkg --print-architecture).deb" ] ||
  fail "unexpected file name $(basename "$deb")"

log "control data"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = elastrun ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), want $version"
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] || fail "Architecture"
depends=$(field Depends)
for lib in libc6 libgrpc++ libprotobuf libabsl libsqlite3 libssl3 libyaml-cpp; do
  [[ $depends == *"$lib"* ]] || fail "Depends lacks $lib: $depends"
done
if [ $torch = 1 ]; then
  [[ $depends == *libtorch* ]] || fail "Depends lacks libtorch: $depends"
fi
# Every file under /etc, and nothing else, is a conffile.
dpkg-deb -e "$deb" "$tmp/control"
etc_files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sed -n 's|^\./etc/|/etc/|p' | sort)
conffiles=$(sort "$tmp/control/conffiles" 2>/dev/null || true)
[ "$etc_files" = "$conffiles" ] || fail "conffiles [$conffiles] are not the /etc files [$etc_files]"

# The Depends resolve on a Debian with nothing installed: apt simulates the
# install against an empty dpkg status, so every dependency (and theirs)
# must come from the archive apt knows, as on a fresh Debian 12.
if command -v apt-get > /dev/null && [ -n "$(ls /var/lib/apt/lists/*_Packages* 2> /dev/null)" ]; then
  log "apt install simulated on an empty system"
  : > "$tmp/empty-status"
  apt-get install -s --no-install-recommends -o Dir::State::status="$tmp/empty-status" \
    "$deb" > "$tmp/apt.log" 2>&1 || fail "apt cannot install the package: $(tail -20 "$tmp/apt.log")"
  grep -q '^Inst elastrun ' "$tmp/apt.log" || fail "apt would not install elastrun: $(tail -20 "$tmp/apt.log")"
  echo "apt would install $(grep -c '^Inst ' "$tmp/apt.log") packages"
else
  echo "skipping the simulated apt install: no apt package lists (apt-get update)"
fi

log "dpkg -x into a fresh root"
root=$tmp/root
dpkg -x "$deb" "$root"
programs="elastrun elastrund elastrun-rendezvous"
[ $torch = 1 ] && programs="$programs elastrun-train"
for f in share/elastrun/configs/jobs/hello.yaml share/elastrun/configs/fashion_mnist_mlp.yaml \
         share/elastrun/configs/base/fashion_mnist.yaml \
         share/elastrun/python/elastrun/__init__.py lib/cmake/elastrun/elastrunConfig.cmake \
         include/elastrun/worker/env.h share/bash-completion/completions/elastrun; do
  [ -f "$root/usr/$f" ] || fail "the package has no /usr/$f"
done
for p in $programs; do
  [ -x "$root/usr/bin/$p" ] || fail "the package has no /usr/bin/$p"
  [ -f "$root/usr/share/man/man1/$p.1.gz" ] || fail "no man page for $p"
  if ldd "$root/usr/bin/$p" | grep "not found"; then fail "$p misses libraries"; fi
done
if [ $torch = 1 ]; then
  [ -x "$root/usr/libexec/elastrun/elastrun-test-worker" ] || fail "no test worker"
  grep -q -- "- /usr/share/elastrun/configs/fashion_mnist_mlp.yaml" \
    "$root/usr/share/elastrun/configs/jobs/fashion_mnist_mlp.yaml" ||
    fail "the installed MLP spec does not name the installed config"
fi

"$root/usr/bin/elastrun" --version | grep "^elastrun $version" > /dev/null ||
  fail "elastrun --version: $("$root/usr/bin/elastrun" --version)"
"$root/usr/bin/elastrund" --help | grep -- "--rendezvous" > /dev/null || fail "elastrund --help"
"$root/usr/bin/elastrun-rendezvous" --help | grep -- "--listen" > /dev/null || fail "elastrun-rendezvous --help"

# The man page of elastrun holds every command; roff requests are escaped.
zcat "$root/usr/share/man/man1/elastrun.1.gz" > "$tmp/elastrun.1"
for c in run submit status list nodes cancel wait logs events; do
  grep -q "^\.SS elastrun $c$" "$tmp/elastrun.1" || fail "man page lacks 'elastrun $c'"
done
if command -v man > /dev/null; then
  MANWIDTH=80 man --warnings -l "$tmp/elastrun.1" > "$tmp/man.txt" 2> "$tmp/man.err" ||
    fail "man -l failed: $(cat "$tmp/man.err")"
  [ ! -s "$tmp/man.err" ] || fail "man warnings: $(cat "$tmp/man.err")"
  grep -q -- "--nproc-per-node" "$tmp/man.txt" || fail "rendered page lacks --nproc-per-node"
fi

log "bash completion"
complete_words() {
  PATH="$root/usr/bin:$PATH" bash -c '
    source "$1"; shift
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _elastrun_complete
    echo "${COMPREPLY[*]}"' _ "$root/usr/share/bash-completion/completions/elastrun" "$@"
}
[ "$(complete_words elastrun su)" = submit ] || fail "elastrun su<TAB>: $(complete_words elastrun su)"
[[ " $(complete_words elastrun run --nproc) " == *" --nproc-per-node "* ]] ||
  fail "elastrun run --nproc<TAB>: $(complete_words elastrun run --nproc)"
[[ " $(complete_words elastrun submit --max) " == *" --max-restarts "* ]] ||
  fail "elastrun submit --max<TAB>"
[ "$(complete_words elastrund --slo)" = --slots ] || fail "elastrund --slo<TAB>"

log "the package at /usr (overlay in a private mount namespace)"
command -v unshare > /dev/null || skip "unshare is missing (util-linux): part 3 not run"
if ! unshare --mount --propagation private \
     sh -c "mount -t overlay overlay -o lowerdir=$root/usr:/usr /usr" 2> "$tmp/mount.err"; then
  skip "cannot lay the package over /usr ($(cat "$tmp/mount.err")); needs root" \
       "and overlayfs: part 3 (the installed system) not run"
fi
mkdir -p "$tmp/inside"
unshare --mount --propagation private bash -c '
  set -e
  mount -t overlay overlay -o lowerdir="$1/usr":/usr /usr
  shift
  exec bash "$@"' _ "$root" "$0" --inside "$build" "$version" "$source_dir" "$tmp/inside"
