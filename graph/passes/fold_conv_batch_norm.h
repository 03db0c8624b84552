// Inference conv nets on CUDA: a 2-d convolution followed by an eval-mode batch norm becomes one
// convolution with folded weights and bias, and a relu (or an add of a residual and a relu) after
// it becomes cuDNN's fused epilogue (torch.cudnn_convolution_relu / _add_relu): the pointwise
// kernel between two convolutions disappears. The folded weights are graph inputs that the runner
// computes from the originals and caches per version of every tensor they are made from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace ff {

// A graph input the runner derives: scale = weight / sqrt(running_var + eps) (weight absent: 1),
//   is_weight: conv_weight * scale[:, None, None, None]
//   else:      (conv_bias - running_mean) * scale + bias  (conv_bias / bias absent: 0)
// Source indices are graph inputs of the rewritten graph (they keep their original positions);
// -1 where absent.
struct FoldedInput {
  int index = -1;
  bool is_weight = true;
  int conv_weight = -1, conv_bias = -1, mean = -1, var = -1, weight = -1, bias = -1;
  double eps = 1e-5;
};

struct ConvFusionGraph {
  Graph graph;                      // the original inputs first, then one per FoldedInput
  std::vector<FoldedInput> folded;  // in input order after the originals
  int fused = 0;                    // batch norms folded
};

// nullopt (with *why) when no convolution + eval batch norm pair qualifies. `relu_ops`: torch has
// the fused cuDNN convolutions (they are only used then).
std::optional<ConvFusionGraph> fold_conv_batch_norm(const Graph& g, bool relu_ops, std::string* why);

}  // namespace ff
