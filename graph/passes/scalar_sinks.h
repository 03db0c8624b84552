// A graph whose Python numbers read from tensors (x.item() under config capture_scalar_outputs) are
// only returned, split in two: the tensor work, which the code generators compile, and the numbers,
// which the reference runner computes from the tensors they read after it.
#pragma once

#include <optional>
#include <vector>

#include "graph/ir.h"

namespace ff {

struct ScalarSinkSplit {
  // The graph without its numbers: the original outputs (None where a number was), then each tensor
  // a number reads that is not among them.
  Graph tensors;
  // The numbers: one placeholder per tensor they read, their calls, and a tuple of the numbers the
  // original graph returns.
  Graph scalars;
  std::vector<int> operand_outputs;  // per placeholder of `scalars`: its index in `tensors`' outputs
  std::vector<int> scalar_outputs;   // per output of `scalars`: its index in the original outputs
};

// nullopt where the split would not give eager's results or is not needed: no number in the graph,
// a tensor op that takes a number, a graph that writes a tensor (a number must read the tensor as
// it was when item() ran; without writes the tensor after the graph is the same), data-dependent
// sizes, or an output that is not a flat tuple.
std::optional<ScalarSinkSplit> split_scalar_sinks(const Graph& g);

}  // namespace ff
