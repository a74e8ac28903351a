// common/tls: the errors a user makes with certificate files, and the
// credentials against a real in-process gRPC server (port 0) with
// certificates made by openssl at test time (skipped without openssl).
#include "common/tls.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/certs.h"
#include "tests/testing/subprocess.h"

namespace elastrun::tls {
namespace {

using ::testing::HasSubstr;

// Generous: a handshake on a loaded machine takes milliseconds.
constexpr auto kConnectDeadline = std::chrono::seconds(30);

TlsFiles Files(std::string cert, std::string key = "", std::string ca = "",
               std::string server_name = "") {
  return TlsFiles{std::move(cert), std::move(key), std::move(ca), std::move(server_name)};
}

void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

std::string ServerError(const TlsFiles& files) {
  auto c = MakeServerCredentials(files);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  return std::string(c.status().message());
}

std::string ClientError(const TlsFiles& files) {
  auto c = MakeChannelCredentials(files);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  return std::string(c.status().message());
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("tls_test");
    absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir_);
    if (absl::IsFailedPrecondition(pki.status())) {
      GTEST_SKIP() << "skipped: " << pki.status().message();
    }
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
  }

  // A gRPC server (one generic service: it must have one) on 127.0.0.1:0 with `creds`;
  // its address.
  std::string Serve(std::shared_ptr<grpc::ServerCredentials> creds) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", std::move(creds), &port);
    builder.RegisterCallbackGenericService(&generic_);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    EXPECT_GT(port, 0);
    return absl::StrCat("127.0.0.1:", port);
  }

  // Whether a channel with `files` to `address` gets through its TLS
  // handshake: true once READY, false once it fails to connect.
  static bool Connects(const std::string& address, const TlsFiles& files) {
    auto creds = MakeChannelCredentials(files);
    EXPECT_TRUE(creds.ok()) << creds.status();
    if (!creds.ok()) return false;
    grpc::ChannelArguments args;
    AddChannelArgs(files, &args);
    auto channel = grpc::CreateCustomChannel(address, *creds, args);
    const auto deadline = std::chrono::system_clock::now() + kConnectDeadline;
    grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
      if (!channel->WaitForStateChange(state, deadline)) {
        ADD_FAILURE() << "the channel to " << address << " neither connected nor failed";
        return false;
      }
      state = channel->GetState(/*try_to_connect=*/true);
    }
    return state == GRPC_CHANNEL_READY;
  }

  std::string dir_;
  testing::TestPki pki_;
  grpc::CallbackGenericService generic_;  // declared before server_: outlives it
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TlsTest, NoFlagsMeansPlaintext) {
  EXPECT_FALSE(ServerWantsTls({}));
  EXPECT_FALSE(ClientWantsTls({}));
  auto server = MakeServerCredentials({});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = Serve(*server);
  EXPECT_TRUE(Connects(address, {}));
  EXPECT_FALSE(SpeaksTls(address, absl::Seconds(30)));
}

TEST_F(TlsTest, HalfAPairAndMisplacedFlagsAreUsageErrors) {
  EXPECT_EQ(ServerError(Files(pki_.server_cert)),
            "--tls-cert needs --tls-key (its private key)");
  EXPECT_EQ(ServerError(Files("", pki_.server_key)),
            "--tls-key needs --tls-cert (its certificate)");
  EXPECT_THAT(ServerError(Files("", "", pki_.ca_cert)),
              HasSubstr("--tls-ca (require client "
                        "certificates signed by this CA) "
                        "needs --tls-cert and --tls-key"));
  EXPECT_EQ(ClientError(Files(pki_.client_cert)),
            "--tls-cert needs --tls-key (its private key)");
  EXPECT_THAT(ClientError(Files(pki_.client_cert, pki_.client_key)),
              HasSubstr("need --tls-ca"));
  EXPECT_THAT(ClientError(Files("", "", "", "x")),
              HasSubstr("--tls-server-name needs --tls-ca"));
}

TEST_F(TlsTest, MissingFileIsNamed) {
  const std::string missing = dir_ + "/nope.crt";
  EXPECT_EQ(ServerError(Files(missing, pki_.server_key)),
            "--tls-cert " + missing + ": no such file");
  EXPECT_EQ(ClientError(Files("", "", missing)),
            "--tls-ca " + missing + ": no such file");
  EXPECT_EQ(ServerError(Files(pki_.server_cert, missing)),
            "--tls-key " + missing + ": no such file");
  EXPECT_EQ(ClientError(Files("", "", dir_)),
            "--tls-ca " + dir_ + ": not a regular file");
}

