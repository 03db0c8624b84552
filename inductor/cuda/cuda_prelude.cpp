// The fixed part of every generated module. NB: it includes no header: NVRTC has no include path
// by default and the `nvidia-cuda-nvrtc` wheel ships no cuda_fp16.h, so f16/bf16 conversions are
// written here (bit manipulation for bf16, the PTX cvt instructions for f16).
#include "inductor/cuda/cuda_render.h"

namespace ff::cuda {

const std::string& cuda_prelude() {
  static const std::string text = R"CUDA(// ---- framefuse CUDA prelude ----
#define FF_DEV __device__ __forceinline__
#define FF_INF_F __int_as_float(0x7f800000)
#define FF_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define FF_NAN_F __int_as_float(0x7fc00000)
#define FF_NAN_D __longlong_as_double(0x7ff8000000000000LL)

FF_DEV float ff_bf16_to_f32(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
FF_DEV unsigned short ff_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (unsigned short)(u >> 16);
}
FF_DEV float ff_f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
FF_DEV unsigned short ff_f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }

#define FF_UNARY(name, f32, f64) \
  FF_DEV float name(float x) { return f32; } \
  FF_DEV double name(double x) { return f64; }
FF_UNARY(ff_exp, expf(x), exp(x))
FF_UNARY(ff_log, logf(x), log(x))
FF_UNARY(ff_sin, sinf(x), sin(x))
FF_UNARY(ff_cos, cosf(x), cos(x))
FF_DEV void ff_sincos(float x, float* s, float* c) { sincosf(x, s, c); }
FF_DEV void ff_sincos(double x, double* s, double* c) { sincos(x, s, c); }
FF_UNARY(ff_tan, tanf(x), tan(x))
FF_UNARY(ff_tanh, tanhf(x), tanh(x))
FF_UNARY(ff_sqrt, sqrtf(x), sqrt(x))
FF_UNARY(ff_rsqrt, rsqrtf(x), rsqrt(x))
FF_UNARY(ff_erf, erff(x), erf(x))
FF_UNARY(ff_floor, floorf(x), floor(x))
FF_UNARY(ff_ceil, ceilf(x), ceil(x))
FF_UNARY(ff_log1p, log1pf(x), log1p(x))
FF_UNARY(ff_expm1, expm1f(x), expm1(x))
FF_UNARY(ff_exp2, exp2f(x), exp2(x))
FF_UNARY(ff_log2, log2f(x), log2(x))
FF_UNARY(ff_log10, log10f(x), log10(x))
FF_UNARY(ff_asin, asinf(x), asin(x))
FF_UNARY(ff_acos, acosf(x), acos(x))
FF_UNARY(ff_atan, atanf(x), atan(x))
FF_UNARY(ff_sinh, sinhf(x), sinh(x))
FF_UNARY(ff_cosh, coshf(x), cosh(x))
FF_UNARY(ff_erfc, erfcf(x), erfc(x))
FF_UNARY(ff_asinh, asinhf(x), asinh(x))
FF_UNARY(ff_acosh, acoshf(x), acosh(x))
FF_UNARY(ff_atanh, atanhf(x), atanh(x))
FF_UNARY(ff_round, nearbyintf(x), nearbyint(x))
FF_DEV bool ff_signbit(float x) { return __float_as_int(x) < 0; }
FF_DEV bool ff_signbit(double x) { return __double_as_longlong(x) < 0; }
FF_UNARY(ff_sigmoid, 1.0f / (1.0f + expf(-x)), 1.0 / (1.0 + exp(-x)))
FF_UNARY(ff_recip, 1.0f / x, 1.0 / x)
// NB: the sign bit cleared, not fabsf: NVRTC folds `fabsf(x) > -0.3f` to true, NaN included (H200,
// NVRTC 13; eager gives false for a NaN). A NaN becomes the one abs.f32 gives (all payload bits set).
FF_DEV float ff_abs(float x) { return __uint_as_float(x != x ? 0x7fffffffu : __float_as_uint(x) & 0x7fffffffu); }
FF_DEV double ff_abs(double x) {
  return __longlong_as_double(x != x ? 0x7fffffffffffffffLL : __double_as_longlong(x) & 0x7fffffffffffffffLL);
}
FF_DEV int ff_abs(int x) { return x < 0 ? (int)(0u - (unsigned)x) : x; }  // INT_MIN stays INT_MIN, as in torch
FF_DEV long long ff_abs(long long x) { return x < 0 ? (long long)(0ull - (unsigned long long)x) : x; }
FF_DEV bool ff_abs(bool x) { return x; }

// NaN-propagating max/min, like torch.maximum and amax.
template <class T> FF_DEV T ff_max_(T a, T b) { return a > b ? a : b; }
template <class T> FF_DEV T ff_min_(T a, T b) { return a < b ? a : b; }
template <> FF_DEV float ff_max_(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
template <> FF_DEV float ff_min_(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
template <> FF_DEV double ff_max_(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
template <> FF_DEV double ff_min_(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
template <> FF_DEV bool ff_max_(bool a, bool b) { return a || b; }
template <> FF_DEV bool ff_min_(bool a, bool b) { return a && b; }
// NB: int (every int dtype narrower than 64 bits computes in it) compared as unsigned with the sign
// bit flipped: ptxas (sm_90, CUDA 12.8 and 13) fuses two signed 32-bit max (min) into one
// three-operand instruction and drops a negation of an operand of the inner one (max(max(-a, b),
// -c) gave max(-a, b, c) on an H200); the unsigned form keeps it.
template <> FF_DEV int ff_max_(int a, int b) {
  unsigned x = (unsigned)a ^ 0x80000000u, y = (unsigned)b ^ 0x80000000u;
  return (int)((x > y ? x : y) ^ 0x80000000u);
}
template <> FF_DEV int ff_min_(int a, int b) {
  unsigned x = (unsigned)a ^ 0x80000000u, y = (unsigned)b ^ 0x80000000u;
  return (int)((x < y ? x : y) ^ 0x80000000u);
}

template <class T> FF_DEV T ff_pow_(T a, T b) {
  if (b < 0) return (a == 1) ? T(1) : (a == -1) ? ((b % 2) ? T(-1) : T(1)) : T(0);
  T r = 1;
  while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
  return r;
}
template <> FF_DEV float ff_pow_(float a, float b) { return powf(a, b); }
template <> FF_DEV double ff_pow_(double a, double b) { return pow(a, b); }

// Python semantics: the quotient rounds toward -inf, the remainder has the divisor's sign.
template <class T> FF_DEV T ff_floordiv_(T a, T b) {
  T q = a / b;
  return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <> FF_DEV float ff_floordiv_(float a, float b) { return floorf(a / b); }
template <> FF_DEV double ff_floordiv_(double a, double b) { return floor(a / b); }
template <class T> FF_DEV T ff_mod_(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <> FF_DEV float ff_mod_(float a, float b) {
  float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
template <> FF_DEV double ff_mod_(double a, double b) {
  double r = fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}

// C's remainder (eager's fmod): the quotient truncated.
template <class T> FF_DEV T ff_fmod_(T a, T b) { return a % b; }
template <> FF_DEV float ff_fmod_(float a, float b) { return fmodf(a, b); }
template <> FF_DEV double ff_fmod_(double a, double b) { return fmod(a, b); }
template <class T> FF_DEV T ff_atan2_(T a, T b);
template <> FF_DEV float ff_atan2_(float a, float b) { return atan2f(a, b); }
template <> FF_DEV double ff_atan2_(double a, double b) { return atan2(a, b); }

// NB: operands of one IR op have one IR type, but index literals render as int next to long long
// values; these wrappers convert both to the common type first.
#define FF_BINARY(name)                                                       \
  template <class A, class B> FF_DEV auto name(A a, B b) {                    \
    typedef decltype(a + b) C;                                                \
    return name##_<C>(C(a), C(b));                                            \
  }
FF_BINARY(ff_max)
FF_BINARY(ff_min)
FF_BINARY(ff_pow)
FF_BINARY(ff_floordiv)
FF_BINARY(ff_mod)
FF_BINARY(ff_fmod)
FF_BINARY(ff_atan2)

// Reductions: OP 0 sum, 1 prod, 2 max, 3 min.
template <int OP, class T> FF_DEV T ff_comb(T a, T b) {
  if constexpr (OP == 0) return a + b;
  else if constexpr (OP == 1) return a * b;
  else if constexpr (OP == 2) return ff_max_<T>(a, b);
  else return ff_min_<T>(a, b);
}
template <int OP, class T> FF_DEV T ff_warp_reduce(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = ff_comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Reduces v over the TX threads of this row (threadIdx.y); every thread gets the result.
// smem holds blockDim.y * TX / 32 values.
template <int OP, int TX, class T> FF_DEV T ff_block_reduce(T v, T* smem) {
  v = ff_warp_reduce<OP>(v);
  if constexpr (TX > 32) {
    constexpr int NW = TX / 32;
    T* row = smem + threadIdx.y * NW;
    __syncthreads();  // the previous reduction's readers are done with smem
    if ((threadIdx.x & 31) == 0) row[threadIdx.x >> 5] = v;
    __syncthreads();
    v = row[0];
#pragma unroll
    for (int i = 1; i < NW; ++i) v = ff_comb<OP>(v, row[i]);
  }
  return v;
}

// Reduces v over the TY threads of this column (threadIdx.x is the row in the block, threadIdx.y the
// thread within the row); every thread gets the result. smem holds TX * TY values.
template <int OP, int TX, int TY, class T> FF_DEV T ff_column_reduce(T v, T* smem) {
  __syncthreads();  // the previous reduction's readers are done with smem
  smem[threadIdx.y * TX + threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int i = 1; i < TY; ++i) v = ff_comb<OP>(v, smem[i * TX + threadIdx.x]);
    smem[threadIdx.x] = v;
  }
  __syncthreads();
  return smem[threadIdx.x];
}

template <class T, int N> struct alignas(sizeof(T) * N) ff_vec { T v[N]; };
// ---- end of prelude ----
)CUDA";
  return text;
}

}  // namespace ff::cuda
