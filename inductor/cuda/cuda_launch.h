// A compiled CUDA module: loads its cubin per device, picks each kernel's launch configuration
// (from sizes, or timed on the device under max-autotune and cached on disk) and launches on the
// caller's stream.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_api.h"
#include "inductor/cuda/cuda_render.h"

namespace ff::cuda {

struct LaunchConfig {
  int variant = 0;
  unsigned grid = 1, block_x = 1, block_y = 1;
};

// The configuration for `plan`'s variant `v` with `block` threads (ignored for fixed blocks) over
// `items` (plan.items at one call's sizes).
LaunchConfig launch_config(const KernelPlan& plan, int v, int block, const DeviceInfo& dev, int64_t items);

class CudaModule {
 public:
  // `cubins[u]` is the compiled ModuleSource unit u ("" for a lazy unit, compiled from
  // `units[u].source` for `arch` the first time a launch needs one of its functions).
  CudaModule(std::vector<std::string> cubins, std::vector<CompileUnit> units, std::string arch,
             std::vector<KernelPlan> plans, std::string source_hash, bool autotune);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  // Launches kernel `k`; `buffer_ptrs` holds a device pointer per Program buffer id. A symbolic
  // program's kernel runs over `items` (its plan's items at this call's sizes) and reads its
  // symbols from `bindings` (symbol id -> value); a static one passes plans()[k].items and null.
  void launch(size_t k, const std::vector<void*>& buffer_ptrs, CUstream stream, int device, int64_t items,
              const int64_t* bindings);

  // What was chosen for each kernel (after the first launch): "k0: ff_k0_v block 256 grid 1056".
  std::vector<std::string> describe() const;
  const std::vector<KernelPlan>& plans() const { return plans_; }

 private:
  struct PerDevice {
    std::vector<CUmodule> modules;                   // [unit], null until loaded
    std::vector<std::vector<CUfunction>> fns;        // [kernel][variant], null until its unit is loaded
    // [kernel] alignment mask -> config (its grid recomputed per call where the items vary)
    std::vector<std::map<uint64_t, LaunchConfig>> chosen;
    const DeviceInfo* info = nullptr;  // device_info(device), looked up once
  };
  PerDevice& loaded(int device);
  void load_unit(PerDevice& pd, size_t unit);
  // Per call of kernel k: its items and the symbol values it reads.
  struct Call {
    size_t k;
    int64_t items;
    const int64_t* bindings;
  };
  LaunchConfig choose(PerDevice& pd, const Call& call, const std::vector<void*>& ptrs, CUstream stream, int device);
  LaunchConfig tune(PerDevice& pd, const Call& call, const std::vector<void*>& ptrs, CUstream stream, int device,
                    const std::vector<int>& variants);
  void raw_launch(CUfunction fn, const LaunchConfig& c, const Call& call, const std::vector<void*>& ptrs, CUstream stream);

  std::vector<std::string> cubins_;
  std::vector<CompileUnit> units_;
  std::string arch_;
  std::vector<KernelPlan> plans_;
  std::string hash_;
  bool autotune_;
  std::mutex mu_;
  std::map<int, PerDevice> devices_;
  std::vector<std::string> described_;
};

}  // namespace ff::cuda
