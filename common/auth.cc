#include "common/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/files.h"

namespace elastrun::auth {
namespace {

constexpr size_t kMaxTokenFileBytes = 4096;
constexpr size_t kTokenBytes = 32;

std::string Fix(const std::string& path) {
  return absl::StrCat(
      " (the token file must belong to this user and be readable by it alone: "
      "chmod 600 ",
      path, ")");
}

// The folder part of `path` ("" for a bare name).
std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string HexHmac(absl::string_view key, absl::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac), static_cast<size_t>(len)));
}

// Checks an open token file: regular, ours, owner-only.
absl::Status CheckOpenFile(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file ", path, ": cannot stat: ", strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file ", path, " is not a regular file", Fix(path)));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("token file %s belongs to uid %d, not to this user (uid %d)%s",
                        path, st.st_uid, geteuid(), Fix(path)));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "token file %s is open to group or others (mode %04o); refusing a secret others "
        "may read or change%s",
        path, st.st_mode & 07777, Fix(path)));
  }
  return absl::OkStatus();
}

}  // namespace

Identity Self() {
  Identity id;
  id.uid = geteuid();
  id.gid = getegid();
  id.name = UserName(id.uid);
  return id;
}

std::string UserName(uint32_t uid) {
  std::vector<char> buf(16384);
  struct passwd pw;
  struct passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr && *found->pw_name != '\0' &&
      strpbrk(found->pw_name, ":\n") == nullptr) {
    return found->pw_name;
  }
  return absl::StrCat("uid", uid);
}

std::string DefaultTokenFile(const EnvLookup& env, uid_t euid) {
  if (euid == 0) return "/var/lib/elastrun/token";
  auto get = [&](const char* name) -> std::string {
    if (!env) return "";
    std::optional<std::string> v = env(name);
    return v ? *v : "";
  };
  if (std::string state = get("XDG_STATE_HOME"); !state.empty()) {
    return state + "/elastrun/token";
  }
  if (std::string home = get("HOME"); !home.empty()) {
    return home + "/.local/state/elastrun/token";
  }
  return "";
}

absl::StatusOr<std::string> NamedToken(const EnvLookup& env,
                                       const std::string& token_flag,
                                       const std::string& token_file_flag,
                                       absl::string_view file_flag_name) {
  auto get = [&](const char* name) -> std::string {
    std::optional<std::string> v = env ? env(name) : std::nullopt;
    return v ? std::string(absl::StripAsciiWhitespace(*v)) : "";
  };
  std::string file = token_file_flag;
  std::string from(file_flag_name);
  if (std::string token(absl::StripAsciiWhitespace(token_flag)); !token.empty())
    return token;
  if (file.empty()) {
    if (std::string token = get("ELASTRUN_TOKEN"); !token.empty()) return token;
    file = get("ELASTRUN_TOKEN_FILE");
    from = "$ELASTRUN_TOKEN_FILE";
  }
  if (file.empty()) return std::string();
  absl::StatusOr<std::string> token = ReadTokenFile(file);
  if (!token.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": ", token.status().message()));
  }
  return token;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat lst;
  if (lstat(path.c_str(), &lst) != 0) {
    const int e = errno;
    if (e == ENOENT)
      return absl::NotFoundError(absl::StrCat("token file ", path, " does not exist"));
    if (e == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read the token file ", path, " (permission denied)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("token file ", path, ": ", strerror(e)));
  }
  if (S_ISLNK(lst.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file ", path,
                     " is a symbolic link; refusing it (name the real file)", Fix(path)));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    if (e == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read the token file ", path, " (permission denied)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open the token file ", path, ": ", strerror(e)));
  }
  absl::Status checked = CheckOpenFile(fd, path);
  std::string text;
  char buf[1024];
  while (checked.ok() && text.size() <= kMaxTokenFileBytes) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      checked = absl::FailedPreconditionError(
          absl::StrCat("cannot read the token file ", path, ": ", strerror(errno)));
    }
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (!checked.ok()) return checked;
  if (text.size() > kMaxTokenFileBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file ", path, " is over ", kMaxTokenFileBytes, " bytes"));
  }
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("token file ", path, " is empty"));
  }
  return token;
}

absl::StatusOr<std::string> LoadOrCreateTokenFile(const std::string& path,
                                                  bool* created) {
  *created = false;
  absl::StatusOr<std::string> existing = ReadTokenFile(path);
  if (!absl::IsNotFound(existing.status())) return existing;
  const std::string dir = Dirname(path);
  if (!dir.empty() && access(dir.c_str(), F_OK) != 0) {
    if (const std::string parent = Dirname(dir); !parent.empty()) {
      if (absl::Status st = MakeDirs(parent); !st.ok()) return st;
    }
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create the token file's folder ", dir, ": ", strerror(errno)));
    }
  }
  unsigned char bytes[kTokenBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return absl::InternalError(
        "no random bytes for a new token (OpenSSL RAND_bytes failed)");
  }
  const std::string token = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    // Another process made it first: use theirs.
    if (errno == EEXIST) return ReadTokenFile(path);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the token file ", path, ": ", strerror(errno)));
  }
  const std::string line = token + "\n";
  const bool written =
      write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!written || !synced) {
    unlink(path.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write the token file ", path, ": ", strerror(errno)));
  }
  *created = true;
  return token;
}

absl::StatusOr<std::string> SignCredential(absl::string_view token, const Identity& who,
                                           absl::Time expiry) {
  if (token.empty())
    return absl::InvalidArgumentError("no token to sign a credential with");
  if (who.name.empty() || absl::StrContains(who.name, ':') ||
      absl::StrContains(who.name, '\n')) {
    return absl::InvalidArgumentError(
        absl::StrCat("user name \"", who.name, "\" cannot go into a credential"));
  }
  const std::string body = absl::StrFormat("v1:%d:%d:%s:%d", who.uid, who.gid, who.name,
                                           absl::ToUnixSeconds(expiry));
  return absl::StrCat(body, ":", HexHmac(token, body));
}

absl::StatusOr<Identity> VerifyCredential(absl::string_view token,
                                          absl::string_view credential, absl::Time now) {
  const size_t last = credential.rfind(':');
  if (!absl::StartsWith(credential, "v1:") || last == absl::string_view::npos) {
    return absl::UnauthenticatedError("x-elastrun-credential is not a v1 credential");
  }
  const absl::string_view body = credential.substr(0, last);
  const absl::string_view mac = credential.substr(last + 1);
  // Checked before anything else is believed.
  if (token.empty() || !ConstantTimeEquals(mac, HexHmac(token, body))) {
    return absl::UnauthenticatedError(
        "x-elastrun-credential has a bad signature (forged, or signed with another "
        "cluster's token)");
  }
  std::vector<absl::string_view> parts = absl::StrSplit(body, ':');
  Identity who;
  int64_t expiry = 0;
  if (parts.size() != 5 || !absl::SimpleAtoi(parts[1], &who.uid) ||
      !absl::SimpleAtoi(parts[2], &who.gid) || parts[3].empty() ||
      !absl::SimpleAtoi(parts[4], &expiry)) {
    return absl::UnauthenticatedError("x-elastrun-credential is malformed");
  }
  who.name = std::string(parts[3]);
  if (now > absl::FromUnixSeconds(expiry)) {
    return absl::UnauthenticatedError(
        absl::StrCat("x-elastrun-credential of ", who.name, " expired at ",
                     absl::FormatTime(absl::FromUnixSeconds(expiry), absl::UTCTimeZone()),
                     " (the CLI asks its node's elastrund for a fresh one)"));
  }
  return who;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace elastrun::auth
