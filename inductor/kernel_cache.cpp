// The on-disk cache (kernel_cache.h): entry format, private directories, checked reads, atomic
// writes, and pruning to the size bound.
#include "inductor/kernel_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "inductor/cpu_codegen.h"
#include "inductor/sha256.h"
#include "src/base/config.h"
#include "src/base/logging.h"

namespace ff::inductor {

namespace {

// magic (8) | key length (u32) | payload length (u64) | key | payload | SHA-256 of all before (32)
constexpr char kMagic[8] = {'F', 'F', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr size_t kHeader = 8 + 4 + 8;
constexpr size_t kDigest = 32;
constexpr const char* kTempMarker = ".tmp.";
constexpr time_t kStaleTempSeconds = 3600;  // a temporary file this old belongs to a dead writer

const char* area_name(CacheArea a) {
  switch (a) {
    case CacheArea::CpuObjects: return "inductor-cpu";
    case CacheArea::Cuda: return "cuda";
  }
  return "other";
}
constexpr CacheArea kAreas[] = {CacheArea::CpuObjects, CacheArea::Cuda};

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(s[at + static_cast<size_t>(i)])) << (8 * i);
  return v;
}

std::string parent_of(const std::string& dir) {
  size_t slash = dir.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : dir.substr(0, slash);
}

int64_t size_bound() { return std::max<int64_t>(0, config().cache_size_mb) << 20; }

int64_t entry_limit() {
  int64_t bound = size_bound();
  return bound > 0 ? std::min(bound, kMaxEntryBytes) : kMaxEntryBytes;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Creates the missing directories of `dir`, each 0700 (an existing one is left as it is).
void make_private_dirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return;
  size_t pos = 0;
  do {
    pos = dir.find('/', pos + 1);
    if (::mkdir(dir.substr(0, pos).c_str(), 0700) != 0 && errno != EEXIST) return;
  } while (pos != std::string::npos);
}

// Why `dir` must not hold entries, or "" when it may.
std::string refusal(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return "cannot be created (" + std::string(std::strerror(errno)) + ")";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid()) return "is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("is writable by ") + ((st.st_mode & S_IWOTH) ? "others" : "its group") + " (mode " + mode + ")";
  }
  return "";
}

// An entry's directory and the cache root above it must both be private (kernel_cache.h).
std::string refusal_of_area(const std::string& dir) {
  std::string why = refusal(dir);
  if (!why.empty()) return dir + " " + why;
  std::string root = parent_of(dir);
  why = refusal(root);
  return why.empty() ? "" : root + " " + why;
}

std::string temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  return std::string(kTempMarker) + std::to_string(::getpid()) + "." +
         std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()) & 0xffffff) + "." +
         std::to_string(counter.fetch_add(1));
}

bool write_all(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, std::string* out) {
  for (size_t done = 0; done < out->size();) {
    ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// ---- the size bound ------------------------------------------------------------------------------

struct FileInfo {
  std::string path;
  int64_t bytes = 0;
  struct timespec mtime{};
};

// The entries (and temporary files) of one area directory; stale temporary files are removed.
void list_area(const std::string& dir, std::vector<FileInfo>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  time_t now = std::time(nullptr);
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    struct stat st;
    // NB: lstat: a link is never followed, counted or removed through.
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (name.find(kTempMarker) != std::string::npos && now - st.st_mtime > kStaleTempSeconds) {
      ::unlink(path.c_str());
      continue;
    }
    out->push_back(FileInfo{path, static_cast<int64_t>(st.st_size), st.st_mtim});
  }
  ::closedir(d);
}

// The area directories under the cache root of `dir`, and `dir` itself (tests use any directory).
std::vector<std::string> areas_near(const std::string& dir) {
  std::set<std::string> dirs = {dir};
  std::string root = parent_of(dir);
  for (CacheArea a : kAreas) {
    std::string area = root + "/" + area_name(a);
    if (refusal_of_area(area).empty()) dirs.insert(area);
  }
  return {dirs.begin(), dirs.end()};
}

// Removes the least recently used entries until the areas near `dir` hold at most `target` bytes;
// returns what they hold then.
int64_t prune(const std::string& dir, int64_t target) {
  std::vector<FileInfo> files;
  for (const std::string& area : areas_near(dir)) list_area(area, &files);
  int64_t total = 0;
  for (const FileInfo& f : files) total += f.bytes;
  std::sort(files.begin(), files.end(), [](const FileInfo& a, const FileInfo& b) {
    if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
    return a.mtime.tv_nsec < b.mtime.tv_nsec;
  });
  for (const FileInfo& f : files) {
    if (total <= target) break;
    if (f.path.find(kTempMarker) != std::string::npos) continue;  // being written right now
    // NB: another process may remove it first, or read it meanwhile (it keeps its open file).
    if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) total -= f.bytes;
  }
  return total;
}

