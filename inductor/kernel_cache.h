// framefuse's on-disk cache: compiled CPU objects, CUDA cubins and max-autotune choices, one file
// per entry, so that a second process starts warm (DESIGN.md decision 8).
//
// What it loads becomes machine code in this process, so the cache is
//  - verified: an entry is a header, the caller's key, the payload and a SHA-256 of all of them
//    (sha256.h). A truncated, damaged, foreign or renamed entry (its key is not the one asked
//    for) reads as absent, and the caller compiles again and rewrites it.
//  - private: directories are created 0700; a cache directory not owned by the user, or writable by
//    group or others, is refused with one warning and the disk cache is off for it (a directory
//    another user can write is code execution in this process). An entry is read only when it is
//    a regular file owned by the user, not writable by others, opened without following a link
//    and without blocking (a FIFO or a link to /dev/zero named like an entry is skipped), and no
//    larger than kMaxEntryBytes or the size bound.
//  - bounded: after a write that takes the cache over config cache_size_mb, the least recently
//    used entries (mtime, refreshed on every hit) are removed until it is under 3/4 of it.
//  - atomic: entries are written to a unique temporary file (created exclusively, 0600) and
//    renamed over the entry, so a concurrent reader sees the old entry, the new one, or none.
// Every failure (unwritable, full, refused) costs a recompile, never an error.
//
// Layout: <root>/<area>/<entry>, root = config cache_dir, else $XDG_CACHE_HOME/framefuse, else
// ~/.cache/framefuse.
#pragma once

#include <cstdint>
#include <string>

namespace ff::inductor {

enum class CacheArea { CpuObjects,
                       Cuda };

// The directory of `area` ("" when the disk cache is off: config disk_cache, or no home). Does not
// create or check it.
std::string cache_area_dir(CacheArea area);

// Whether `dir` may hold cache entries: created (0700) if missing, then owned by the user and not
// writable by group or others. Checked once per directory and process; a refusal is logged once.
// NB: callers that go on to worker threads call it on their own thread first (the log sink is Python).
bool cache_dir_usable(const std::string& dir);

// Reads entry `name` of `dir`; true with `*payload` set when it holds a valid entry for `key`.
bool cache_load(const std::string& dir, const std::string& name, const std::string& key, std::string* payload);
// Writes entry `name` of `dir` for `key`, then keeps the cache under its size bound.
void cache_store(const std::string& dir, const std::string& name, const std::string& key, const std::string& payload);

// The entry format (for tests): pack, and unpack (false for anything but a valid entry for `key`).
std::string cache_pack(const std::string& key, const std::string& payload);
bool cache_unpack(const std::string& file, const std::string& key, std::string* payload);

// Largest entry read, whatever the size bound.
inline constexpr int64_t kMaxEntryBytes = int64_t{256} << 20;

}  // namespace ff::inductor
