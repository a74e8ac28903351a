#include "trainer/temp_files.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace elastrun::trainer {
namespace {

constexpr absl::string_view kKinds[] = {".tmp.", ".link."};

std::string MakeHostToken() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  std::string host;
  for (const char* c = name; *c != '\0' && host.size() < 32; ++c) {
    const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || *c == '_' || *c == '-';
    host.push_back(ok ? *c : '_');
  }
  if (host.empty()) host = "host";
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  const unsigned long long pid_ns =
      ::stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<unsigned long long>(ns.st_ino) : 0;
  const size_t h = std::hash<std::string>()(absl::StrCat(boot, "/", pid_ns));
  return absl::StrFormat("%s~%08x", host, static_cast<uint32_t>(h));
}

// The writer of temporary `name` ("...<kind><host>-<pid>-<random>"): its
// host token and pid; false for any other name.
bool ParseWriter(absl::string_view name, std::string* host, pid_t* pid) {
  for (absl::string_view kind : kKinds) {
    const size_t at = name.rfind(kind);
    if (at == absl::string_view::npos) continue;
    const absl::string_view writer = name.substr(at + kind.size());
    const size_t r = writer.rfind('-');
    if (r == absl::string_view::npos || r == 0) return false;
    const size_t p = writer.rfind('-', r - 1);
    if (p == absl::string_view::npos || p == 0) return false;
    int value = 0;
    if (!absl::SimpleAtoi(writer.substr(p + 1, r - p - 1), &value) || value <= 0) return false;
    *host = std::string(writer.substr(0, p));
    *pid = value;
    return true;
  }
  return false;
}

bool IsTemporary(absl::string_view name) {
  for (absl::string_view kind : kKinds) {
    if (name.find(kind) != absl::string_view::npos) return true;
  }
  return false;
}

}  // namespace

const std::string& HostToken() {
  static const std::string* token = new std::string(MakeHostToken());
  return *token;
}

std::string TemporaryName(const std::string& path, absl::string_view kind) {
  thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrFormat("%s.%s.%s-%d-%016x", path, kind, HostToken(), ::getpid(), random());
}

std::vector<std::string> RemoveStaleTemporaries(const std::string& dir,
                                                absl::Duration max_age) {
  std::vector<std::string> removed;
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!IsTemporary(name) || !entry.is_regular_file(ec)) continue;
    std::string host;
    pid_t pid = 0;
    bool stale = false;
    if (ParseWriter(name, &host, &pid) && host == HostToken()) {
      stale = ::kill(pid, 0) != 0 && errno == ESRCH;
    } else {
      const auto modified = std::filesystem::last_write_time(entry.path(), ec);
      stale = !ec && now - modified > std::chrono::nanoseconds(absl::ToInt64Nanoseconds(max_age));
    }
    if (!stale) continue;
    const uintmax_t bytes = entry.file_size(ec);
    if (std::filesystem::remove(entry.path(), ec)) {
      removed.push_back(absl::StrCat(entry.path().string(), " (", ec ? 0 : bytes, " bytes)"));
    }
  }
  return removed;
}

}  // namespace elastrun::trainer
