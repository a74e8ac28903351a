#!/usr/bin/env bash
# Usage: device_kit_test.sh SOURCE_DIR WORK_DIR
#
# scripts/device_kit.sh as a GPU machine would use it: the kit is made into
# WORK_DIR/kit (under 64 MiB), then the torch-free tree is configured against
# the kit alone with its build.sh and elastrun-rendezvous is built (it links
# gRPC, protobuf, Abseil, glog, SQLite and OpenSSL; the three programs
# together take about five minutes on two cores without ccache hits, this one
# about two; ELASTRUN_DEVICE_KIT_TARGETS names others). Checks that CMake found every dependency in the kit, that
# protoc and grpc_cpp_plugin came from it, and that the binaries load the
# kit's libraries first (RPATH) and run. Exit 77 (skip) when the Debian
# packages can be had neither from apt's cache nor by apt-get download.
#
# WORK_DIR stays the same between runs (it lives in the build tree) so that
# ccache, which hashes include paths, hits on a second run.
set -uo pipefail

SRC=$(cd "$1" && pwd)
WORK=$2
KIT=$WORK/kit
BUILD=$WORK/build

fail() { echo "FAIL: $*" >&2; exit 1; }

for tool in dpkg-deb dpkg-query apt-get readelf ldd; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool missing (not a Debian system)"; exit 77; }
done

mkdir -p "$WORK"
start=$SECONDS
bash "$SRC/scripts/device_kit.sh" "$KIT"
rc=$?
if [ $rc -eq 75 ]; then
  echo "SKIP: the Debian packages are neither in /var/cache/apt/archives nor downloadable"
  exit 77
fi
[ $rc -eq 0 ] || fail "device_kit.sh exited $rc"
echo "kit made in $((SECONDS - start)) s"

size=$(du -sb "$KIT" | cut -f1)
[ "$size" -lt $((64 * 1024 * 1024)) ] || fail "kit is $size bytes, over 64 MiB"
[ -x "$KIT/build.sh" ] && [ -s "$KIT/README" ] || fail "build.sh or README missing"
[ -z "$(find "$KIT/usr/share" -path '*/doc/*' -o -path '*/man/*' | head -n1)" ] \
  || fail "documentation left in the kit"

# A fresh configure each time: the cache must show this kit, not a previous one.
rm -rf "$BUILD"
start=$SECONDS
read -ra targets <<<"${ELASTRUN_DEVICE_KIT_TARGETS:-elastrun-rendezvous}"
"$KIT/build.sh" "$SRC" "$BUILD" OFF -j1 "${targets[@]}" \
  >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; fail "build against the kit failed"; }
echo "configured and built against the kit in $((SECONDS - start)) s"

# What CMake found: every dependency's config, library, header folder and
# program inside the kit.
cache=$BUILD/CMakeCache.txt
for var in absl_DIR gRPC_DIR glog_DIR gflags_DIR yaml-cpp_DIR nlohmann_json_DIR GTest_DIR \
           Protobuf_PROTOC_EXECUTABLE Protobuf_INCLUDE_DIR Protobuf_LIBRARY_RELEASE \
           SQLite3_LIBRARY SQLite3_INCLUDE_DIR OPENSSL_CRYPTO_LIBRARY OPENSSL_INCLUDE_DIR \
           ZLIB_INCLUDE_DIR CLI11_INCLUDE_DIR; do
  value=$(grep -m1 "^$var:" "$cache" | cut -d= -f2-)
  case "$value" in
    "$KIT"/*) ;;
    *) fail "$var is '$value', not in the kit" ;;
  esac
done
grep -q -- "--plugin=protoc-gen-grpc=$KIT/usr/bin/grpc_cpp_plugin" "$BUILD/build.ninja" \
  || fail "grpc_cpp_plugin not run from the kit"
if grep -oE -- '-(I|isystem |L)/usr/(local/)?(include|lib)[^ ]*' "$BUILD/build.ninja" | grep -q .; then
  fail "the build names the system's headers or libraries"
fi

# The binaries: RPATH names the kit's libraries (no empty entry, which would
# mean the current folder), every library but the C/C++ runtime loads from
# the kit, and they run from another folder.
libdir=$(ls -d "$KIT"/usr/lib/*-linux-gnu | head -n1)
runtime='^(/[^ ]*/)?(linux-vdso|ld-linux[-a-z0-9_]*|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so'
for exe in "${targets[@]}"; do
  bin=$BUILD/bin/$exe
  [ -x "$bin" ] || fail "$exe not built"
  rpath=$(readelf -d "$bin" | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  [ "$rpath" = "$libdir" ] || fail "$exe RPATH is '$rpath', want '$libdir'"
  deps=$(cd / && ldd "$bin") || fail "ldd $exe failed"
  ! grep -q "not found" <<<"$deps" || fail "$exe: libraries not found: $deps"
  outside=$(awk '{print $1, $3}' <<<"$deps" | grep -vE "$runtime" | grep -v " $KIT/" || true)
  [ -z "$outside" ] || fail "$exe loads these from outside the kit: $outside"
  grep -qF "libgrpc++.so.1.51 => $libdir/" <<<"$deps" || fail "$exe does not load the kit's gRPC"
  version=$(cd / && "$bin" --version) || fail "$exe --version failed"
  case "$version" in
    "$exe "[0-9]*) ;;
    *) fail "$exe --version printed '$version'" ;;
  esac
done
echo "PASS"
