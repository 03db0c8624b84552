// 2-d convolutions of a graph in channels-last, for the CPU and CUDA runtimes (see channels_last.cpp).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace ff {

struct ChannelsLastGraph {
  Graph graph;                 // conv weights as channels-last inputs, metadata recomputed
  std::vector<int> inputs;     // graph input indices (placeholder order) to pass channels-last
  // Those of `inputs` read by a conv whose input is NCHW (typically only the first conv's weight):
  // the others could be converted inside each call without changing any layout in the graph.
  std::vector<int> nchw_fed;
  std::vector<std::pair<NodeId, TensorMeta>> restore;  // outputs to copy back to these layouts
};

// nullopt (with *why) when the graph has no convolution to convert or the rewrite cannot be
// proven to keep every node's shape.
std::optional<ChannelsLastGraph> to_channels_last(const Graph& g, std::string* why);

// Whether `g` calls a 2-d convolution at all (where a refused rewrite is worth a perf hint), and
// how many calls it makes.
bool has_conv2d(const Graph& g);
int count_conv2d(const Graph& g);

}  // namespace ff
