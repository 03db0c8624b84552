#include "inductor/cuda/attention.h"

#include <cstdint>
#include <initializer_list>

#include "graph/passes/fuse_attention.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "src/base/errors.h"

namespace ff::cuda {
namespace {

// NB: the same layout on both sides of cuLaunchKernel (8-byte fields, then two 4-byte ones).
struct AttnArgs {
  const void *q, *k, *v, *mask;
  void* out;
  long long q_b, q_h, q_l, k_b, k_h, k_l, v_b, v_h, v_l, m_b, m_h, m_l, m_s, o_b, o_h, o_l;
  long long H, L, S;
  float scale;
  int has_mask;
};
static_assert(sizeof(AttnArgs) == 5 * 8 + 19 * 8 + 8);

constexpr int kRows = 64;     // query rows per block
constexpr int kThreads = 128;  // 4 warps of 16 rows

int key_tile(int head_dim) { return head_dim <= 64 ? 32 : 16; }

std::string kernel_name(int head_dim) { return "ff_attention_tf32_d" + std::to_string(head_dim); }

}  // namespace

std::string tf32_attention_source(const std::vector<int>& head_dims) {
  std::string text = std::string(kFullOptimization) + R"CUDA(// framefuse: float32 attention, TF32 products on tensor cores (inductor/cuda/attention.h)
#define FF_ATTN_NEG_INF (-__int_as_float(0x7f800000))
struct FfAttnArgs {
  const float *q, *k, *v; const unsigned char* mask; float* out;
  long long q_b, q_h, q_l, k_b, k_h, k_l, v_b, v_h, v_l, m_b, m_h, m_l, m_s, o_b, o_h, o_l;
  long long H, L, S;
  float scale; int has_mask;
};

__device__ __forceinline__ unsigned ff_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// c += a b: a 16x8 (row-major fragment), b 8x8 (column-major), c 16x8 in float32.
__device__ __forceinline__ void ff_mma_tf32(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                            unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared without registers; zero-filled where `valid` is false.
__device__ __forceinline__ void ff_cp16(void* dst, const void* src, bool valid) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void ff_cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void ff_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// No zero byte in x (bools are 0 or 1).
__device__ __forceinline__ bool ff_all_bytes(unsigned x) { return ((x - 0x01010101u) & ~x & 0x80808080u) == 0; }

// Fragments of mma.m16n8k8 (lane = 4 g + t): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4);
// b0 (t, g), b1 (t+4, g); c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
// The scores' c fragments become the probabilities' a fragments in place: the product over keys
// reads its k index t as key 2t and t+4 as key 2t+1 (a0 = c0, a1 = c2, a2 = c1, a3 = c3), and v's
// b fragment is read with the same order (b0 from key 2t, b1 from key 2t+1).
// Two stages: the next key tile (K, V and its mask, by cp.async) loads while this one computes;
// K and V are rounded to TF32 in shared memory once they land.
template <int D, int BC>
__device__ __forceinline__ void ff_attention_tf32(const FfAttnArgs& p) {
  constexpr int BR = 64, NT = 128, KS = D / 8, NC = BC / 8, LD = D + 4;  // LD: conflict-free fragment reads
  constexpr int MASK_VECS = BR * BC / 16, KV_VECS = BC * D / 4;
  __shared__ __align__(16) float ks[2][BC * LD];
  __shared__ __align__(16) float vs[2][BC * LD];
  __shared__ __align__(16) unsigned char ms[2][BR * BC];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int row0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest (causal) rows first
  const long long b = blockIdx.x / p.H, h = blockIdx.x % p.H;
  const float* q = p.q + b * p.q_b + h * p.q_h;
  const float* k = p.k + b * p.k_b + h * p.k_h;
  const float* v = p.v + b * p.v_b + h * p.v_h;
  const unsigned char* mask = p.has_mask ? p.mask + b * p.m_b + h * p.m_h : nullptr;
  const bool mask_vec = mask && p.m_s == 1 && p.m_l % 16 == 0 && reinterpret_cast<unsigned long long>(mask) % 16 == 0;
  const int L = static_cast<int>(p.L), S = static_cast<int>(p.S);
  const int r0 = row0 + warp * 16 + g, r1 = r0 + 8;
  // Tile j's K, V (and its mask where whole 16-byte rows of it are in bounds) into stage j & 1.
  auto load = [&](int j) {
    const int col0 = j * BC, st = j & 1;
#pragma unroll
    for (int i = 0; i < (KV_VECS + NT - 1) / NT; ++i) {
      const int e = tid + i * NT, r = e / (D / 4), c = e % (D / 4) * 4;
      const bool in = col0 + r < S;
      if (e < KV_VECS) {
        ff_cp16(&ks[st][r * LD + c], in ? k + (long long)(col0 + r) * p.k_l + c : k, in);
        ff_cp16(&vs[st][r * LD + c], in ? v + (long long)(col0 + r) * p.v_l + c : v, in);
      }
    }
    if (mask_vec && col0 + BC <= S) {
#pragma unroll
      for (int i = 0; i < (MASK_VECS + NT - 1) / NT; ++i) {
        const int e = tid + i * NT, r = e / (BC / 16), c = e % (BC / 16) * 16;
        const bool in = row0 + r < L;
        if (e < MASK_VECS) ff_cp16(&ms[st][r * BC + c], in ? mask + (long long)(row0 + r) * p.m_l + col0 + c : mask, in);
      }
    }
  };
  const int tiles = (S + BC - 1) / BC;
  load(0);
  ff_cp_commit();
  unsigned qa[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    const int c = kk * 8 + t;
    qa[kk][0] = ff_tf32(r0 < L ? q[r0 * p.q_l + c] : 0.f);
    qa[kk][1] = ff_tf32(r1 < L ? q[r1 * p.q_l + c] : 0.f);
    qa[kk][2] = ff_tf32(r0 < L ? q[r0 * p.q_l + c + 4] : 0.f);
    qa[kk][3] = ff_tf32(r1 < L ? q[r1 * p.q_l + c + 4] : 0.f);
  }
  float o[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) o[kk][0] = o[kk][1] = o[kk][2] = o[kk][3] = 0.f;
  float m0 = FF_ATTN_NEG_INF, m1 = FF_ATTN_NEG_INF, l0 = 0.f, l1 = 0.f;  // running max and (this thread's) sum per row
  for (int j = 0; j < tiles; ++j) {
    const int col0 = j * BC, st = j & 1;
    if (j + 1 < tiles) load(j + 1);
    ff_cp_commit();
    ff_cp_wait<1>();
    // Each thread rounds the pieces of K and V it copied (its own copies are visible to it now).
#pragma unroll
    for (int i = 0; i < (KV_VECS + NT - 1) / NT; ++i) {
      const int e = tid + i * NT, r = e / (D / 4), c = e % (D / 4) * 4;
      if (e < KV_VECS) {
        for (float* at : {&ks[st][r * LD + c], &vs[st][r * LD + c]}) {
          const float4 x = *reinterpret_cast<const float4*>(at);
          *reinterpret_cast<uint4*>(at) = make_uint4(ff_tf32(x.x), ff_tf32(x.y), ff_tf32(x.z), ff_tf32(x.w));
        }
      }
    }
    __syncthreads();
    int all = col0 + BC <= S;  // every score of the tile is kept
    if (mask) {
      int any = 0;
      if (mask_vec && col0 + BC <= S) {
        all &= row0 + BR <= L;
#pragma unroll
        for (int i = 0; i < (MASK_VECS + NT - 1) / NT; ++i) {
          const int e = tid + i * NT;
          if (e < MASK_VECS) {
            const uint4 w = *reinterpret_cast<const uint4*>(&ms[st][e * 16]);
            any |= (w.x | w.y | w.z | w.w) != 0;
            all &= ff_all_bytes(w.x) && ff_all_bytes(w.y) && ff_all_bytes(w.z) && ff_all_bytes(w.w);
          }
        }
      } else {
        all &= row0 + BR <= L;
        for (int i = 0; i < BR * BC / NT; ++i) {
          const int e = tid + i * NT, r = row0 + e / BC, c = col0 + e % BC;
          const unsigned char keep = r < L && c < S && mask[(long long)r * p.m_l + (long long)c * p.m_s];
          ms[st][e] = keep;
          any |= keep;
          all &= keep;
        }
      }
      any = __syncthreads_or(any);
      all = __syncthreads_and(all);
      if (!any) continue;  // NB: the next stage's loads stay in flight; the loop's barrier comes first
    }
    float s[NC][4];
#pragma unroll
    for (int n = 0; n < NC; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
      for (int n = 0; n < NC; ++n) {
        const float* kr = &ks[st][(n * 8 + g) * LD + kk * 8 + t];
        ff_mma_tf32(s[n], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], __float_as_uint(kr[0]), __float_as_uint(kr[4]));
      }
    }
    float mx0 = FF_ATTN_NEG_INF, mx1 = FF_ATTN_NEG_INF;
#pragma unroll
    for (int n = 0; n < NC; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rr = warp * 16 + g + (i >= 2 ? 8 : 0), cc = n * 8 + 2 * t + (i & 1);
        const bool keep = all || (mask ? ms[st][rr * BC + cc] != 0 : col0 + cc < S);
        const float x = keep ? s[n][i] * p.scale : FF_ATTN_NEG_INF;
        s[n][i] = x;
        if (i < 2) mx0 = fmaxf(mx0, x);
        else mx1 = fmaxf(mx1, x);
      }
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    // NB: a row with nothing kept yet keeps a max of -inf; exp against 0 then gives 0, not NaN.
    const float base0 = n0 == FF_ATTN_NEG_INF ? 0.f : n0, base1 = n1 == FF_ATTN_NEG_INF ? 0.f : n1;
    const float a0 = expf(m0 - base0), a1 = expf(m1 - base1);
    m0 = n0;
    m1 = n1;
    l0 *= a0;
    l1 *= a1;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      o[kk][0] *= a0;
      o[kk][1] *= a0;
      o[kk][2] *= a1;
      o[kk][3] *= a1;
    }
#pragma unroll
    for (int n = 0; n < NC; ++n) {
      s[n][0] = expf(s[n][0] - base0);
      s[n][1] = expf(s[n][1] - base0);
      s[n][2] = expf(s[n][2] - base1);
      s[n][3] = expf(s[n][3] - base1);
      l0 += s[n][0] + s[n][1];
      l1 += s[n][2] + s[n][3];
      const unsigned p0 = ff_tf32(s[n][0]), p1 = ff_tf32(s[n][2]), p2 = ff_tf32(s[n][1]), p3 = ff_tf32(s[n][3]);
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const float* vr = &vs[st][(n * 8 + 2 * t) * LD + kk * 8 + g];
        ff_mma_tf32(o[kk], p0, p1, p2, p3, __float_as_uint(vr[0]), __float_as_uint(vr[LD]));
      }
    }
    __syncthreads();  // stage st is loaded again at the next iteration
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float* out = p.out + b * p.o_b + h * p.o_h;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    const int c = kk * 8 + 2 * t;
    if (r0 < L) {
      out[(long long)r0 * p.o_l + c] = o[kk][0] / l0;
      out[(long long)r0 * p.o_l + c + 1] = o[kk][1] / l0;
    }
    if (r1 < L) {
      out[(long long)r1 * p.o_l + c] = o[kk][2] / l1;
      out[(long long)r1 * p.o_l + c + 1] = o[kk][3] / l1;
    }
  }
}
)CUDA";
  for (int d : head_dims) {
    FF_CHECK(cuda_tf32_attention_fits(d, d), "TF32 attention of head dim " + std::to_string(d));
    // NB: 3 blocks an SM for head dims up to 64 (at most 168 registers a thread).
    text += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kThreads) + ", " + (d <= 64 ? "3" : "1") + ") " + kernel_name(d) +
            "(const __grid_constant__ FfAttnArgs p) { ff_attention_tf32<" + std::to_string(d) + ", " +
            std::to_string(key_tile(d)) + ">(p); }\n";
  }
  return text;
}

