// Constants made on the CPU and moved to the GPU (a pass of compile_for_cuda, inductor/pipeline.h):
// `torch.zeros(shape).to(device=x.device, dtype=torch.bool)` (timm's edgenext) puts a CPU tensor in a
// graph of CUDA tensors, which the CUDA backend does not run (the whole graph would run eagerly). A
// zeros/ones call whose one reader is a `.to()` onto a CUDA device becomes a zeros/ones call made
// there in the `.to()`'s dtype (0 and 1 convert exactly to every dtype); full and (integer) arange only
// where the dtype stays. Random ops are never moved: the CPU and CUDA generators draw different numbers.
#pragma once

#include "graph/ir.h"

namespace ff {

Graph creations_on_device(const Graph& g);

}  // namespace ff