TEST_F(TlsTest, NotPemIsNamed) {
  const std::string junk = dir_ + "/junk.pem";
  WriteFile(junk, "hello\n");
  EXPECT_THAT(ServerError(Files(junk, pki_.server_key)),
              HasSubstr("--tls-cert " + junk + ": no PEM certificate in it"));
  EXPECT_THAT(ClientError(Files("", "", junk)),
              HasSubstr("--tls-ca " + junk + ": no PEM certificate"));
  // The two files swapped: each message says what the file holds instead.
  EXPECT_THAT(
      ServerError(Files(pki_.server_key, pki_.server_cert)),
      HasSubstr("no PEM certificate in it (expected \"-----BEGIN CERTIFICATE-----\"; "
                "it holds a private key)"));
  EXPECT_THAT(ServerError(Files(pki_.server_cert, pki_.server_cert)),
              HasSubstr("--tls-key " + pki_.server_cert +
                        ": no PEM private key in it (expected \"-----BEGIN PRIVATE "
                        "KEY-----\"; it holds a certificate)"));
}

TEST_F(TlsTest, TooLargeFileIsRefusedUnread) {
  const std::string big = dir_ + "/big.pem";
  WriteFile(big, std::string(kMaxPemBytes + 1, 'A'));
  EXPECT_THAT(ClientError(Files("", "", big)), HasSubstr("--tls-ca " + big + ": "));
  EXPECT_THAT(ClientError(Files("", "", big)),
              HasSubstr("more than a PEM file of at most"));
}

TEST_F(TlsTest, KeyOfAnotherCertificateIsRefused) {
  EXPECT_EQ(ServerError(Files(pki_.server_cert, pki_.client_key)),
            "--tls-key " + pki_.client_key +
                " does not match the certificate in --tls-cert " + pki_.server_cert +
                " (give the key the certificate was made for)");
  EXPECT_THAT(ClientError(Files(pki_.client_cert, pki_.server_key, pki_.ca_cert)),
              HasSubstr("does not match the certificate"));
}

TEST_F(TlsTest, EncryptedKeyIsRefusedWithoutAPrompt) {
  const std::string enc = dir_ + "/enc.key";
  ASSERT_TRUE(testing::internal::Openssl({"pkey", "-in", pki_.server_key, "-aes256",
                                          "-passout", "pass:secret", "-out", enc})
                  .ok());
  EXPECT_THAT(ServerError(Files(pki_.server_cert, enc)),
              HasSubstr("--tls-key " + enc + ": the private key is encrypted"));
}

TEST_F(TlsTest, ClientTrustingTheCaConnectsOverTlsToAnIpSan) {
  auto server = MakeServerCredentials(Files(pki_.server_cert, pki_.server_key));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(ServerWantsTls(Files(pki_.server_cert, pki_.server_key)));
  const std::string address = Serve(*server);
  EXPECT_TRUE(Connects(address, Files("", "", pki_.ca_cert)));
  // Another CA's client does not trust this service; a plaintext one fails.
  EXPECT_FALSE(Connects(address, Files("", "", pki_.other_ca_cert)));
  EXPECT_FALSE(Connects(address, {}));
  EXPECT_TRUE(SpeaksTls(address, absl::Seconds(30)));
  EXPECT_THAT(SpeaksTlsMessage(address),
              HasSubstr("the service at " + address + " speaks TLS: give --tls-ca"));
  // What a client that could not reach it is told (and not retried).
  const absl::Status unreachable = absl::UnavailableError("Socket closed");
  std::optional<absl::Status> plain = rpc::TlsFailure(unreachable, address, {});
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(absl::IsUnauthenticated(*plain)) << *plain;
  EXPECT_THAT(plain->message(), HasSubstr("speaks TLS: give --tls-ca"));
  std::optional<absl::Status> other =
      rpc::TlsFailure(unreachable, address, Files("", "", pki_.other_ca_cert));
  ASSERT_TRUE(other.has_value());
  EXPECT_TRUE(absl::IsUnauthenticated(*other)) << *other;
  EXPECT_FALSE(
      rpc::TlsFailure(unreachable, address, Files("", "", pki_.ca_cert)).has_value());
}

