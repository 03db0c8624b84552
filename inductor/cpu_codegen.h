// The CPU renderer: loop IR kernels -> LLVM IR -> machine code in this process (ORC LLJIT),
// for the host CPU's features, with an on-disk object cache.
//
// Kernel ABI: void kernel(void** buffers, int64_t begin, int64_t end). `buffers` holds one data
// pointer per entry of Kernel::buffers() (ascending buffer ids); the kernel runs iterations
// [begin, end) of its parallel root loop, so the runtime can split that range across threads.
//
// Only cpu_llvm.cpp includes LLVM headers (it is slow to compile); without LLVM at build time
// cpu_codegen_available() is false and compile_cpu throws ff::Unsupported.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

using KernelFn = void (*)(void** buffers, int64_t begin, int64_t end);

struct CpuModule {
  std::vector<KernelFn> kernels;  // one per Program::kernels entry
  std::string llvm_ir;            // optimized LLVM IR, when asked for (never from the disk cache)
  bool from_disk_cache = false;
  double compile_ms = 0;
  std::string cache_key;
  // The kernels' code in the JIT, freed with the module (held by a shared_ptr so that this header
  // needs no LLVM type): a process that compiles for ever must not keep every kernel it compiled.
  std::shared_ptr<void> jit_code;
};

struct CpuCompileOptions {
  std::string cache_dir;  // empty: no disk cache
  bool want_llvm_ir = false;
  // Buffers of at least this many bytes that a kernel stores to get a second body that writes them
  // with non-temporal stores, run when their pointers are 64-byte aligned (x86 only); 0: none.
  int64_t streaming_store_bytes = 0;
};

bool cpu_codegen_available();
// "cpu name +features" of the host as the code generator sees it (part of cache keys).
std::string cpu_target_description();

std::shared_ptr<CpuModule> compile_cpu(const loop::Program& p, const CpuCompileOptions& options);

// ---- the disk cache of objects (kernel_cache.h) ----
// Object files are stored as verified entries <dir>/<key>.ffobj; one that does not check out
// (truncated, damaged, another version's, not a private regular file) is ignored and replaced.
std::string cache_key_hash(const std::string& text);  // 32 hex digits
bool disk_cache_load(const std::string& dir, const std::string& key, std::string* object);
void disk_cache_store(const std::string& dir, const std::string& key, const std::string& object);

}  // namespace ff::inductor
