// Test helper: a small PKI made with the `openssl` program at test time (no
// certificate is checked in, so none expires): a CA, a service certificate
// for 127.0.0.1 and localhost, a client certificate, and a second CA with
// its own client certificate (one the service must refuse). Header-only.
#ifndef ELASTRUN_TESTS_TESTING_CERTS_H_
#define ELASTRUN_TESTS_TESTING_CERTS_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/testing/subprocess.h"

namespace elastrun::testing {

struct TestPki {
  std::string ca_cert, ca_key;          // the CA both sides trust
  std::string server_cert, server_key;  // SAN IP:127.0.0.1, DNS:localhost
  // SAN DNS:rendezvous.test only: reached at 127.0.0.1 it needs the
  // client's --tls-server-name rendezvous.test.
  std::string named_cert, named_key;
  std::string client_cert, client_key;              // signed by the CA
  std::string other_ca_cert;                        // another CA
  std::string other_client_cert, other_client_key;  // signed by the other CA
};

// The openssl program on $PATH, or "".
inline std::string OpensslPath() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string p = absl::StrCat(dir, "/openssl");
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

namespace internal {

inline constexpr char kOpensslConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = elastrun test
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[named_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:rendezvous.test
[both_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[client_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
)";

inline absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {OpensslPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<RunResult> r = Run(argv);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("openssl ", absl::StrJoin(args, " "),
                                            " exited ", r->exit_code, ": ", r->output));
  }
  return absl::OkStatus();
}

// A new EC key and certificate `name`.{crt,key} in `dir`, self-signed with
// `ext` when ca_cert is empty, else signed by ca_cert/ca_key.
inline absl::Status MakeCert(const std::string& dir, const std::string& name,
                             const std::string& cn, const std::string& ext,
                             const std::string& ca_cert = "",
                             const std::string& ca_key = "") {
  const std::string cnf = dir + "/openssl.cnf", base = dir + "/" + name;
  const std::vector<std::string> key = {
      "-newkey",  "ec",      "-pkeyopt",    "ec_paramgen_curve:prime256v1",
      "-nodes",   "-keyout", base + ".key", "-subj",
      "/CN=" + cn};
  std::vector<std::string> req = {"req", "-config", cnf};
  req.insert(req.end(), key.begin(), key.end());
  if (ca_cert.empty()) {
    req.insert(req.end(),
               {"-x509", "-days", "2", "-extensions", ext, "-out", base + ".crt"});
    return Openssl(req);
  }
  req.insert(req.end(), {"-new", "-out", base + ".csr"});
  if (absl::Status st = Openssl(req); !st.ok()) return st;
  static int serial = 1;
  return Openssl({"x509", "-req", "-in", base + ".csr", "-CA", ca_cert, "-CAkey", ca_key,
                  "-set_serial", std::to_string(++serial), "-days", "2", "-extfile", cnf,
                  "-extensions", ext, "-out", base + ".crt"});
}

}  // namespace internal

// Makes the PKI in `dir` (an existing folder). FailedPrecondition when
// openssl is not installed (callers skip), else openssl's error.
inline absl::StatusOr<TestPki> MakeTestPki(const std::string& dir) {
  if (OpensslPath().empty()) {
    return absl::FailedPreconditionError(
        "the openssl program is not installed (Debian package openssl)");
  }
  if (FILE* f = std::fopen((dir + "/openssl.cnf").c_str(), "w")) {
    std::fputs(internal::kOpensslConfig, f);
    std::fclose(f);
  }
  TestPki p;
  auto at = [&](const std::string& name, std::string* crt, std::string* key) {
    *crt = dir + "/" + name + ".crt";
    if (key != nullptr) *key = dir + "/" + name + ".key";
  };
  at("ca", &p.ca_cert, &p.ca_key);
  at("server", &p.server_cert, &p.server_key);
  at("named", &p.named_cert, &p.named_key);
  at("client", &p.client_cert, &p.client_key);
  std::string other_ca_key;
  at("other_ca", &p.other_ca_cert, &other_ca_key);
  at("other_client", &p.other_client_cert, &p.other_client_key);
  using internal::MakeCert;
  for (absl::Status st : {
           MakeCert(dir, "ca", "elastrun test CA", "ca_ext"),
           MakeCert(dir, "server", "localhost", "server_ext", p.ca_cert, p.ca_key),
           MakeCert(dir, "named", "rendezvous.test", "named_ext", p.ca_cert, p.ca_key),
           MakeCert(dir, "client", "node", "client_ext", p.ca_cert, p.ca_key),
           MakeCert(dir, "other_ca", "another CA", "ca_ext"),
           MakeCert(dir, "other_client", "intruder", "client_ext", p.other_ca_cert,
                    other_ca_key),
       }) {
    if (!st.ok()) return st;
  }
  return p;
}

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_TESTING_CERTS_H_
