#include "inductor/cuda/cuda_launch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/kernel_cache.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff::cuda {

LaunchConfig launch_config(const KernelPlan& plan, int v, int block, const DeviceInfo& dev, int64_t items) {
  const KernelVariant& var = plan.variants.at(static_cast<size_t>(v));
  LaunchConfig c;
  c.variant = v;
  if (var.fixed_block) {
    c.block_x = static_cast<unsigned>(var.block_x);
    c.block_y = static_cast<unsigned>(var.block_y);
    // NB: a symbolic row count may leave the last block part full (the kernel clamps its rows).
    int64_t rows = var.rows_on_x ? var.block_x : var.block_y;
    c.grid = static_cast<unsigned>((items + rows - 1) / rows);
    return c;
  }
  c.block_x = static_cast<unsigned>(block > 0 ? block : var.block_x);
  int64_t per_block = static_cast<int64_t>(c.block_x) * std::max(1, var.vec);
  int64_t needed = (items + per_block - 1) / per_block;
  // NB: past a few dozen resident blocks per SM, a grid-stride loop beats more blocks.
  int64_t cap = static_cast<int64_t>(std::max(1, dev.sm_count)) * 32;
  c.grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, cap)));
  return c;
}

CudaModule::CudaModule(std::vector<std::string> cubins, std::vector<CompileUnit> units, std::string arch,
                       std::vector<KernelPlan> plans, std::string source_hash, bool autotune)
    : cubins_(std::move(cubins)),
      units_(std::move(units)),
      arch_(std::move(arch)),
      plans_(std::move(plans)),
      hash_(std::move(source_hash)),
      autotune_(autotune) {
  FF_CHECK(cubins_.size() == units_.size(), "one cubin per compile unit");
  for (const KernelPlan& plan : plans_)
    for (const KernelVariant& v : plan.variants)
      FF_CHECK(v.unit >= 0 && static_cast<size_t>(v.unit) < units_.size(), "variant " + v.fn + " has no compile unit");
  described_.resize(plans_.size());
}

CudaModule::~CudaModule() {
  // NB: no cuModuleUnload at exit: the driver may already be shutting down with the process.
}

CudaModule::PerDevice& CudaModule::loaded(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return it->second;
  ensure_context(device);
  PerDevice pd;
  pd.modules.assign(units_.size(), nullptr);
  for (const KernelPlan& plan : plans_) pd.fns.emplace_back(plan.variants.size(), nullptr);
  pd.chosen.resize(plans_.size());
  pd.info = &device_info(device);
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u].lazy) load_unit(pd, u);
  return devices_.emplace(device, std::move(pd)).first->second;
}

void CudaModule::load_unit(PerDevice& pd, size_t u) {
  if (pd.modules[u]) return;
  if (cubins_[u].empty()) {
    CompileStats st;
    cubins_[u] = compile_cubin(units_[u].source, arch_, &st);
    if (log_enabled(LogArtifact::perf_hints) && st.nvrtc_ms > 0) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", st.nvrtc_ms);
      log_emit(LogArtifact::perf_hints, "CUDA: misaligned pointers: compiled a scalar fallback in " + std::string(ms) + " ms");
    }
  }
  const DriverApi& d = driver();
  check_driver(d.cuModuleLoadData(&pd.modules[u], cubins_[u].data()), "cuModuleLoadData");
  for (size_t k = 0; k < plans_.size(); ++k)
    for (size_t v = 0; v < plans_[k].variants.size(); ++v) {
      const KernelVariant& var = plans_[k].variants[v];
      if (static_cast<size_t>(var.unit) != u) continue;
      CUfunction fn = nullptr;
      check_driver(d.cuModuleGetFunction(&fn, pd.modules[u], var.fn.c_str()), ("cuModuleGetFunction " + var.fn).c_str());
      pd.fns[k][v] = fn;
    }
}

