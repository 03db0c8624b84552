// The math functions the CPU renderer maps to glibc's libmvec vector variants (cpu_llvm.cpp
// add_vector_math): the scalar names LLVM calls for f32 and f64, libmvec's base name and its
// signature letters ("v" per vector operand). Plain data: the renderer's one LLVM translation unit
// reads it.
#pragma once

namespace ff::inductor {

struct LibmvecFn {
  const char* scalar32;
  const char* scalar64;
  const char* base;
  const char* sig;
};

// NB: the functions below the null entry came to libmvec in glibc 2.35; each vector variant is
// declared only where the process can resolve it (Jit::libmvec_235 is in the cache key).
inline constexpr LibmvecFn kLibmvecFns[] = {
    {"llvm.sin.f32", "llvm.sin.f64", "sin", "v"},
    {"llvm.cos.f32", "llvm.cos.f64", "cos", "v"},
    {"llvm.exp.f32", "llvm.exp.f64", "exp", "v"},
    {"llvm.log.f32", "llvm.log.f64", "log", "v"},
    {"llvm.pow.f32", "llvm.pow.f64", "pow", "vv"},
    {"tanf", "tan", "tan", "v"},
    {"tanhf", "tanh", "tanh", "v"},
    {"erff", "erf", "erf", "v"},
    {"log1pf", "log1p", "log1p", "v"},
    {"expm1f", "expm1", "expm1", "v"},
    {"exp2f", "exp2", "exp2", "v"},
    {"log2f", "log2", "log2", "v"},
    {"log10f", "log10", "log10", "v"},
    {"sinf", "sin", "sin", "v"},
    {"cosf", "cos", "cos", "v"},
    {"expf", "exp", "exp", "v"},
    {"logf", "log", "log", "v"},
    {nullptr, nullptr, nullptr, nullptr},
    {"asinf", "asin", "asin", "v"},
    {"acosf", "acos", "acos", "v"},
    {"atanf", "atan", "atan", "v"},
    {"sinhf", "sinh", "sinh", "v"},
    {"coshf", "cosh", "cosh", "v"},
    {"erfcf", "erfc", "erfc", "v"},
    {"asinhf", "asinh", "asinh", "v"},
    {"acoshf", "acosh", "acosh", "v"},
    {"atanhf", "atanh", "atanh", "v"},
    {"atan2f", "atan2", "atan2", "vv"},
};

}  // namespace ff::inductor
