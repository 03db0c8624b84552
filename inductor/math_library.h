// The math library generated code calls (math_library.inc): torch's special functions in double
// precision, one source for the CPU renderer (the functions compiled into framefuse) and the CUDA
// renderer (the source text, put into the NVRTC programs that call one).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

// The symbol generated CPU code calls for fn ("ff_math_digamma": double(double[, double])) and the
// address of its definition in this process.
std::string math_fn_symbol(loop::MathFn fn);
void* math_fn_address(loop::MathFn fn);
std::vector<std::pair<std::string, void*>> math_fn_symbols();  // (symbol, address) of every function

// math_library.inc as CUDA C++ (__device__ functions), for the programs whose source calls
// ff_math_*; it needs the CUDA prelude's FF_INF_D and FF_NAN_D.
const std::string& cuda_math_library();

}  // namespace ff::inductor
