// The disk cache's hash and entry format (inductor/sha256.h, inductor/kernel_cache.h). The
// file-system side (private directories, FIFOs, links, pruning, processes) is tested from Python:
// tests/python/inductor/test_disk_cache.py.
#include <gtest/gtest.h>

#include <string>

#include "inductor/kernel_cache.h"
#include "inductor/sha256.h"

using namespace ff::inductor;

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf") and the empty message.
TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding puts the length in the same block or the next one: every length around a block end.
TEST(Sha256, IncrementalEqualsOneShotAtEveryBlockBoundary) {
  std::string data;
  for (int i = 0; i < 200; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  for (size_t n = 50; n <= 200; ++n) {
    std::string part = data.substr(0, n);
    Sha256 h;
    for (size_t at = 0; at < n; at += 13) h.update(std::string_view(part).substr(at, 13));
    EXPECT_EQ(h.finish(), sha256(part)) << n;
  }
  EXPECT_NE(sha256_hex(data.substr(0, 55)), sha256_hex(data.substr(0, 56)));
}

TEST(KernelCache, EntryRoundTrip) {
  std::string payload = std::string(
                            "\x7f"
                            "ELF",
                            4) +
                        std::string(1000, '\0') + "object bytes";
  std::string file = cache_pack("key1", payload);
  std::string back;
  ASSERT_TRUE(cache_unpack(file, "key1", &back));
  EXPECT_EQ(back, payload);
  ASSERT_TRUE(cache_unpack(cache_pack("k", ""), "k", &back));
  EXPECT_EQ(back, "");
}

// Every single-byte change anywhere (header, key, payload, digest) and every truncation is caught.
TEST(KernelCache, EveryDamagedOrTruncatedEntryIsRejected) {
  std::string file = cache_pack("the-key", "payload of some length, with bytes \x01\x02\x03");
  std::string back = "untouched";
  for (size_t i = 0; i < file.size(); ++i) {
    std::string bad = file;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    EXPECT_FALSE(cache_unpack(bad, "the-key", &back)) << "byte " << i;
  }
  for (size_t n = 0; n < file.size(); ++n) EXPECT_FALSE(cache_unpack(file.substr(0, n), "the-key", &back)) << n;
  EXPECT_FALSE(cache_unpack(file + "x", "the-key", &back));
  EXPECT_EQ(back, "untouched");
}

TEST(KernelCache, ValidEntryOfAnotherKeyIsRejected) {
  std::string back;
  EXPECT_FALSE(cache_unpack(cache_pack("key-a", "code of a"), "key-b", &back));
  EXPECT_FALSE(cache_unpack(cache_pack("key-a", "code of a"), "key-", &back));
  EXPECT_FALSE(cache_unpack("not a framefuse cache entry at all, but long enough to have a header", "key-a", &back));
}