TEST_F(TlsTest, ServerNameOverridesTheAddressForVerification) {
  auto server = MakeServerCredentials(Files(pki_.named_cert, pki_.named_key));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = Serve(*server);
  // The certificate names rendezvous.test, not 127.0.0.1.
  EXPECT_FALSE(Connects(address, Files("", "", pki_.ca_cert)));
  EXPECT_TRUE(Connects(address, Files("", "", pki_.ca_cert, "rendezvous.test")));
}

TEST_F(TlsTest, MutualTlsAcceptsAClientCertificateOfItsCa) {
  auto server =
      MakeServerCredentials(Files(pki_.server_cert, pki_.server_key, pki_.ca_cert));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = Serve(*server);
  EXPECT_TRUE(Connects(address, Files(pki_.client_cert, pki_.client_key, pki_.ca_cert)));
  EXPECT_TRUE(SpeaksTls(address, absl::Seconds(30)));
}

TEST_F(TlsTest, CheckHandshakeSaysWhyATlsClientIsRefused) {
  auto server = MakeServerCredentials(
      Files(pki_.server_cert, pki_.server_key, pki_.ca_cert));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = Serve(*server);
  const absl::Duration timeout = absl::Seconds(30);
  absl::Status ok =
      CheckHandshake(address, Files(pki_.client_cert, pki_.client_key, pki_.ca_cert), timeout);
  EXPECT_TRUE(ok.ok()) << ok;
  absl::Status no_cert = CheckHandshake(address, Files("", "", pki_.ca_cert), timeout);
  EXPECT_TRUE(absl::IsUnauthenticated(no_cert)) << no_cert;
  EXPECT_THAT(no_cert.message(),
              HasSubstr("the service at " + address + " refused this client's TLS handshake"));
  EXPECT_THAT(no_cert.message(), HasSubstr("requires --tls-cert and --tls-key"));
  absl::Status other_ca = CheckHandshake(
      address, Files(pki_.other_client_cert, pki_.other_client_key, pki_.ca_cert), timeout);
  EXPECT_TRUE(absl::IsUnauthenticated(other_ca)) << other_ca;
  EXPECT_THAT(other_ca.message(), HasSubstr("refused this client's TLS handshake"));
  absl::Status untrusted = CheckHandshake(
      address, Files(pki_.client_cert, pki_.client_key, pki_.other_ca_cert), timeout);
  EXPECT_TRUE(absl::IsUnauthenticated(untrusted)) << untrusted;
  EXPECT_THAT(untrusted.message(),
              HasSubstr("the certificate of the service at " + address + " is not accepted"));
}

TEST_F(TlsTest, CheckHandshakeNamesAPlaintextServiceAndAWrongName) {
  auto plain = MakeServerCredentials({});
  ASSERT_TRUE(plain.ok());
  const std::string address = Serve(*plain);
  absl::Status st = CheckHandshake(address, Files("", "", pki_.ca_cert), absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnauthenticated(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("the service at " + address + " does not speak TLS"));

  grpc::ServerBuilder builder;
  int port = 0;
  auto named = MakeServerCredentials(Files(pki_.named_cert, pki_.named_key));
  ASSERT_TRUE(named.ok());
  builder.AddListeningPort("127.0.0.1:0", *named, &port);
  grpc::CallbackGenericService generic;
  builder.RegisterCallbackGenericService(&generic);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string named_address = absl::StrCat("127.0.0.1:", port);
  st = CheckHandshake(named_address, Files("", "", pki_.ca_cert), absl::Seconds(30));
  EXPECT_THAT(st.message(), HasSubstr("is not accepted"));
  EXPECT_THAT(st.message(), HasSubstr("--tls-server-name"));
  EXPECT_TRUE(CheckHandshake(named_address, Files("", "", pki_.ca_cert, "rendezvous.test"),
                             absl::Seconds(30))
                  .ok());
}

TEST(SpeaksTlsTest, NothingListeningIsNotTls) {
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  EXPECT_FALSE(SpeaksTls(absl::StrCat("127.0.0.1:", port), absl::Seconds(30)));
  EXPECT_FALSE(SpeaksTls("not an address", absl::Seconds(30)));
}

}  // namespace
}  // namespace elastrun::tls
