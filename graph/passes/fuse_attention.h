// Explicit attention -> one torch.nn.functional.scaled_dot_product_attention call (SDPA).
//
// The pattern (nanoGPT's non-flash branch and its relatives):
//
//   s = q @ k.transpose(-2, -1)            matmul / bmm / @
//   s = s * c  |  s / c  |  (nothing)      c a Python number: SDPA's scale
//   s = s.masked_fill(m, -inf)             bool m, fill where True: attn_mask = ~m
//     | s + a  |  (nothing)                a float mask of q's dtype: attn_mask = a
//   p = softmax(s, dim=-1)                 no dtype argument
//   p = dropout(p, ...)                    only where it is the identity (not training, or p == 0)
//   y = p @ v
//
// becomes
//
//   y = F.scaled_dot_product_attention(q, k, v, attn_mask=..., scale=...)
//
// The rewrite keeps eager's results exactly, up to rounding:
//  - q, k, v: same floating dtype (float32/64, float16, bfloat16), same device, >= 3 dims with equal
//    batch dims (no matmul broadcasting); the mask broadcasts into the scores without growing them;
//  - every intermediate (s, the scaled and masked scores, p) has the next step as its only user:
//    one that is returned or used twice keeps the explicit form;
//  - NB: a row whose keys are all masked is NaN in eager (softmax of all -inf) while SDPA gives
//    zeros or NaN depending on its kernel. The mask is a tensor whose contents the graph does not
//    know (nanoGPT's causal buffer is a module buffer the user may change), so with a mask the
//    rewrite appends `y.masked_fill(bad_rows, nan)`: bad_rows = m.all(-1) for a bool mask, and for
//    a float mask the rows with no finite entry below +inf or with a NaN / +inf (eager: NaN too).
//    It is one small reduction over the mask and a pointwise step fused with y's consumer;
//  - the scale is passed only when it differs from SDPA's default 1/sqrt(E); where the installed
//    torch has no `scale=` keyword (2.0), only the default scale is rewritten;
//  - the result keeps the replaced matmul's metadata (runtimes copy SDPA's result into that layout
//    where its kernel chose another);
//  - float32 attention on CUDA while torch runs float32 matmuls in TF32
//    (torch.backends.cuda.matmul.allow_tf32, set_float32_matmul_precision("high")): eager's
//    matmuls then run on tensor cores and SDPA's float32 kernels do not (on an H100, nanoGPT
//    B8 T512 d768, 4 layers: its memory-efficient kernel took 0.95 ms per call where the two TF32
//    matmuls and the fused softmax take 0.70 ms). framefuse's CUDA backend runs such a call with
//    its own kernel instead, TF32 products on tensor cores (inductor/cuda/attention.h), so it is
//    rewritten only where that kernel takes it: cuda_tf32_attention_fits, a bool mask or none,
//    config cuda_tf32_attention on. The rest stays explicit (eager's own arithmetic).
// torch without SDPA (1.13) never sees the rewrite.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace ff {

// What the installed torch offers; set once torch is imported (graph/python/op_callables.cpp).
// Until then (or in C++-only programs) SDPA counts as unavailable and the pass does nothing.
struct AttentionSupport {
  bool sdpa = false;           // torch.nn.functional.scaled_dot_product_attention exists
  bool scale_keyword = false;  // ... and takes `scale=` (torch >= 2.1)
  // Per compile, not per torch: float32 matmuls on CUDA run in TF32 now (then float32 CUDA
  // attention stays explicit).
  bool cuda_tf32_matmul = false;
};
void set_attention_support(AttentionSupport support);

// Head dims (q's E, v's Ev) framefuse's CUDA TF32 attention kernel takes: E == Ev, a multiple of 8
// up to 128.
bool cuda_tf32_attention_fits(int64_t E, int64_t Ev);
AttentionSupport attention_support();

// The rewrite with the installed torch's support, when config().fuse_attention is on.
Graph fuse_attention(const Graph& g);
// As above with explicit support (config not consulted); appends the name of each rewritten
// attention's softmax node to *fired.
Graph fuse_attention(const Graph& g, const AttentionSupport& support, std::vector<std::string>* fired);

}  // namespace ff
