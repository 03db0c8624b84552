#include "inductor/cuda/nvrtc_compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "inductor/cuda/cuda_api.h"
#include "inductor/kernel_cache.h"
#include "inductor/sha256.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff::cuda {
namespace {

std::string numbered(const std::string& src) {
  std::istringstream in(src);
  std::ostringstream out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) out << n << "\t" << line << "\n";
  return out.str();
}

}  // namespace

std::string content_hash(const std::string& data) {
  // NB: a name collision would load another module's kernels: a cryptographic hash, truncated.
  return inductor::sha256_hex(data).substr(0, 32);
}

std::string cuda_cache_dir() { return inductor::cache_area_dir(inductor::CacheArea::Cuda); }

std::string compile_cubin(const std::string& source, const std::string& arch, CompileStats* stats) {
  const NvrtcApi& nv = nvrtc();
  std::vector<std::string> options = {"--gpu-architecture=" + arch, "-std=c++17", "--device-as-default-execution-space"};
  // NB: -Ofast-compile=min halves NVRTC's time on our kernels (measured on softmax and sin+cos);
  // NVRTC before 12.8 does not know the option.
  const std::string& fast = config().cuda_fast_compile;
  bool full = source.rfind(kFullOptimization, 0) == 0;
  if (!full && !fast.empty() && (nv.major > 12 || (nv.major == 12 && nv.minor >= 8))) {
    if (fast != "min" && fast != "mid" && fast != "max")
      throw UserError("config cuda_fast_compile must be \"\", \"min\", \"mid\" or \"max\", not \"" + fast + "\"");
    options.push_back("--Ofast-compile=" + fast);
  }
  std::string key = "framefuse-cuda-1|nvrtc " + std::to_string(nv.major) + "." + std::to_string(nv.minor) + "|";
  for (const auto& o : options) key += o + " ";
  key += "|" + source;
  // NB: the entry's key is the name's hash, not the key itself (a whole module's source).
  std::string dir = cuda_cache_dir();
  std::string name = content_hash(key) + ".cubin";
  if (!dir.empty()) {
    std::string cubin;
    if (inductor::cache_load(dir, name, name, &cubin)) {
      if (stats) {
        stats->disk_hit = true;
        stats->cache_path = dir + "/" + name;
      }
      return cubin;
    }
  }

  nvrtcProgram prog = nullptr;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, source.c_str(), "framefuse_module.cu", 0, nullptr, nullptr);
  if (r != 0) throw_internal(__FILE__, __LINE__, std::string("nvrtcCreateProgram: ") + nv.nvrtcGetErrorString(r));
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  auto t0 = std::chrono::steady_clock::now();
  r = nv.nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t log_size = 0;
  nv.nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nv.nvrtcGetProgramLog(prog, log.data());
  if (r != 0) {
    nv.nvrtcDestroyProgram(&prog);
    throw_internal(__FILE__, __LINE__,
                   std::string("NVRTC rejected generated CUDA source (") + nv.nvrtcGetErrorString(r) + "):\n" + log +
                       "\n" + numbered(source));
  }
  size_t size = 0;
  nv.nvrtcGetCUBINSize(prog, &size);
  std::string cubin(size, '\0');
  if (size) nv.nvrtcGetCUBIN(prog, cubin.data());
  nv.nvrtcDestroyProgram(&prog);
  FF_CHECK(size > 0, "NVRTC produced an empty cubin for " + arch);
  if (stats) {
    stats->nvrtc_ms = ms;
    stats->cache_path = dir.empty() ? "" : dir + "/" + name;
  }
  if (!dir.empty()) inductor::cache_store(dir, name, name, cubin);
  return cubin;
}

std::vector<std::string> compile_cubins(const std::vector<std::string>& sources, const std::string& arch,
                                        std::vector<CompileStats>* stats, int threads) {
  size_t n = sources.size();
  std::vector<std::string> cubins(n);
  std::vector<CompileStats> st(n);
  nvrtc();  // NB: load the library (which may ask Python where it lives) on the calling thread
  inductor::cache_dir_usable(cuda_cache_dir());  // and check the cache directory (a refusal is logged)
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  size_t nthreads = std::min<size_t>(n, static_cast<size_t>(threads));
  if (nthreads <= 1) {
    for (size_t i = 0; i < n; ++i) cubins[i] = compile_cubin(sources[i], arch, &st[i]);
  } else {
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::exception_ptr first_error;
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        try {
          cubins[i] = compile_cubin(sources[i], arch, &st[i]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    if (first_error) std::rethrow_exception(first_error);
  }
  if (stats) *stats = std::move(st);
  return cubins;
}

}  // namespace ff::cuda
