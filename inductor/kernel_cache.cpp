// The on-disk object cache. Files are written to a temporary name and renamed, so a concurrent
// reader sees either nothing or a whole file; the header and checksum catch everything else.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "inductor/cpu_codegen.h"

namespace ff::inductor {

namespace {

constexpr char kMagic[8] = {'F', 'F', 'O', 'B', 'J', '0', '0', '1'};

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string path_for(const std::string& dir, const std::string& key) { return dir + "/" + key + ".ffobj"; }

}  // namespace

std::string cache_key_hash(const std::string& text) {
  return hex64(fnv1a(text)) + hex64(fnv1a(text, 0x84222325cbf29ce4ull));
}

bool disk_cache_load(const std::string& dir, const std::string& key, std::string* object) {
  if (dir.empty()) return false;
  std::ifstream in(path_for(dir, key), std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  // magic | key length (u32) | key | object length (u64) | checksum (u64) | object
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > data.size()) return false;
    std::memcpy(dst, data.data() + pos, n);
    pos += n;
    return true;
  };
  char magic[8];
  uint32_t klen = 0;
  if (!take(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 || !take(&klen, 4) || klen != key.size()) return false;
  if (pos + klen > data.size() || data.compare(pos, klen, key) != 0) return false;
  pos += klen;
  uint64_t olen = 0, sum = 0;
  if (!take(&olen, 8) || !take(&sum, 8) || pos + olen != data.size()) return false;
  std::string obj = data.substr(pos);
  if (fnv1a(obj) != sum) return false;
  *object = std::move(obj);
  return true;
}

void disk_cache_store(const std::string& dir, const std::string& key, const std::string& object) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;
  std::string tmp = path_for(dir, key) + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    uint32_t klen = static_cast<uint32_t>(key.size());
    uint64_t olen = object.size(), sum = fnv1a(object);
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&klen), 4);
    out.write(key.data(), static_cast<std::streamsize>(key.size()));
    out.write(reinterpret_cast<const char*>(&olen), 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(object.data(), static_cast<std::streamsize>(object.size()));
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path_for(dir, key), ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace ff::inductor
