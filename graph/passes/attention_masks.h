// Attention masks whose elements the graph itself determines (a graph pass of both pipelines).
//
// Library code builds SDPA masks from index arithmetic: transformers under a compiler (where it
// may not test the padding mask's values) builds `(arange(S) + 0)[None, None, :, None] >= 0`
// expanded to [B, 1, S, S], which is True everywhere, and a decoder's causal mask as
// `kv_idx[None, None, None, :] <= q_idx[None, None, :, None]`. Eager without a compiler passes no
// mask and `is_causal` there. With an expanded bool mask torch's fused attention kernels decline
// (its last stride is 0) and SDPA runs its math path: on an H200, fp32 ViT-base B32 took 2.7 ms
// more per call than with no mask.
//
// The pass proves what such a mask holds by following the arithmetic that made it
// (`IndexForm`: an integer tensor whose element at index i is c + sum_d a_d * i_d; comparisons of
// two forms, bounded over the mask's index ranges; &, |, ~; ones/zeros/full; views and indexing)
// and rewrites the call:
//   - a bool mask True everywhere: attn_mask=None (the same attention, exactly);
//   - a bool mask with element [..., i, j] = (j <= i) for every i, j, other dims free, and the
//     query and key lengths equal (the same number or the same symbolic size): attn_mask=None, is_causal=True (SDPA's own causal
//     mask is that lower triangle).
//   - a float mask `torch.where(c, x, y)` with c True everywhere (T5's position bias under a mask
//     True everywhere): x, when it is a tensor of the where's dtype (y for c False everywhere).
// Masks read from graph inputs (a padding mask, a module buffer) are not known and stay.
#pragma once

#include "graph/ir.h"

namespace ff {

Graph attention_masks(const Graph& g);

}  // namespace ff
