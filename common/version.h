// The version every binary prints for --version: the project version from
// CMake's project(VERSION ...), when built from a git checkout the commit it
// was configured at, and whether the build has the CUDA path. The definition is generated at configure
// time (cmake/version.cc.in), so a new commit rebuilds one small file, and
// only when CMake runs again.
#ifndef ELASTRUN_COMMON_VERSION_H_
#define ELASTRUN_COMMON_VERSION_H_

#include <string>

namespace elastrun {

// "0.2.0", from project(VERSION ...).
const char* ProjectVersion();

// The short commit hash ("8796fce"), or "" when not built from a checkout.
const char* GitCommit();

// "CUDA off", or "CUDA 12.8, NCCL on" in an ELASTRUN_WITH_CUDA build. A
// configure-time string: the torch-free programs say what the build's
// trainer and worker library can do without linking LibTorch.
const char* BuildFeatures();

// What `BINARY --version` prints: "BINARY 0.2.0 (commit 8796fce; CUDA off)",
// or "BINARY 0.2.0 (CUDA off)" without a commit.
std::string VersionLine(const std::string& binary);

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_VERSION_H_
