// Convolution bias as a pointwise add (a pass of compile_for_cuda, inductor/pipeline.h). cuDNN adds
// a convolution's bias in a kernel of its own, one more pass over the output; as
// `conv(x, w, None) + bias.reshape(C, 1, ...)` the add fuses into the kernel that follows the
// convolution (its batch norm, activation or layout change), as torch.compile's kernels do. Not on
// the CPU, where oneDNN adds the bias inside the convolution.
#pragma once

#include "graph/ir.h"

namespace ff {

// Every conv1d/conv2d call with a bias that a call of generated code reads (not only extern calls
// or the output: the add would be a kernel of its own), except where the add's metadata would
// differ from the call's (dtype, sizes, strides): there the call stays as it is.
Graph split_conv_bias(const Graph& g);

}  // namespace ff