bool tf32_attention_aligned(const AttentionCall& c) {
  auto aligned = [](const float* p, std::initializer_list<int64_t> strides) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    for (int64_t s : strides)
      if (s % 4 != 0) return false;
    return true;
  };
  return aligned(c.q, {c.q_b, c.q_h, c.q_l}) && aligned(c.k, {c.k_b, c.k_h, c.k_l}) && aligned(c.v, {c.v_b, c.v_h, c.v_l}) &&
         c.L > 0 && c.S > 0 && c.S < (int64_t{1} << 31) && c.B * c.H < (int64_t{1} << 31) && (c.L + kRows - 1) / kRows <= 65535;
}

void Tf32Attention::launch(const AttentionCall& c, CUstream stream, int device) {
  FF_CHECK(tf32_attention_aligned(c), "TF32 attention launched on operands it does not take");
  AttnArgs a{c.q, c.k, c.v, c.mask, c.out, c.q_b, c.q_h, c.q_l, c.k_b, c.k_h, c.k_l, c.v_b, c.v_h, c.v_l,
             c.m_b, c.m_h, c.m_l, c.m_s, c.o_b, c.o_h, c.o_l, c.H, c.L, c.S, c.scale, c.mask ? 1 : 0};
  CUfunction fn = cubin_.function(device, kernel_name(c.head_dim));
  // NB: (batch, head) along x, query tiles along y: blocks start in order of their index, so the
  // longest rows of a causal mask (the last tiles, taken first) start first everywhere.
  unsigned grid_x = static_cast<unsigned>(c.B * c.H), grid_y = static_cast<unsigned>((c.L + kRows - 1) / kRows);
  void* args[] = {&a};
  check_driver(driver().cuLaunchKernel(fn, grid_x, grid_y, 1, kThreads, 1, 1, 0, stream, args, nullptr),
               "cuLaunchKernel ff_attention_tf32");
}

}  // namespace ff::cuda
