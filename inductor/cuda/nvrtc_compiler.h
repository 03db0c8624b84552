// CUDA C++ source -> cubin through NVRTC, with a cache on disk keyed by the source's hash, the
// target architecture, the NVRTC version and the options (DESIGN.md decision 8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ff::cuda {

struct CompileStats {
  double nvrtc_ms = 0;     // time inside nvrtcCompileProgram (0 on a cache hit)
  bool disk_hit = false;   // the cubin came from the disk cache
  std::string cache_path;  // the cache file read or written ("" when the disk cache is off)
  // For a module compiled as several programs: how many, and how many functions they define.
  int programs = 1;
  int functions = 0;
};

// Compiles `source` (a whole module) for `arch` ("sm_90"). Generated code that NVRTC rejects is a
// framefuse bug: throws ff::InternalError with NVRTC's log and the numbered source. Throws
// ff::UserError when NVRTC is not installed.
std::string compile_cubin(const std::string& source, const std::string& arch, CompileStats* stats = nullptr);

// A source that starts with this line is compiled with every NVRTC optimization (config
// cuda_fast_compile does not apply): hand-written hot kernels, where -Ofast-compile=min costs more
// than it saves (the TF32 attention kernel ran 40% slower with it).
inline constexpr const char* kFullOptimization = "// framefuse: full optimization\n";

// Compiles each source on its own thread (at most `threads` at a time; 0 = one per hardware thread):
// NVRTC programs are independent, and the front end and ptxas of one program run on one core.
// stats (when given) receives one entry per source. Errors as compile_cubin's, the first one thrown.
std::vector<std::string> compile_cubins(const std::vector<std::string>& sources, const std::string& arch,
                                        std::vector<CompileStats>* stats = nullptr, int threads = 0);

// The directory of cached cubins and tuning choices: the disk cache's CUDA area
// (inductor/kernel_cache.h; "" when the disk cache is off).
std::string cuda_cache_dir();

// 128-bit content hash as 32 hex digits (stable across processes and builds): names cache entries.
std::string content_hash(const std::string& data);

}  // namespace ff::cuda
