// SHA-256 (FIPS 180-4): the content hash of disk cache entries (kernel_cache.cpp).
//
// NB: our own, from the standard: the cache needs a strong hash on every build machine, and none
// of the libraries that have one is a build dependency everywhere (OpenSSL's headers are not
// installed on every machine; LLVM's SHA256 exists only in builds with LLVM, while the CUDA cache
// must work without it). SHA-256 over a cached kernel (kilobytes to a few megabytes) costs well
// under a millisecond against the tens of milliseconds the kernel took to compile.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ff::inductor {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;
  Sha256();
  void update(std::string_view data);
  Digest finish();  // the object is spent afterwards

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed so far
};

Sha256::Digest sha256(std::string_view data);
std::string sha256_hex(std::string_view data);

}  // namespace ff::inductor
