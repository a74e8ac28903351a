#include "worker/error_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace elastrun::worker {
namespace {

using nlohmann::json;

// A JSON string literal escaped as Python's json.dumps(ensure_ascii=True):
// \" \\ \b \f \n \r \t, other controls and all non-ASCII as lowercase
// \uXXXX (surrogate pairs above the BMP). nlohmann's ensure_ascii output is
// identical to that.
std::string Quote(const std::string& s) {
  return json(s).dump(-1, ' ', /*ensure_ascii=*/true,
                      json::error_handler_t::replace);
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int err = errno;
  std::string message =
      absl::StrCat("cannot ", what, " error file ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "not a torchelastic error file: ", what,
      "; expected {\"message\": {\"message\": ..., \"extraInfo\": "
      "{\"py_callstack\": ..., \"timestamp\": ...}}} or {\"message\": \"...\"}"));
}

// Python's int(x) for the JSON types torchelastic meets: integers, floats
// (truncated) and numeric strings.
absl::StatusOr<int64_t> ParseTimestamp(const json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
  } else if (value.is_string()) {
    absl::StatusOr<int64_t> v = ParseInt(value.get<std::string>(), "timestamp");
    if (v.ok()) return *v;
  }
  return Invalid(absl::StrCat("\"timestamp\" is ", value.dump(), ", not a whole number"));
}

// Reads an optional string member; wrong type is an error.
absl::Status GetString(const json& object, const char* key, std::string* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) {
    return Invalid(absl::StrCat("\"", key, "\" is a ", it->type_name(), ", not a string"));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

}  // namespace

std::string FormatErrorFile(const ErrorRecord& record) {
  // Assembled by hand: nlohmann sorts keys and omits the spaces Python puts
  // after ',' and ':', and we want files identical to Python's.
  return absl::StrCat("{\"message\": {\"message\": ", Quote(record.message),
                      ", \"extraInfo\": {\"py_callstack\": ", Quote(record.traceback),
                      ", \"timestamp\": \"", record.timestamp, "\"}}}");
}

absl::Status WriteErrorFile(const std::string& path, const ErrorRecord& record) {
  const std::string contents = FormatErrorFile(record);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = ErrnoError("write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    absl::Status status = ErrnoError("sync", tmp);
    ::unlink(tmp.c_str());
    return status;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("rename into place", path);
    ::unlink(tmp.c_str());
    return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<ErrorRecord> ParseErrorFile(absl::string_view contents) {
  const json doc = json::parse(contents.begin(), contents.end(), nullptr,
                               /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Invalid("the contents are not valid JSON");
  if (!doc.is_object()) return Invalid(absl::StrCat("the top level is a ", doc.type_name()));
  auto message = doc.find("message");
  if (message == doc.end()) return Invalid("there is no \"message\" field");

  ErrorRecord record;
  if (message->is_string()) {
    // The plain format: {"message": "...", "timestamp": N}.
    record.message = message->get<std::string>();
    auto ts = doc.find("timestamp");
    if (ts != doc.end()) {
      absl::StatusOr<int64_t> t = ParseTimestamp(*ts);
      if (!t.ok()) return t.status();
      record.timestamp = *t;
    }
    return record;
  }
  if (!message->is_object()) {
    return Invalid(absl::StrCat("\"message\" is a ", message->type_name(),
                                ", not a string or an object"));
  }
  if (absl::Status s = GetString(*message, "message", &record.message); !s.ok()) return s;
  auto extra = message->find("extraInfo");
  if (extra != message->end() && !extra->is_null()) {
    if (!extra->is_object()) {
      return Invalid(absl::StrCat("\"extraInfo\" is a ", extra->type_name(), ", not an object"));
    }
    if (absl::Status s = GetString(*extra, "py_callstack", &record.traceback); !s.ok()) {
      return s;
    }
    auto ts = extra->find("timestamp");
    if (ts != extra->end()) {
      absl::StatusOr<int64_t> t = ParseTimestamp(*ts);
      if (!t.ok()) return t.status();
      record.timestamp = *t;
    }
  }
  auto code = message->find("errorCode");
  if (code != message->end() && code->is_number_integer()) {
    const int64_t c = code->get<int64_t>();
    if (c >= INT32_MIN && c <= INT32_MAX) record.error_code = static_cast<int>(c);
  }
  return record;
}

absl::StatusOr<ErrorRecord> ReadErrorFile(const std::string& path) {
  // The folder belongs to the worker's user, read here by a root daemon: a
  // link is never followed, a FIFO never blocks.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return ErrnoError("open", path);
  std::string contents;
  char buffer[64 << 10];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = ErrnoError("read", path);
      ::close(fd);
      return status;
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(contents.size()) > kMaxErrorFileBytes) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "error file ", path, " is larger than ", kMaxErrorFileBytes,
          " bytes; not a torchelastic error file"));
    }
  }
  ::close(fd);
  absl::StatusOr<ErrorRecord> record = ParseErrorFile(contents);
  if (!record.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", record.status().message()));
  }
  return record;
}

}  // namespace elastrun::worker
