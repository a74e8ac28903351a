#include "common/tls.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace elastrun::tls {
namespace {

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// "--tls-cert FILE"
std::string Where(absl::string_view flag, absl::string_view path) {
  return absl::StrCat(flag, " ", path);
}

// The whole of a small regular file. InvalidArgument naming flag and path.
absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag,
                                          const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s", Where(flag, path),
        e == ENOENT ? "no such file" : absl::StrCat("cannot open: ", std::strerror(e))));
  }
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a regular file", Where(flag, path)));
  }
  if (static_cast<size_t>(st.st_size) > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d bytes, more than a PEM file of at most %d bytes",
                        Where(flag, path), st.st_size, kMaxPemBytes));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: cannot read: %s", Where(flag, path), std::strerror(errno)));
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxPemBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: more than a PEM file of at most %d bytes",
                          Where(flag, path), kMaxPemBytes));
    }
  }
  return text;
}

BioPtr MemBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), &BIO_free);
}

// The certificates of a PEM file, in order; at least one.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(absl::string_view flag,
                                                       const std::string& path,
                                                       const std::string& pem) {
  BioPtr bio = MemBio(pem);
  std::vector<X509Ptr> certs;
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(c, &X509_free);
  }
  ERR_clear_error();  // the end of the file reads as an error
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: no PEM certificate in it (expected \"-----BEGIN CERTIFICATE-----\"%s)",
        Where(flag, path),
        absl::StrContains(pem, "PRIVATE KEY-----") ? "; it holds a private key" : ""));
  }
  return certs;
}

// Declines to prompt for a passphrase on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

absl::StatusOr<KeyPtr> ParseKey(absl::string_view flag, const std::string& path,
                                const std::string& pem) {
  BioPtr bio = MemBio(pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, &NoPassphrase, nullptr),
             &EVP_PKEY_free);
  ERR_clear_error();
  if (key != nullptr) return key;
  if (absl::StrContains(pem, "ENCRYPTED")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the private key is encrypted; give an unencrypted key (e.g. "
                        "openssl pkey -in "
                        "KEY -out PLAIN.key), readable only by this program's user",
                        Where(flag, path)));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: no PEM private key in it (expected \"-----BEGIN PRIVATE KEY-----\"%s)",
      Where(flag, path),
      absl::StrContains(pem, "BEGIN CERTIFICATE") ? "; it holds a certificate" : ""));
}

// The PEM texts of a checked TlsFiles.
struct Pem {
  std::string cert, key, ca;
};

// Reads what `files` names and checks it: certificates parse, the key
// parses and belongs to the first certificate.
absl::StatusOr<Pem> Load(const TlsFiles& files) {
  Pem pem;
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadSmallFile("--tls-cert", files.cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::vector<X509Ptr>> certs =
        ParseCertificates("--tls-cert", files.cert, *cert);
    if (!certs.ok()) return certs.status();
    absl::StatusOr<std::string> key = ReadSmallFile("--tls-key", files.key);
    if (!key.ok()) return key.status();
    absl::StatusOr<KeyPtr> parsed_key = ParseKey("--tls-key", files.key, *key);
    if (!parsed_key.ok()) return parsed_key.status();
    if (X509_check_private_key(certs->front().get(), parsed_key->get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrFormat("--tls-key %s does not match the certificate in --tls-cert %s "
                          "(give the key the "
                          "certificate was made for)",
                          files.key, files.cert));
    }
    pem.cert = *std::move(cert);
    pem.key = *std::move(key);
  }
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadSmallFile("--tls-ca", files.ca);
    if (!ca.ok()) return ca.status();
    if (absl::Status st = ParseCertificates("--tls-ca", files.ca, *ca).status();
        !st.ok()) {
      return st;
    }
    pem.ca = *std::move(ca);
  }
  return pem;
}

// Half a pair is a usage error on both sides.
absl::Status CheckPair(const TlsFiles& files) {
  if (!files.cert.empty() && files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-key (its private key)");
  }
  if (files.cert.empty() && !files.key.empty()) {
    return absl::InvalidArgumentError("--tls-key needs --tls-cert (its certificate)");
  }
  return absl::OkStatus();
}

}  // namespace

bool ServerWantsTls(const TlsFiles& files) {
  return !files.cert.empty() || !files.key.empty();
}

bool ClientWantsTls(const TlsFiles& files) {
  return !files.ca.empty() || !files.cert.empty() || !files.key.empty();
}

absl::Status CheckServerFlags(const TlsFiles& files) {
  if (absl::Status st = CheckPair(files); !st.ok()) return st;
  if (!files.server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls-server-name is a client's flag, not the service's");
  }
  if (!files.ca.empty() && files.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca (require client certificates signed by this CA) needs --tls-cert and "
        "--tls-key (the service's own certificate)");
  }
  return absl::OkStatus();
}

absl::Status CheckClientFlags(const TlsFiles& files) {
  if (absl::Status st = CheckPair(files); !st.ok()) return st;
  if (files.ca.empty() && !files.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key (a client certificate) need --tls-ca (the CA that "
        "signed "
        "the service's certificate)");
  }
  if (files.ca.empty() && !files.server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls-server-name needs --tls-ca (it turns TLS on)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files) {
  if (absl::Status st = CheckServerFlags(files); !st.ok()) return st;
  if (!ServerWantsTls(files)) return grpc::InsecureServerCredentials();
  absl::StatusOr<Pem> pem = Load(files);
  if (!pem.ok()) return pem.status();
  grpc::SslServerCredentialsOptions options(
      pem->ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                      : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pem->ca;
  options.pem_key_cert_pairs.push_back({pem->key, pem->cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files) {
  if (absl::Status st = CheckClientFlags(files); !st.ok()) return st;
  if (!ClientWantsTls(files)) return grpc::InsecureChannelCredentials();
  absl::StatusOr<Pem> pem = Load(files);
  if (!pem.ok()) return pem.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem->ca;
  options.pem_private_key = pem->key;
  options.pem_cert_chain = pem->cert;
  return grpc::SslCredentials(options);
}

void AddChannelArgs(const TlsFiles& files, grpc::ChannelArguments* args) {
  if (!files.server_name.empty()) args->SetSslTargetNameOverride(files.server_name);
}

std::string SpeaksTlsMessage(absl::string_view address) {
  return absl::StrFormat(
      "the service at %s speaks TLS: give --tls-ca FILE (or set ELASTRUN_TLS_CA), the CA "
      "that signed its certificate",
      address);
}

}  // namespace elastrun::tls
