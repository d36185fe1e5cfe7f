// SHA-256 (FIPS 180-4) as lowercase hex, computed by OpenSSL's libcrypto (which uses the CPU's SHA
// extensions where it has them: a model of hundreds of MB is digested in a fraction of a second).
// Used for signatures and content digests. Sha256 takes the bytes in pieces (a file streamed from
// disk), sha256_hex in one.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace fusetune {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view bytes);
  std::string hex();  // the digest of everything given; the hasher is then spent

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

std::string sha256_hex(std::string_view data);

}  // namespace fusetune
