// SHA-256 against the FIPS 180-2 / NIST example vectors.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/sha256.h"

namespace mopt {
namespace {

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(to_hex(Sha256::hash("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(Sha256::hash("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(Sha256::hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(Sha256::hash("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                                "klmnopqrlmnopqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  Sha256 h;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(chunk);
  EXPECT_EQ(to_hex(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::mt19937 rng(1);
  for (int len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000}) {
    std::string s(static_cast<size_t>(len), '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    const Sha256Digest one = Sha256::hash(s);
    for (int trial = 0; trial < 5; ++trial) {
      Sha256 h;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t n = std::min(s.size() - pos, static_cast<size_t>(rng() % 70));
        h.update(s.data() + pos, n);
        pos += n;
      }
      EXPECT_EQ(h.finish(), one) << "len " << len;
    }
  }
}

}  // namespace
}  // namespace mopt