void CudaModule::raw_launch(CUfunction fn, const LaunchConfig& c, const Call& call, const std::vector<void*>& ptrs,
                            CUstream stream) {
  const KernelPlan& plan = plans_[call.k];
  constexpr size_t kInline = 32;
  void* vals_inline[kInline];
  void* args_inline[kInline];
  std::vector<void*> vals_heap, args_heap;
  void** vals = vals_inline;
  void** args = args_inline;
  size_t n = plan.buffers.size();
  size_t nargs = n + plan.symbols.size();
  if (nargs > kInline) {
    vals_heap.resize(n);
    args_heap.resize(nargs);
    vals = vals_heap.data();
    args = args_heap.data();
  }
  for (size_t i = 0; i < n; ++i) {
    vals[i] = ptrs.at(static_cast<size_t>(plan.buffers[i]));
    args[i] = &vals[i];
  }
  // NB: the symbols' values are read by the driver during the call: pointers into the bindings.
  FF_CHECK(plan.symbols.empty() || call.bindings, "kernel " + plan.name + " launched without its sizes");
  for (size_t j = 0; j < plan.symbols.size(); ++j)
    args[n + j] = const_cast<int64_t*>(call.bindings + plan.symbols[j]);
  check_driver(driver().cuLaunchKernel(fn, c.grid, 1, 1, c.block_x, c.block_y, 1, 0, stream, args, nullptr),
               ("cuLaunchKernel " + plan.variants[static_cast<size_t>(c.variant)].fn).c_str());
}

namespace {

bool variant_fits(const KernelVariant& v, const std::vector<void*>& ptrs) {
  for (auto [buf, align] : v.aligned)
    if (reinterpret_cast<uintptr_t>(ptrs.at(static_cast<size_t>(buf))) % static_cast<uintptr_t>(align) != 0) return false;
  return true;
}

bool loads_what_it_stores(const KernelPlan& plan, const std::vector<void*>& ptrs) {
  // Re-running a kernel while tuning must not change its result: buffers are distinct pointers.
  std::vector<void*> seen;
  for (int b : plan.buffers) seen.push_back(ptrs.at(static_cast<size_t>(b)));
  std::sort(seen.begin(), seen.end());
  return std::adjacent_find(seen.begin(), seen.end()) != seen.end();
}

}  // namespace

