#include "inductor/parallel.h"

#include <dlfcn.h>
#include <link.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

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

// The fallback where no libgomp is loaded: a pool of threads started once and kept, sleeping between
// calls (starting and joining threads on every call cost more than the small kernels themselves).
// A call splits [0, extent) into `n` ranges exactly as GOMP's team does (range t of n); the caller and
// up to n-1 workers take ranges off one counter, so which thread runs a range never matters.
//
// NB: our own pool rather than a library's: torch's at::parallel_for needs torch's C++ headers and
// libraries, which _C never links (one build serves every torch); LLVM is optional and LLVM 14's
// ThreadPool has no per-call wait (only wait() for every task of the pool, which would make
// concurrent callers wait on each other's kernels; its futures allocate per task, and measured with
// them it took 1.3-2x this pool's time per call of a small kernel at 4 to 16 threads).
struct PoolJob {
  KernelFn fn;
  void** buffers;
  int64_t extent;
  int n;
  std::atomic<int> next{0};  // the next range to take
  int joined = 0;            // workers that took part; guarded by Pool::mu
  int active = 0;            // workers still inside run(); guarded by Pool::mu

  void run() {
    for (int t; (t = next.fetch_add(1, std::memory_order_relaxed)) < n;) range_for(fn, buffers, extent, t, n);
  }
};

class Pool {
 public:
  // The process's pool. NB: a forked child inherits the pool's memory but none of its threads (and
  // maybe a mutex that a parent thread held): it gets a fresh pool, the inherited one is left alone.
  static Pool& get() {
    static std::atomic<Pool*> pool{nullptr};
    Pool* p = pool.load(std::memory_order_acquire);
    if (p && p->pid_ == getpid()) return *p;
    auto* fresh = new Pool;
    if (pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread installed one first
    return *p;
  }

  void run(KernelFn fn, void** buffers, int64_t extent, int threads) {
    // One call at a time has the workers; a concurrent caller runs its ranges on its own thread
    // (the workers are busy with the other call's kernel anyway), the same ranges as ever.
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) {
      for (int t = 0; t < threads; ++t) range_for(fn, buffers, extent, t, threads);
      return;
    }
    grow(threads - 1);
    PoolJob job{fn, buffers, extent, threads};
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    job.run();
    // NB: workers join only while job_ points at this job, and each leaves through `active`: once
    // job_ is cleared and active is 0, no thread touches `job` (a stack object) again.
    std::unique_lock<std::mutex> lk(mu_);
    job_ = nullptr;
    done_.wait(lk, [&] { return job.active == 0; });
  }

  int size() {
    std::lock_guard<std::mutex> lk(busy_);
    return workers_;
  }

 private:
  Pool() : pid_(getpid()) {}
  // NB: only a pool that lost the race in get() (no workers yet) is deleted. The process's pool lives
  // until exit, its workers detached: joining them at static destruction could wait on a kernel that
  // another thread is still running.
  ~Pool() = default;

  void grow(int want) {
    for (; workers_ < want; ++workers_) std::thread([this] { work(); }).detach();
  }

  void work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      wake_.wait(lk, [&] { return job_ && generation_ != seen; });
      seen = generation_;
      PoolJob* job = job_;
      if (job->joined >= job->n - 1) continue;  // enough threads have this call
      ++job->joined;
      ++job->active;
      lk.unlock();
      job->run();
      lk.lock();
      if (--job->active == 0) done_.notify_all();
    }
  }

  const pid_t pid_;
  std::mutex busy_;  // held by the call that has the workers; guards workers_
  int workers_ = 0;
  std::mutex mu_;  // guards job_, generation_ and the job's joined/active
  std::condition_variable wake_, done_;
  PoolJob* job_ = nullptr;
  uint64_t generation_ = 0;
};

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
  Pool::get().run(fn, buffers, extent, threads);
}

std::string parallel_backend() {
  if (const Gomp* g = gomp()) return "libgomp (" + g->path + ")";
  return "thread pool";
}

int parallel_pool_threads() { return gomp() ? 0 : Pool::get().size(); }

}  // namespace ff::inductor
