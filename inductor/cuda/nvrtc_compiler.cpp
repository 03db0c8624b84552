#include "inductor/cuda/nvrtc_compiler.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <atomic>
#include <exception>
#include <mutex>
#include <vector>

#include "inductor/cuda/cuda_api.h"
#include "src/config.h"
#include "src/errors.h"
#include "src/logging.h"

namespace ff::cuda {
namespace {

constexpr char kMagic[4] = {'F', 'F', 'C', 'U'};
constexpr uint32_t kFormatVersion = 1;

uint64_t fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // Final avalanche so that nearby inputs differ in every digit.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

std::string numbered(const std::string& src) {
  std::istringstream in(src);
  std::ostringstream out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) out << n << "\t" << line << "\n";
  return out.str();
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// NB: write to a temporary name and rename, so a concurrent reader never sees half a file.
void write_file_atomic(const std::string& path, const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // NB: programs are compiled on several threads: the temporary name is unique per thread too.
  std::string tmp = path + ".tmp" + std::to_string(getpid()) + "-" +
                    std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;  // an unwritable cache only costs a recompile
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

std::string content_hash(const std::string& data) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(fnv1a(data, 0)),
                static_cast<unsigned long long>(fnv1a(data, 0x9e3779b97f4a7c15ull)));
  return buf;
}

std::string pack_cache_entry(const std::string& payload) {
  std::string out(kMagic, 4);
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(kFormatVersion, 4);
  put(payload.size(), 8);
  put(fnv1a(payload, 7), 8);
  return out + payload;
}

bool unpack_cache_entry(const std::string& file, std::string* payload) {
  constexpr size_t kHeader = 24;
  if (file.size() < kHeader || std::memcmp(file.data(), kMagic, 4) != 0) return false;
  auto get = [&](size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(file[at + i])) << (8 * i);
    return v;
  };
  if (get(4, 4) != kFormatVersion) return false;
  uint64_t size = get(8, 8);
  if (size != file.size() - kHeader) return false;
  std::string body = file.substr(kHeader);
  if (fnv1a(body, 7) != get(16, 8)) return false;
  *payload = std::move(body);
  return true;
}

bool read_cache_file(const std::string& path, std::string* out) { return read_file(path, out); }
void write_cache_file(const std::string& path, const std::string& data) { write_file_atomic(path, data); }

std::string cuda_cache_dir() {
  std::string base = config().cache_dir;
  if (base.empty()) {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = std::string(x) + "/framefuse";
    else if (const char* h = std::getenv("HOME"); h && *h) base = std::string(h) + "/.cache/framefuse";
    else base = "framefuse_cache";
  }
  return base + "/cuda";
}

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
  std::string path;
  if (config().disk_cache) {
    path = cuda_cache_dir() + "/" + content_hash(key) + ".cubin";
    std::string file, cubin;
    if (read_file(path, &file) && unpack_cache_entry(file, &cubin)) {
      if (stats) {
        stats->disk_hit = true;
        stats->cache_path = path;
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
    stats->cache_path = path;
  }
  if (!path.empty()) write_file_atomic(path, pack_cache_entry(cubin));
  return cubin;
}

std::vector<std::string> compile_cubins(const std::vector<std::string>& sources, const std::string& arch,
                                        std::vector<CompileStats>* stats, int threads) {
  size_t n = sources.size();
  std::vector<std::string> cubins(n);
  std::vector<CompileStats> st(n);
  nvrtc();  // NB: load the library (which may ask Python where it lives) on the calling thread
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