// What this process believes each cache root holds: scanned once, then counted up by its own
// writes, and scanned again (pruning) when that passes the bound. NB: other processes' writes
// are seen at the next scan; the bound is kept to within what they write meanwhile.
void keep_bound(const std::string& dir, int64_t added) {
  int64_t bound = size_bound();
  if (bound <= 0) return;
  static std::mutex mu;
  static auto* usage = new std::unordered_map<std::string, int64_t>();
  std::lock_guard<std::mutex> lock(mu);
  std::string root = parent_of(dir);
  auto it = usage->find(root);
  if (it == usage->end()) {
    std::vector<FileInfo> files;
    for (const std::string& area : areas_near(dir)) list_area(area, &files);
    int64_t total = 0;
    for (const FileInfo& f : files) total += f.bytes;
    it = usage->emplace(root, total).first;
  } else {
    it->second += added;
  }
  if (it->second > bound) it->second = prune(dir, bound / 4 * 3);
}

}  // namespace

// ---- directories ---------------------------------------------------------------------------------

std::string cache_area_dir(CacheArea area) {
  if (!config().disk_cache) return "";
  std::string root = config().cache_dir;
  if (root.empty()) {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') root = std::string(x) + "/framefuse";
    else if (const char* h = std::getenv("HOME"); h && *h == '/') root = std::string(h) + "/.cache/framefuse";
    else return "";
  }
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root + "/" + area_name(area);
}

bool cache_dir_usable(const std::string& dir) {
  if (dir.empty()) return false;
  make_private_dirs(dir);
  std::string why = refusal_of_area(dir);
  if (why.empty()) return true;
  static std::mutex mu;
  static auto* warned = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  // NB: whatever the log settings (as the recompile limit's warning): the user must learn why every
  // process compiles from scratch, and that someone else could write where kernels come from.
  if (warned->insert(dir).second)
    log_emit(LogComponent::inductor, LogLevel::Warning,
             "the disk cache is off for " + dir + ": " + why +
                 ". Compiled kernels are loaded from it as machine code, so it must be private to this user "
                 "(chmod 700, or point framefuse.config.cache_dir elsewhere).");
  return false;
}

// ---- entries -------------------------------------------------------------------------------------

std::string cache_pack(const std::string& key, const std::string& payload) {
  std::string out(kMagic, sizeof kMagic);
  put_le(out, key.size(), 4);
  put_le(out, payload.size(), 8);
  out.reserve(kHeader + key.size() + payload.size() + kDigest);
  out += key;
  out += payload;
  Sha256::Digest d = sha256(out);
  out.append(reinterpret_cast<const char*>(d.data()), d.size());
  return out;
}

bool cache_unpack(const std::string& file, const std::string& key, std::string* payload) {
  if (file.size() < kHeader + kDigest || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) return false;
  uint64_t klen = get_le(file, 8, 4), plen = get_le(file, 12, 8);
  // NB: compared by subtraction: lengths read from a damaged file may be anything.
  uint64_t rest = file.size() - kHeader - kDigest;
  if (klen != key.size() || klen > rest || plen != rest - klen) return false;
  Sha256::Digest d = sha256(std::string_view(file.data(), file.size() - kDigest));
  if (std::memcmp(d.data(), file.data() + file.size() - kDigest, kDigest) != 0) return false;
  if (file.compare(kHeader, klen, key) != 0) return false;  // a valid entry of another key, renamed
  payload->assign(file, kHeader + klen, plen);
  return true;
}

bool cache_load(const std::string& dir, const std::string& name, const std::string& key, std::string* payload) {
  if (dir.empty() || !refusal_of_area(dir).empty()) return false;
  // NB: O_NOFOLLOW: a link is never an entry; O_NONBLOCK: opening a FIFO does not wait for a writer.
  Fd f(::open((dir + "/" + name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (f.fd < 0) return false;
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
      st.st_size > entry_limit())
    return false;
  std::string file(static_cast<size_t>(st.st_size), '\0');
  if (!read_all(f.fd, &file) || !cache_unpack(file, key, payload)) return false;
  // Least recently used goes first when pruning: a hit makes the entry recent (a read-only
  // cache just keeps its times).
  struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  (void)::futimens(f.fd, times);
  return true;
}

void cache_store(const std::string& dir, const std::string& name, const std::string& key, const std::string& payload) {
  if (!cache_dir_usable(dir)) return;
  std::string data = cache_pack(key, payload);
  if (static_cast<int64_t>(data.size()) > entry_limit()) return;
  std::string path = dir + "/" + name;
  std::string tmp = path + temp_suffix();
  {
    Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (f.fd < 0) return;  // unwritable: the next process compiles again
    if (!write_all(f.fd, data)) {
      ::unlink(tmp.c_str());
      return;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  keep_bound(dir, static_cast<int64_t>(data.size()));
}

// ---- the CPU renderer's object cache (cpu_codegen.h) --------------------------------------------

std::string cache_key_hash(const std::string& text) {
  // NB: a key collision would load another program's kernels: a cryptographic hash, truncated.
  return sha256_hex(text).substr(0, 32);
}

bool disk_cache_load(const std::string& dir, const std::string& key, std::string* object) {
  return cache_load(dir, key + ".ffobj", key, object);
}

void disk_cache_store(const std::string& dir, const std::string& key, const std::string& object) {
  cache_store(dir, key + ".ffobj", key, object);
}

}  // namespace ff::inductor
