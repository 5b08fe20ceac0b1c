#include "cache/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace torchfuse::cache {
namespace {

TEST(Sha256Test, MatchesFipsVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, ChunkingDoesNotChangeTheDigest) {
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>(i * 7 + 3));
  const std::string whole = Sha256Hex(text);
  for (size_t cut : {1u, 55u, 56u, 63u, 64u, 65u, 128u, 299u}) {
    Sha256 h;
    h.Update(text.substr(0, cut)).Update(text.substr(cut));
    EXPECT_EQ(h.HexDigest(), whole) << cut;
  }
}

TEST(Sha256Test, FieldsAreDelimited) {
  EXPECT_NE(Sha256().Field("ab").Field("c").HexDigest(),
            Sha256().Field("a").Field("bc").HexDigest());
  EXPECT_EQ(Sha256().Field("a").Field("bc").HexDigest(),
            Sha256().Field("a").Field("bc").HexDigest());
}

}  // namespace
}  // namespace torchfuse::cache
