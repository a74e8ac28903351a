#!/usr/bin/env bash
# Installs every Debian package elastrun needs (idempotent, non-interactive):
# skips packages that are already present, so a second run costs a second.
set -euo pipefail

PACKAGES=(
  # toolchain (clang + its sanitizer runtime for the config fuzzer)
  build-essential cmake ninja-build ccache pkg-config git clang libclang-rt-14-dev
  # LibTorch (CPU, c10d, Gloo) and a BLAS that honours torch::set_num_threads
  libtorch-dev libgloo-dev libopenblas0-openmp libgoogle-glog-dev
  # gRPC / protobuf / Abseil
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # tests, configs, state
  libcli11-dev libgtest-dev libgmock-dev libyaml-cpp-dev libsqlite3-dev zlib1g-dev nlohmann-json3-dev libssl-dev
  # tcmalloc: the rendezvous service's allocator (optional at build time)
  libtcmalloc-minimal4
  # XXH3, header-only: the trainer's content digest of a training state
  libxxhash-dev
  # the detector: image decoding and encoding (stb_image, stb_image_write)
  libstb-dev
  # a second JPEG decoder (libjpeg-turbo) that the data tests check ours against
  libjpeg-dev
  # reference PyTorch (tests run real torchrun-style scripts; benches compare);
  # torchvision's box ops and NMS are the detector's references
  python3 python3-torch python3-torchvision
  # Optuna's TPE: the tuning anchor of bench/evolve_bench.py
  python3-optuna
  # data for the trainer
  dataset-fashion-mnist
  # TLS tests make their certificates with the openssl program
  openssl
  # network namespaces for multi-host tests
  iproute2 procps
  # eu-stack: native stacks of a worker declared hung, into its log
  elfutils
  # a real Prometheus scrapes the service's --metrics-listen in a test
  prometheus
  # systemd-analyze verifies the units in deploy/systemd (deploy/systemd_test.py)
  systemd
  # etcd (issue 24): a real etcd for the HA tests and benches, and the API
  # definitions (.proto) that the service's own etcd client is generated from
  etcd-server etcd-client golang-etcd-server-dev
  # the .deb (cpack -G DEB): dpkg-shlibdeps computes its Depends; CPack finds
  # the programs to give it with `file`
  dpkg-dev file
  # Slurm (slurmctld, slurmd, sbatch, srun): deploy/slurm/'s scripts run on a real one in a test
  slurm-wlm
  # munge: Slurm's authentication (that test starts its own munged, key and socket)
  munge
)
# kubectl checks the manifests in deploy/kubernetes (deploy/kubernetes_test.py):
# Debian's kubernetes-client, unless another package's kubectl is installed
# (both ship /usr/bin/kubectl).
command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
