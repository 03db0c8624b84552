// parallel_run's own thread pool: a test binary loads no libgomp, so the fallback runs the loops.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "graph/op_registry.h"
#include "inductor/cpu_codegen.h"
#include "inductor/parallel.h"
#include "inductor/schedule.h"

namespace ff {
namespace {

using inductor::parallel_run;

// Each call records which ranges it was given: hits[i] counts index i, ranges[lo] = hi.
struct Record {
  std::vector<std::atomic<int>> hits;
  std::vector<std::atomic<int64_t>> ranges;
  explicit Record(int64_t extent) : hits(static_cast<size_t>(extent)), ranges(static_cast<size_t>(extent)) {}
};

void record_range(void** buffers, int64_t begin, int64_t end) {
  auto* r = static_cast<Record*>(buffers[0]);
  r->ranges[static_cast<size_t>(begin)] = end;
  for (int64_t i = begin; i < end; ++i) r->hits[static_cast<size_t>(i)].fetch_add(1);
}

// True when [0, extent) was covered exactly once, in the ranges GOMP's static split gives.
bool covered_as_split(Record& r, int64_t extent, int threads) {
  int n = static_cast<int>(std::min<int64_t>(threads, extent));
  for (int64_t i = 0; i < extent; ++i)
    if (r.hits[static_cast<size_t>(i)] != 1) return false;
  for (int t = 0; t < n; ++t) {
    int64_t lo = extent * t / n, hi = extent * (t + 1) / n;
    if (lo < hi && r.ranges[static_cast<size_t>(lo)] != hi) return false;
  }
  return true;
}

// Each range waits (up to 5 s) until `threads` ranges have started: returns how many distinct threads
// ran them, so a caller that ends up running every range alone shows as 1.
int threads_running_at_once(int threads) {
  struct Meet {
    std::atomic<int> entered{0};
    int want;
    std::mutex mu;
    std::set<std::thread::id> ids;
  } meet;
  meet.want = threads;
  auto body = [](void** buffers, int64_t, int64_t) {
    auto* m = static_cast<Meet*>(buffers[0]);
    m->entered.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (m->entered.load() < m->want && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    std::lock_guard<std::mutex> lk(m->mu);
    m->ids.insert(std::this_thread::get_id());
  };
  void* buffers[1] = {&meet};
  parallel_run(body, buffers, threads, threads);
  return static_cast<int>(meet.ids.size());
}

TEST(Parallel, TheFallbackIsThePool) {
  // NB: if a libgomp ever gets linked into the tests, these cases test nothing of the pool.
  EXPECT_EQ(inductor::parallel_backend(), "thread pool");
}

TEST(Parallel, EveryIndexOnceInTheStaticSplit) {
  for (int64_t extent : {1, 2, 3, 7, 64, 1000})
    for (int threads : {1, 2, 3, 4, 8, 13}) {
      Record r(extent);
      void* buffers[1] = {&r};
      parallel_run(record_range, buffers, extent, threads);
      EXPECT_TRUE(covered_as_split(r, extent, threads)) << "extent " << extent << ", threads " << threads;
    }
}

TEST(Parallel, ThreadsAreStartedOnceAndKept) {
  Record warm(8);
  void* wb[1] = {&warm};
  parallel_run(record_range, wb, 8, 4);
  int started = inductor::parallel_pool_threads();
  EXPECT_GE(started, 3);
  for (int i = 0; i < 200; ++i) {
    Record r(8);
    void* buffers[1] = {&r};
    parallel_run(record_range, buffers, 8, 4);
    ASSERT_TRUE(covered_as_split(r, 8, 4)) << "call " << i;
  }
  EXPECT_EQ(inductor::parallel_pool_threads(), started);
}

TEST(Parallel, RangesRunOnSeveralThreadsAtOnce) {
  EXPECT_EQ(threads_running_at_once(2), 2);
  EXPECT_EQ(threads_running_at_once(4), 4);
}

TEST(Parallel, ConcurrentCallersEachGetTheirWholeRange) {
  // NB: compiled graphs call parallel_run with the GIL released, so Python threads may call it at once.
  constexpr int kCallers = 4, kCalls = 100;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < kCalls; ++i) {
        int64_t extent = 16 + c * 7 + i % 5;
        Record r(extent);
        void* buffers[1] = {&r};
        parallel_run(record_range, buffers, extent, 3);
        if (!covered_as_split(r, extent, 3)) failures.fetch_add(1);
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Parallel, AForkedChildGetsAPoolOfItsOwn) {
  // The parent's workers exist in the parent only: the child must start its own, or its kernels run
  // on one thread (or hang, had the fork come while a parent thread held the pool).
  ASSERT_EQ(threads_running_at_once(3), 3);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a hung child dies of SIGALRM instead of hanging the test
    Record r(64);
    void* buffers[1] = {&r};
    parallel_run(record_range, buffers, 64, 4);
    if (!covered_as_split(r, 64, 4)) _exit(1);
    _exit(threads_running_at_once(3) == 3 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

NodeId input(Graph& g, const char* name, std::vector<int64_t> sizes) {
  return g.add_placeholder(name, ValueMeta::of_tensor(TensorMeta::contiguous(std::move(sizes), DType::Float32)));
}
NodeId call(Graph& g, const char* op, std::vector<Value> pos) {
  const OpDef& d = op_def(*op_by_name(op));
  std::string err;
  auto bound = bind_call(d, pos, {}, g, &err);
  EXPECT_TRUE(bound.has_value()) << err;
  auto meta = infer_meta(d, *bound, g);
  return g.add_call(d.id, *bound, *meta, op);
}

TEST(Parallel, AFusedKernelOnThePoolMatchesItsSerialRunBitForBit) {
  if (!inductor::cpu_codegen_available()) GTEST_SKIP() << "built without LLVM";
  Graph g;
  NodeId x = input(g, "x", {37, 300});
  NodeId a = call(g, "add", {Value::of_node(call(g, "sin", {Value::of_node(x)})), Value::of_node(call(g, "cos", {Value::of_node(x)}))});
  g.set_output(Value::tuple({Value::of_node(a)}));
  auto p = inductor::compile_to_loop_ir(g);
  auto m = inductor::compile_cpu(p, {});
  ASSERT_EQ(p.kernels.size(), 1u);
  const auto& k = p.kernels[0];
  ASSERT_GT(k.root.extent, 1);
  ASSERT_EQ(k.buffers(), (std::vector<int>{0, 1}));  // x, then the output
  const size_t n = 37 * 300;
  std::vector<float> xs(n + 16), serial(n + 16, -1.0f), pooled(n + 16, -2.0f);
  for (size_t i = 0; i < n; ++i) xs[i] = static_cast<float>(i) * 0.003f - 17.0f;
  int64_t no_symbols = 0;
  void* sb[3] = {xs.data(), serial.data(), &no_symbols};
  m->kernels[0](sb, 0, k.root.extent);
  for (int threads : {2, 3, 5}) {
    std::fill(pooled.begin(), pooled.end(), -2.0f);
    void* pb[3] = {xs.data(), pooled.data(), &no_symbols};
    parallel_run(m->kernels[0], pb, k.root.extent, threads);
    EXPECT_EQ(std::memcmp(serial.data(), pooled.data(), n * sizeof(float)), 0) << threads << " threads";
    EXPECT_NEAR(pooled[n - 1], std::sin(xs[n - 1]) + std::cos(xs[n - 1]), 2e-6);
  }
}

}  // namespace
}  // namespace ff
