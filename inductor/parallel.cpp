#include "inductor/parallel.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace ff::inductor {

namespace {

struct Gomp {
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;
  int (*thread_num)() = nullptr;
  int (*num_threads)() = nullptr;
  std::string path;
};

int find_libgomp(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  const char* name = info->dlpi_name;
  if (name && std::strstr(name, "libgomp") && out->empty()) *out = name;
  return 0;
}

const Gomp* gomp() {
  static const Gomp* g = []() -> const Gomp* {
    std::string path;
    dl_iterate_phdr(find_libgomp, &path);
    if (path.empty()) return nullptr;
    // NB: RTLD_NOLOAD: only ever the copy already in the process.
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (!h) return nullptr;
    auto* r = new Gomp;
    r->parallel = reinterpret_cast<decltype(r->parallel)>(dlsym(h, "GOMP_parallel"));
    r->thread_num = reinterpret_cast<decltype(r->thread_num)>(dlsym(h, "omp_get_thread_num"));
    r->num_threads = reinterpret_cast<decltype(r->num_threads)>(dlsym(h, "omp_get_num_threads"));
    r->path = path;
    if (!r->parallel || !r->thread_num || !r->num_threads) {
      delete r;
      return nullptr;
    }
    return r;
  }();
  return g;
}

struct Job {
  KernelFn fn;
  void** buffers;
  int64_t extent;
  const Gomp* g;
};

void range_for(KernelFn fn, void** buffers, int64_t extent, int t, int n) {
  int64_t lo = extent * t / n, hi = extent * (t + 1) / n;
  if (lo < hi) fn(buffers, lo, hi);
}

void gomp_body(void* data) {
  auto* job = static_cast<Job*>(data);
  range_for(job->fn, job->buffers, job->extent, job->g->thread_num(), job->g->num_threads());
}

}  // namespace

void parallel_run(KernelFn fn, void** buffers, int64_t extent, int threads) {
  threads = static_cast<int>(std::min<int64_t>(threads, extent));
  if (threads <= 1) {
    if (extent > 0) fn(buffers, 0, extent);
    return;
  }
  if (const Gomp* g = gomp()) {
    Job job{fn, buffers, extent, g};
    g->parallel(gomp_body, &job, static_cast<unsigned>(threads), 0);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(range_for, fn, buffers, extent, t, threads);
  range_for(fn, buffers, extent, 0, threads);
  for (auto& th : pool) th.join();
}

std::string parallel_backend() {
  if (const Gomp* g = gomp()) return "libgomp (" + g->path + ")";
  return "std::thread";
}

}  // namespace ff::inductor
