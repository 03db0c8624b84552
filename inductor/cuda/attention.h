// Float32 attention with its two products in TF32 on tensor cores, in one kernel:
// softmax(q kᵀ * scale, masked) v, the scores never in memory (FlashAttention's tiling, online
// softmax).
//
// Where it runs: a scaled_dot_product_attention extern call of float32 CUDA tensors while torch
// runs float32 matmuls in TF32 (graph/passes/fuse_attention.h rewrites explicit attention into
// that call then, for the head dims cuda_tf32_attention_fits takes). Eager computes the same
// attention as two TF32 batched products around a float32 softmax; torch's own SDPA kernels have
// no TF32 path for float32 and run slower than eager's products (on an H100, nanoGPT B8 T512:
// 0.95 ms against 0.70 per call).
//
// Arithmetic, against eager's TF32 products: q, k, the probabilities and v are rounded to TF32
// (round to nearest, as the products round them), every sum is in float32, the scale multiplies
// the float32 scores as eager's `* scale` does, masked scores are -inf, exp is expf. The softmax is
// online (a running row max rescales the partial sums), so its rounding differs from eager's
// within TF32's. A row whose scores are all masked is NaN (0/0), as in eager; a NaN or +inf score
// makes its row NaN, as in eager.
//
// Tiles: a block of 4 warps takes 64 query rows of one (batch, head); each warp keeps 16 rows'
// q fragments and output in registers and runs mma.m16n8k8 TF32. Key tiles (32 keys, 16 for head
// dims over 64) and their mask go through shared memory in two stages: the next tile loads
// (cp.async) while this one computes. A tile whose mask hides it from every one of the block's
// rows is not computed (the upper triangle of a causal mask: about half the work), one that hides
// nothing is applied without reading the mask per score.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_api.h"

namespace ff::cuda {

// One call: pointers, and strides in elements per (batch, head, row); the last dim of q, k, v and
// out is contiguous. The mask (bool, true = attend; null: none) has strides per (batch, head, row,
// key), 0 where it broadcasts.
struct AttentionCall {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const unsigned char* mask = nullptr;
  float* out = nullptr;
  int64_t q_b = 0, q_h = 0, q_l = 0, k_b = 0, k_h = 0, k_l = 0, v_b = 0, v_h = 0, v_l = 0;
  int64_t m_b = 0, m_h = 0, m_l = 0, m_s = 0, o_b = 0, o_h = 0, o_l = 0;
  int64_t B = 0, H = 0, L = 0, S = 0;
  int head_dim = 0;
  float scale = 1.0f;
};

// The CUDA source with one kernel per head dim in `head_dims` (each as cuda_tf32_attention_fits).
std::string tf32_attention_source(const std::vector<int>& head_dims);

// Whether the kernel takes a call of these pointers and strides: q, k, v 16-byte aligned with
// row, head and batch strides that keep them so; B * H within a grid dimension.
bool tf32_attention_aligned(const AttentionCall& c);

class Tf32Attention {
 public:
  explicit Tf32Attention(std::string cubin) : cubin_(std::move(cubin)) {}
  // Launches on `stream` (the kernel for c.head_dim must be in the cubin). Checks
  // tf32_attention_aligned first.
  void launch(const AttentionCall& c, CUstream stream, int device);

 private:
  LoadedCubin cubin_;
};

}  // namespace ff::cuda
