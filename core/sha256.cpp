#include "core/sha256.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace fusetune {

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  ctx_->md = EVP_MD_CTX_new();
  check(ctx_->md != nullptr && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1,
        "OpenSSL cannot start a SHA-256 digest");
}

Sha256::~Sha256() = default;

void Sha256::update(std::string_view bytes) {
  check(EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) == 1, "OpenSSL's SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  check(EVP_DigestFinal_ex(ctx_->md, digest, &size) == 1 && size == 32, "OpenSSL's SHA-256 final failed");
  static const char* digits = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned int i = 0; i < size; ++i) {
    out[2 * i] = digits[digest[i] >> 4];
    out[2 * i + 1] = digits[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

}  // namespace fusetune
