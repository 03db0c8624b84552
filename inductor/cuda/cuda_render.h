// Loop IR -> CUDA C++ (DESIGN.md decision 7: one loop IR, two renderers). One source module per
// graph; NVRTC compiles it (nvrtc_compiler.h) and the runtime launches its kernels.
//
// How a loop IR kernel maps onto the GPU. The kernel root is one parallel loop; the perfect nest of
// loops under it (each body a single loop) is flattened into "rows". Then:
//   Pointwise  the innermost body has no loops: threads of a grid-stride loop each take VEC
//              consecutive flat indices, with 16-byte vector loads/stores for the buffers whose
//              index is the flat index (a second, scalar variant runs when pointers are misaligned).
//   RowBlock   the innermost body holds loops (reductions with their prologue and epilogue:
//              softmax, layer norm): one row per `ty` of a block of TX x R threads; each top-level
//              loop of the row body is spread over the TX threads (vectorized where contiguous);
//              a reduction into a row-level local ends with a warp-shuffle + shared-memory block
//              reduction that leaves the result in every thread; row-level stores are done by one
//              thread.
//   ColumnBlock reductions whose loads are contiguous across rows rather than along them (a column
//              sum, a channel mean of an NHWC tensor) with work enough per row: a block of R rows
//              in consecutive lanes (threadIdx.x) times T threads per row (threadIdx.y); each
//              top-level loop of the row body, its perfect nest flattened, spread over the T
//              threads, its reductions combined through shared memory; rows must divide by R.
//   Serial     anything else: one thread per row, the row body as written.
// Sizes are compile-time constants in the source, except in a program with symbolic sizes (dynamic
// shapes): its kernels take the size symbols they read as arguments after their buffers, and the
// source relies only on what holds at every binding (a vector width divides a symbolic extent
// exactly; rows per block divide the rows), choosing thread shapes and strategies by the traced
// sizes. The grid and, for Pointwise/Serial, the block size are chosen at launch (cuda_launch.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::cuda {

#define FF_CUDA_STRATEGIES(X) X(Pointwise) X(RowBlock) X(ColumnBlock) X(Serial)
enum class Strategy : uint8_t {
#define FF_CUDA_STRATEGY_ENUM(e) e,
  FF_CUDA_STRATEGIES(FF_CUDA_STRATEGY_ENUM)
#undef FF_CUDA_STRATEGY_ENUM
};
const char* strategy_name(Strategy s);

// One compiled function of a kernel and how to launch it.
struct KernelVariant {
  std::string fn;              // extern "C" function name in the module
  int block_x = 256, block_y = 1;  // RowBlock: fixed by the source; others: default, tunable
  bool fixed_block = false;
  bool rows_on_x = false;      // ColumnBlock: block_x rows per block (else block_y)
  int vec = 1;                 // Pointwise: elements per thread step in this variant
  // Buffers (ids) whose pointers must be aligned to `align` bytes for this variant (vector access).
  std::vector<std::pair<int, int>> aligned;
  int unit = 0;                // ModuleSource::units index of the program that defines `fn`
};

struct KernelPlan {
  std::string name;            // the loop IR kernel's name
  Strategy strategy = Strategy::Serial;
  SymInt items = 0;            // Pointwise: flat elements; RowBlock/Serial: rows
  std::vector<SymbolId> symbols;  // kernel ABI: after the buffers, these symbols' values (int64)
  bool wide_index = false;     // 64-bit indices (else 32-bit: see needs_wide_index)
  int vec = 1;                 // Pointwise: elements per thread step
  int rows_per_block = 1;      // RowBlock, ColumnBlock
  std::vector<int> buffers;    // kernel ABI: one pointer per buffer, in this order
  bool rerunnable = true;      // no buffer is both loaded and stored (max-autotune may re-run it)
  // Candidates, best first by the heuristic; the runtime picks the first whose alignment holds,
  // max-autotune times them all. The last one never needs alignment.
  std::vector<KernelVariant> variants;
};

struct RenderOptions {
  // Render every candidate block shape of RowBlock kernels (for max-autotune), not just the
  // heuristic's choice.
  bool all_variants = false;
  // How many eager compile units to split the kernels into (at most one per kernel).
  int max_units = 1;
};

// One NVRTC program: the prelude and the functions of some kernels. A graph's kernels are split
// into several units so that they compile in parallel and hit the cubin cache independently; the
// scalar fallbacks of vectorized kernels (needed only for misaligned pointers) go to `lazy` units,
// compiled the first time a launch needs one.
struct CompileUnit {
  std::string source;
  bool lazy = false;
  int functions = 0;
};

struct ModuleSource {
  std::string source;               // the whole module (every function), for inspection and tests
  std::vector<KernelPlan> kernels;  // indexed like Program::kernels
  std::vector<CompileUnit> units;   // what is compiled: eager units first, then lazy ones
};

// Renders every kernel of `p`. Throws ff::InternalError on loop IR it cannot render.
ModuleSource render_module(const loop::Program& p, const RenderOptions& opts = {});

// Whether an index of kernel `k` of `p` can reach 2^30 (it then needs 64-bit indices). A symbolic
// program's kernels are rendered by their traced sizes: the runtime asks this of each binding's
// specialised program, and one that needs more than the source has is compiled for its sizes.
bool needs_wide_index(const loop::Program& p, const loop::Kernel& k);

// The fixed part of every module: conversions for f16/bf16, NaN-propagating min/max, Python-style
// floor division, warp and block reductions. Exposed for tests.
const std::string& cuda_prelude();

}  // namespace ff::cuda
