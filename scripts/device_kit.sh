#!/usr/bin/env bash
# Usage: scripts/device_kit.sh OUT_DIR
#
# Prepares a folder that lets a machine without Debian's -dev packages (a GPU
# machine with CUDA, CMake, Ninja and pip PyTorch, no network) build and run
# elastrun: the headers, CMake configs and shared libraries of every non-torch
# dependency, unpacked from Debian 12 packages into OUT_DIR/usr, trimmed to
# stay under 64 MiB, plus OUT_DIR/build.sh (the cmake + ninja command against
# the kit) and OUT_DIR/README.
#
# Packages come from /var/cache/apt/archives when the installed version is
# there, else from `apt-get download` (no root needed). Exit 75 when a package
# can be had neither way (no network and no cache).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
# The kit replaces OUT_DIR's usr/: never a folder that holds anything else.
if [ "$OUT" = / ] || { [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/build.sh" ]; }; then
  echo "device_kit: $OUT is not empty and not a kit made before; give a new folder" >&2
  exit 2
fi

# What CMakeLists.txt finds (find_package / find_path) and what those configs
# pull in at configure time (glog -> gflags + Unwind, gRPC -> c-ares, re2,
# protobuf, zlib, OpenSSL) or at run time (libunwind8 -> liblzma5). glibc and
# libstdc++ are left to the machine.
PACKAGES=(
  libabsl-dev libabsl20220623
  libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
  libc-ares-dev libc-ares2 libre2-dev libre2-9
  libssl-dev libssl3 zlib1g-dev zlib1g
  libyaml-cpp-dev libyaml-cpp0.7
  libgoogle-glog-dev libgoogle-glog0v6 libgflags-dev libgflags2.2
  libunwind-dev libunwind8 liblzma5
  libsqlite3-dev libsqlite3-0
  nlohmann-json3-dev libcli11-dev
  # the service's allocator (elastrun-rendezvous links it when found)
  libtcmalloc-minimal4
  # the detector: image decoding (stb), JPEG for its tests, and the state
  # digest (xxhash)
  libstb-dev libstb0 libjpeg62-turbo-dev libjpeg62-turbo libjpeg-dev libxxhash-dev libxxhash0
  # the tests (ELASTRUN_BUILD_TESTS): static libraries only (googletest: the
  # sources libgtest-dev depends on, dropped below)
  libgtest-dev libgmock-dev googletest
)

DEBS="$OUT/.debs"
rm -rf "$DEBS" "${OUT:?}/usr" "${OUT:?}/lib" "${OUT:?}/etc"
mkdir -p "$DEBS"

# The installed version from the cache (headers match this machine's build),
# else whatever apt-get download fetches.
fetch() {
  local p=$1 v f
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
  v=${v#*:}  # the epoch is not part of the file name
  if [ -n "$v" ]; then
    f=$(ls /var/cache/apt/archives/"${p}_${v}"_*.deb 2>/dev/null | head -n1 || true)
    if [ -n "$f" ]; then
      cp "$f" "$DEBS/"
      return 0
    fi
  fi
  (cd "$DEBS" && apt-get download -q "$p" >/dev/null 2>&1)
}

for p in "${PACKAGES[@]}"; do
  if ! fetch "$p"; then
    echo "device_kit: cannot get package $p (no network and not in /var/cache/apt/archives)" >&2
    rm -rf "$DEBS"
    exit 75
  fi
done

for d in "$DEBS"/*.deb; do
  dpkg-deb -x "$d" "$OUT"
done
rm -rf "$DEBS"

# Trim: documentation, man pages, locales, lintian notes; static libraries
# that a shared one replaces, unless a CMake config imports them (gflags'
# config checks that its static target's file exists; gtest/gmock have only
# static ones).
rm -rf "$OUT"/usr/share/{doc,man,locale,lintian,bug,info} "$OUT"/usr/src
ARCH_LIB=$(cd "$OUT/usr/lib" && ls -d *-linux-gnu | head -n1)
LIBDIR="$OUT/usr/lib/$ARCH_LIB"
for a in "$LIBDIR"/*.a; do
  [ -e "${a%.a}.so" ] || continue
  grep -rqF "/$(basename "$a")" "$LIBDIR/cmake" || rm -f "$a"
done
# Debian puts zlib, liblzma and libssl3 under /lib on older layouts.
if [ -d "$OUT/lib/$ARCH_LIB" ]; then
  cp -a "$OUT/lib/$ARCH_LIB"/. "$LIBDIR"/
  rm -rf "${OUT:?}/lib"
fi

# CMake configs and .pc files that name /usr literally point at the system's
# copies: make them name the kit instead.
grep -rlZ --include='*.cmake' --include='*.pc' -e '"/usr/' -e '=/usr' -e ' /usr/' \
  "$OUT/usr" 2>/dev/null | xargs -0 -r sed -i "s#\([\" =;]\)/usr/#\1$OUT/usr/#g"

cat >"$OUT/build.sh" <<'EOF'
#!/usr/bin/env bash
# Usage: build.sh SOURCE_DIR BUILD_DIR [TORCH_DIR|OFF] [ninja targets...]
#   TORCH_DIR: pip PyTorch's CMake folder, e.g.
#     python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'/Torch
#   OFF: a torch-free build.
# Configures and builds elastrun against this kit only: protoc and
# grpc_cpp_plugin run from the kit (LD_LIBRARY_PATH), the binaries find the
# kit's libraries (and LibTorch's) by RPATH: transitive (--disable-new-dtags),
# since the kit's libraries find each other only through it, and set here
# rather than by CMake (whose RPATH here ends in an empty entry, which the
# loader reads as the current folder).
set -euo pipefail
KIT=$(cd "$(dirname "$0")" && pwd)
SRC=$1 BUILD=$2 TORCH=${3:-OFF}
shift $(( $# < 3 ? $# : 3 ))
LIB=$(ls -d "$KIT"/usr/lib/*-linux-gnu | head -n1)
export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$KIT/usr/bin:$PATH"
rpath=$LIB
torch_args=(-DELASTRUN_WITH_TORCH=OFF)
if [ "$TORCH" != OFF ]; then
  TORCH=$(cd "$TORCH" && pwd)
  torch_args=(-DELASTRUN_WITH_TORCH=ON "-DTorch_DIR=$TORCH")
  # LibTorch's folder: torch/lib beside pip's torch/share/cmake/Torch, or
  # the folder holding cmake/Torch (Debian's layout).
  for d in "$TORCH/../../../lib" "$TORCH/../.."; do
    if ls "$d"/libtorch*.so >/dev/null 2>&1; then
      rpath="$rpath:$(cd "$d" && pwd)"
      break
    fi
  done
fi
link_flags="-Wl,--disable-new-dtags -Wl,-rpath,$rpath -Wl,-rpath-link,$LIB"
cmake -S "$SRC" -B "$BUILD" -G Ninja "${torch_args[@]}" \
  "-DCMAKE_PREFIX_PATH=$KIT/usr" \
  "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local" \
  "-DCMAKE_LIBRARY_ARCHITECTURE=$(basename "$LIB")" \
  "-DProtobuf_PROTOC_EXECUTABLE=$KIT/usr/bin/protoc" \
  "-DProtobuf_INCLUDE_DIR=$KIT/usr/include" \
  "-DOPENSSL_ROOT_DIR=$KIT/usr" \
  "-DSQLite3_INCLUDE_DIR=$KIT/usr/include" \
  "-DSQLite3_LIBRARY=$LIB/libsqlite3.so" \
  "-DCLI11_INCLUDE_DIR=$KIT/usr/include" \
  -DCMAKE_SKIP_RPATH=ON \
  "-DCMAKE_EXE_LINKER_FLAGS=$link_flags" "-DCMAKE_SHARED_LINKER_FLAGS=$link_flags"
ninja -C "$BUILD" "$@"
EOF
chmod +x "$OUT/build.sh"

cat >"$OUT/README" <<EOF
elastrun build kit: Debian 12 headers, CMake configs and shared libraries of
elastrun's non-torch dependencies (gRPC, protobuf, Abseil, yaml-cpp, glog,
gflags, SQLite, OpenSSL, zlib, c-ares, re2, nlohmann-json, CLI11, gtest, tcmalloc),
unpacked under usr/. Needs glibc >= 2.36 and libstdc++ from GCC >= 12.

Copy this folder to the machine (any path: build.sh finds itself; the
binaries' RPATH names the kit's lib folder, so keep the kit where it was
when building), then:

  ./build.sh SOURCE_DIR BUILD_DIR \\
    "\$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch" \\
    elastrun elastrund elastrun-rendezvous elastrun-train

Use OFF instead of the Torch folder for a torch-free build.
EOF

size_mib=$(du -sm "$OUT" | cut -f1)
echo "device_kit: $size_mib MiB in $OUT"
# What the GPU machine's file transfer takes (64 MiB in all).
[ "$size_mib" -lt 64 ] || echo "device_kit: warning: over 64 MiB" >&2
