// SHA-256 against the FIPS 180-4 example vectors, including multi-block and padding edges.
#include <gtest/gtest.h>

#include "core/sha256.h"

namespace fusetune {
namespace {

TEST(Sha256, MatchesFipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // 55 bytes fit one block with the length; 56 need a second block; both must differ and be stable.
  EXPECT_EQ(sha256_hex(std::string(55, 'x')).size(), 64u);
  EXPECT_NE(sha256_hex(std::string(55, 'x')), sha256_hex(std::string(56, 'x')));
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, PiecesGiveTheDigestOfTheWhole) {
  std::string whole;
  Sha256 pieces;
  for (int i = 0; i < 1000; ++i) {
    const std::string piece(static_cast<size_t>(i % 97), static_cast<char>('a' + i % 26));
    whole += piece;
    pieces.update(piece);
  }
  EXPECT_EQ(pieces.hex(), sha256_hex(whole));
}

}  // namespace
}  // namespace fusetune
