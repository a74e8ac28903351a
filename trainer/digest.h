// SHA-256 (OpenSSL's EVP), for the `params_sha256=` of the final line and
// for checkpoint checksums.
#ifndef ELASTRUN_TRAINER_DIGEST_H_
#define ELASTRUN_TRAINER_DIGEST_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace elastrun::trainer {

// Incremental hash. Not thread-safe; movable.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(const void* data, size_t size);
  void Update(absl::string_view data) { Update(data.data(), data.size()); }
  // Lower-case hex of the digest; the object must not be used afterwards.
  std::string HexDigest();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_DIGEST_H_
