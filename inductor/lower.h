// Lowering: graph IR (torch-level ops) -> loop IR Program.
//
// Torch-level composites are decomposed here (DESIGN.md decision 5): softmax, log_softmax,
// layer_norm, batch_norm (eval), group_norm, gelu, silu, linear (extern matmul + epilogue) ...
// Pointwise results are kept as expressions and inlined into their consumers (the first level of
// fusion); a value becomes a buffer ("realized") only when it must: a graph output, an operand of
// an extern call, a reduction result, or an expensive value with several users. Every node that
// has no lowering becomes an extern call executed by torch; it never sends the graph to eager.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"
#include "inductor/loop_ir.h"

namespace ff::inductor {

// Lowers `g`. Throws ff::Unsupported when the graph cannot be compiled as a whole (a non-CPU
// tensor, an in-place op); the caller then runs the graph on the reference runner.
// `notes` receives one line per decision worth logging (extern calls and why, realizations).
// `like`: whose eager kernels to follow where eager CPU and eager CUDA compute an op by different
// formulas. With EagerDevice::CPU, tensors on other devices are refused; the loop IR itself is
// device-neutral (it reads sizes, strides and dtypes), so the CUDA pipeline lowers a graph of CUDA
// tensors as it is.
enum class EagerDevice { CPU,
                         CUDA };
loop::Program lower_graph(const Graph& g, std::vector<std::string>* notes = nullptr, EagerDevice like = EagerDevice::CPU);

// The strides eager reports for the size-1 dimensions of p's outputs (they address no memory, so
// the buffer's may differ), where the output's sizes are g's. A symbolic size that may be 1 is left
// for the program specialised to a call's sizes (the CPU runtime calls this again on it).
void report_eager_strides(loop::Program& p, const Graph& g);

}  // namespace ff::inductor