LaunchConfig CudaModule::tune(PerDevice& pd, const Call& call, const std::vector<void*>& ptrs, CUstream stream, int device,
                              const std::vector<int>& variants) {
  size_t k = call.k;
  const KernelPlan& plan = plans_[k];
  const DeviceInfo& dev = device_info(device);
  std::vector<LaunchConfig> cands;
  for (int v : variants) {
    if (plan.variants[static_cast<size_t>(v)].fixed_block) cands.push_back(launch_config(plan, v, 0, dev, call.items));
    else
      for (int b : {128, 256, 512, 1024}) cands.push_back(launch_config(plan, v, b, dev, call.items));
  }
  // NB: a symbolic kernel is timed at the sizes of its first call with these alignments.
  std::string key = hash_ + "|" + std::to_string(k) + "|" + dev.arch() + "|" + std::to_string(dev.sm_count) + "|";
  for (int v : variants) key += std::to_string(v) + ",";
  std::string dir = cuda_cache_dir();
  std::string name = "tune-" + content_hash(key) + ".txt";
  if (!dir.empty()) {
    std::string body;
    if (inductor::cache_load(dir, name, name, &body) && !body.empty()) {
      size_t idx = std::strtoull(body.c_str(), nullptr, 10);
      if (idx < cands.size()) return cands[idx];
    }
  }
  const DriverApi& d = driver();
  CUevent start = nullptr, stop = nullptr;
  check_driver(d.cuEventCreate(&start, 0), "cuEventCreate");
  check_driver(d.cuEventCreate(&stop, 0), "cuEventCreate");
  size_t best = 0;
  float best_ms = 1e30f;
  std::string report;
  for (size_t i = 0; i < cands.size(); ++i) {
    CUfunction fn = pd.fns[k][static_cast<size_t>(cands[i].variant)];
    for (int w = 0; w < 2; ++w) raw_launch(fn, cands[i], call, ptrs, stream);
    constexpr int kReps = 10;
    check_driver(d.cuEventRecord(start, stream), "cuEventRecord");
    for (int r = 0; r < kReps; ++r) raw_launch(fn, cands[i], call, ptrs, stream);
    check_driver(d.cuEventRecord(stop, stream), "cuEventRecord");
    check_driver(d.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    check_driver(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    ms /= kReps;
    char us[32];
    std::snprintf(us, sizeof us, "%.2f", static_cast<double>(ms) * 1000.0);
    report += "  " + plan.variants[static_cast<size_t>(cands[i].variant)].fn + " block " + std::to_string(cands[i].block_x) +
              "x" + std::to_string(cands[i].block_y) + " grid " + std::to_string(cands[i].grid) + ": " + us + " us\n";
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  if (log_enabled(LogArtifact::perf_hints))
    log_emit(LogArtifact::perf_hints, "max-autotune " + plan.name + ":\n" + report);
  if (!dir.empty()) inductor::cache_store(dir, name, name, std::to_string(best));
  return cands[best];
}

LaunchConfig CudaModule::choose(PerDevice& pd, const Call& call, const std::vector<void*>& ptrs, CUstream stream, int device) {
  size_t k = call.k;
  const KernelPlan& plan = plans_[k];
  uint64_t mask = 0;
  std::vector<int> fitting;
  for (size_t v = 0; v < plan.variants.size(); ++v)
    if (variant_fits(plan.variants[v], ptrs)) {
      mask |= uint64_t(1) << std::min<size_t>(v, 63);
      fitting.push_back(static_cast<int>(v));
    }
  auto& memo = pd.chosen[k];
  auto it = memo.find(mask);
  if (it != memo.end()) {
    if (!plan.items.is_symbolic()) return it->second;
    return launch_config(plan, it->second.variant, static_cast<int>(it->second.block_x), *pd.info, call.items);
  }
  FF_CHECK(!fitting.empty(), "kernel " + plan.name + " has no variant for unaligned pointers");
  LaunchConfig c;
  int capturing = 0;
  if (driver().cuStreamIsCapturing) driver().cuStreamIsCapturing(stream, &capturing);
  bool tuning = autotune_ && !capturing && plan.rerunnable && !loads_what_it_stores(plan, ptrs);
  // NB: a lazy unit is only loaded when no eagerly compiled variant fits (misaligned pointers).
  if (!tuning || std::all_of(fitting.begin(), fitting.end(), [&](int v) { return units_[static_cast<size_t>(plan.variants[static_cast<size_t>(v)].unit)].lazy; }))
    fitting.resize(1);
  else
    fitting.erase(std::remove_if(fitting.begin(), fitting.end(),
                                 [&](int v) { return units_[static_cast<size_t>(plan.variants[static_cast<size_t>(v)].unit)].lazy; }),
                  fitting.end());
  for (int v : fitting) load_unit(pd, static_cast<size_t>(plan.variants[static_cast<size_t>(v)].unit));
  if (tuning)
    c = tune(pd, call, ptrs, stream, device, fitting);
  else
    c = launch_config(plan, fitting.front(), 0, *pd.info, call.items);
  memo.emplace(mask, c);
  described_[k] = plan.name + ": " + plan.variants[static_cast<size_t>(c.variant)].fn + " block " + std::to_string(c.block_x) +
                  "x" + std::to_string(c.block_y) + " grid " + std::to_string(c.grid);
  return c;
}

void CudaModule::launch(size_t k, const std::vector<void*>& ptrs, CUstream stream, int device, int64_t items,
                        const int64_t* bindings) {
  std::lock_guard<std::mutex> lock(mu_);
  FF_CHECK(k < plans_.size(), "kernel index out of range");
  if (items == 0) return;
  ensure_context(device);
  PerDevice& pd = loaded(device);
  Call call{k, items, bindings};
  LaunchConfig c = choose(pd, call, ptrs, stream, device);
  raw_launch(pd.fns[k][static_cast<size_t>(c.variant)], c, call, ptrs, stream);
}

std::vector<std::string> CudaModule::describe() const { return described_; }

}  // namespace ff::cuda
