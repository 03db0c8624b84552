// The loop IR: what a fused kernel computes, device-neutral. Both renderers (CPU: LLVM, CUDA:
// NVRTC source) read it; lowering (lower.h) writes it; the loop passes (loop_passes/) rewrite it.
//
// A Program is a list of Buffers and Steps (kernels and extern calls, in execution order).
// A Kernel is a statement tree whose root is one Loop marked `parallel`: the runtime splits that
// loop's range across threads (CPU) or blocks (CUDA). Inside, loops nest freely; each loop variable
// is an i64 in [0, extent). Buffers are addressed in elements through index expressions (i64
// expressions over loop variables: views are index maps, broadcasting is a stride of 0).
//
// Text form (stable; tests compare it):
//
//   kernel k0 (buf0: f32[4096, 4096], buf1: f32[4096, 4096] out)
//     for v0 in 0..4096 parallel:
//       t0: f32 = max_init
//       for v1 in 0..4096:
//         t0 = max(t0, buf0[v0*4096 + v1])
//       ...
//
// NB: expressions are immutable and shared (shared_ptr<const>); rewrites build new trees
// (loop_visitor.h walks and rewrites them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/ir.h"
#include "graph/symint.h"

namespace ff::loop {

// Types values have inside a kernel. Storage dtypes map onto them (dtype_compute_type): small
// ints compute as i32, f16/bf16 as f32.
#define FF_LOOP_SCALAR_TYPES(X) X(Bool, "b") X(I32, "i32") X(I64, "i64") X(F32, "f32") X(F64, "f64")
enum class ScalarType : uint8_t {
#define FF_LOOP_ST_ENUM(e, s) e,
  FF_LOOP_SCALAR_TYPES(FF_LOOP_ST_ENUM)
#undef FF_LOOP_ST_ENUM
};
const char* scalar_type_name(ScalarType t);
ScalarType dtype_compute_type(DType t);
inline bool is_float(ScalarType t) { return t == ScalarType::F32 || t == ScalarType::F64; }

// Unary math. X(name, printed name, float only)
// clang-format off
#define FF_LOOP_UNARY_OPS(X)                                                                      \
  X(Neg, "neg", false) X(Abs, "abs", false) X(Not, "not", false) /* Not: bool only */           \
  X(Exp, "exp", true) X(Log, "log", true) X(Sin, "sin", true) X(Cos, "cos", true)                \
  X(Tan, "tan", true) X(Tanh, "tanh", true) X(Sqrt, "sqrt", true) X(Rsqrt, "rsqrt", true)        \
  X(Erf, "erf", true) X(Sigmoid, "sigmoid", true) X(Floor, "floor", true) X(Ceil, "ceil", true)  \
  X(Reciprocal, "reciprocal", true) X(Log1p, "log1p", true) X(Expm1, "expm1", true)              \
  X(Exp2, "exp2", true) X(Log2, "log2", true) X(Log10, "log10", true)                            \
  X(IsNan, "isnan", true) /* result bool */                                                      \
  X(Asin, "asin", true) X(Acos, "acos", true) X(Atan, "atan", true) X(Sinh, "sinh", true)        \
  X(Cosh, "cosh", true) X(Erfc, "erfc", true)                                                    \
  X(Asinh, "asinh", true) X(Acosh, "acosh", true) X(Atanh, "atanh", true)                        \
  X(Round, "round", true) /* to the nearest integer, ties to even (std::nearbyint) */            \
  X(SignBit, "signbit", true) /* result bool: the sign bit, set for -0.0 and negative NaNs */
// clang-format on
enum class UnaryOp : uint8_t {
#define FF_LOOP_UN_ENUM(e, s, f) e,
  FF_LOOP_UNARY_OPS(FF_LOOP_UN_ENUM)
#undef FF_LOOP_UN_ENUM
};
const char* unary_name(UnaryOp op);  // "tan", "asinh" ...: as printed (and libm's f64 name)

// Binary math; both operands have the same type. Comparisons give bool.
// Max/Min propagate NaN like torch.maximum. Div on ints truncates; FloorDiv/Mod round toward -inf
// (Python semantics; index expressions only ever divide non-negative values). On floats Mod is
// eager's remainder: fmod(a, b), plus b where its sign differs from b's (never floor arithmetic).
// Fmod is C's remainder (the quotient truncated: fmod on floats, % on ints). Atan2 is float only.
// BitAnd/BitOr/BitXor: ints and bools, two's complement. Shl/Shr: ints, shifted by the count
// modulo the type's bit width (what x86 does; the renderers mask it, so no count is undefined);
// Shr is arithmetic (copies the sign bit). NextAfter: floats, C's nextafter.
// clang-format off
#define FF_LOOP_BINARY_OPS(X)                                                                  \
  X(Add, "+") X(Sub, "-") X(Mul, "*") X(Div, "/") X(FloorDiv, "//") X(Mod, "%")                 \
  X(Max, "max") X(Min, "min") X(Pow, "pow")                                                     \
  X(Eq, "==") X(Ne, "!=") X(Lt, "<") X(Le, "<=") X(Gt, ">") X(Ge, ">=")                         \
  X(And, "and") X(Or, "or")                                                                     \
  X(Atan2, "atan2") X(Fmod, "fmod") X(BitAnd, "&") X(BitOr, "|") X(BitXor, "^") \
  X(Shl, "<<") X(Shr, ">>") X(NextAfter, "nextafter")
// clang-format on
enum class BinaryOp : uint8_t {
#define FF_LOOP_BIN_ENUM(e, s) e,
  FF_LOOP_BINARY_OPS(FF_LOOP_BIN_ENUM)
#undef FF_LOOP_BIN_ENUM
};
bool is_comparison(BinaryOp op);

// Functions of the math library (inductor/math_library.inc): torch's special functions, computed
// in double precision, called by both renderers. X(enum, name (the function is ff_math_<name>), arity)
// clang-format off
#define FF_LOOP_MATH_FNS(X)                                                                       \
  X(Digamma, digamma, 1) X(Trigamma, trigamma, 1) X(Lgamma, lgamma, 1) X(Hypot, hypot, 2)                      \
  X(Polygamma, polygamma, 2) X(Zeta, zeta, 2) X(Igamma, igamma, 2) X(Igammac, igammac, 2) \
  X(Erfcx, erfcx, 1) X(Erfinv, erfinv, 1) X(Ndtr, ndtr, 1) X(Ndtri, ndtri, 1)             \
  X(LogNdtr, log_ndtr, 1)                                                                       \
  X(BesselJ0, bessel_j0, 1) X(BesselJ1, bessel_j1, 1) X(BesselY0, bessel_y0, 1)             \
  X(BesselY1, bessel_y1, 1) X(I0, i0, 1) X(I0e, i0e, 1) X(I1, i1, 1) X(I1e, i1e, 1)      \
  X(K0, k0, 1) X(K0e, k0e, 1) X(K1, k1, 1) X(K1e, k1e, 1)                                 \
  X(SphericalJ0, spherical_j0, 1) X(AiryAi, airy_ai, 1)                                       \
  X(ChebyshevT, chebyshev_t, 2) X(ChebyshevU, chebyshev_u, 2) X(ChebyshevV, chebyshev_v, 2) \
  X(ChebyshevW, chebyshev_w, 2) X(ShiftedChebyshevT, shifted_chebyshev_t, 2)                  \
  X(ShiftedChebyshevU, shifted_chebyshev_u, 2) X(ShiftedChebyshevV, shifted_chebyshev_v, 2)   \
  X(ShiftedChebyshevW, shifted_chebyshev_w, 2) X(HermiteH, hermite_h, 2)                      \
  X(HermiteHe, hermite_he, 2) X(LaguerreL, laguerre_l, 2) X(LegendreP, legendre_p, 2)          \
  X(FrexpMantissa, frexp_mantissa, 1) X(FrexpExponent, frexp_exponent, 1) X(Ldexp, ldexp, 2)                \
  X(NextafterBf16, nextafter_bf16, 2) X(NextafterF16, nextafter_f16, 2)
// The library's integer functions, on int64 (narrower ints convert in and out, which gives what
// eager's loop in the dtype gives: its ops wrap alike): eager's powi (exponentiation by squaring; a
// negative exponent gives 1 / a rounded toward zero) and its gcd loop (of operands it took abs of).
#define FF_LOOP_INT_MATH_FNS(X) X(Powi, powi, 2) X(Gcd, gcd, 2)
// clang-format on
enum class MathFn : uint8_t {
#define FF_LOOP_MATH_ENUM(e, name, n) e,
  FF_LOOP_MATH_FNS(FF_LOOP_MATH_ENUM) FF_LOOP_INT_MATH_FNS(FF_LOOP_MATH_ENUM)
#undef FF_LOOP_MATH_ENUM
};
#define FF_LOOP_MATH_COUNT(e, name, n) +1
constexpr int kMathFnCount = 0 FF_LOOP_MATH_FNS(FF_LOOP_MATH_COUNT) FF_LOOP_INT_MATH_FNS(FF_LOOP_MATH_COUNT);
constexpr int kFloatMathFnCount = 0 FF_LOOP_MATH_FNS(FF_LOOP_MATH_COUNT);
#undef FF_LOOP_MATH_COUNT
const char* math_fn_name(MathFn fn);  // "digamma": the library's function is ff_math_digamma
int math_fn_arity(MathFn fn);
// An integer function (FF_LOOP_INT_MATH_FNS): int64 long long(long long, long long), not double.
inline bool math_fn_int(MathFn fn) { return static_cast<int>(fn) >= kFloatMathFnCount; }

// Reductions an accumulator can perform. Max/Min propagate NaN (torch.amax semantics).
#define FF_LOOP_REDUCE_OPS(X) X(Sum, "sum") X(Prod, "prod") X(Max, "max") X(Min, "min")
enum class ReduceOp : uint8_t {
#define FF_LOOP_RED_ENUM(e, s) e,
  FF_LOOP_REDUCE_OPS(FF_LOOP_RED_ENUM)
#undef FF_LOOP_RED_ENUM
};

// ---- expressions ---------------------------------------------------------------------------

// X(kind, semantics)
// clang-format off
#define FF_LOOP_EXPR_KINDS(X)                                                                   \
  X(Const, "a literal of `type`: `f` for floats, `i` for ints and bools")                       \
  X(Var, "loop variable `id` (i64)")                                                            \
  X(Local, "the current value of kernel local `id` (set by Let / Reduce)")                      \
  X(Load, "element args[0] (i64 index) of buffer `id`, converted to `type`")                    \
  X(Unary, "op(args[0]); `op` is a UnaryOp")                                                    \
  X(Binary, "op(args[0], args[1]); `op` is a BinaryOp")                                          \
  X(Select, "args[0] ? args[1] : args[2] (both branches are evaluated: no side effects)")       \
  X(Fma, "args[0] * args[1] + args[2] rounded once (C's fma), floats of one `type`")           \
  X(Cast, "args[0] converted to `type` (float->int truncates; ->bool is != 0)")                 \
  X(Narrow, "args[0] rounded to the storage dtype `i` (a DType) and back to `type`: 8/16-bit "  \
            "ints wrap (two's complement), f16/bf16 round to nearest even; what a store to a "   \
            "buffer of that dtype and a load from it give")                                     \
  X(Sym, "the value of size symbol `id` (i64) in this run: kernels of a graph with symbolic "   \
         "sizes (dynamic shapes) take the symbols' values as an argument")                       \
  X(Call, "math library function `op` (a MathFn) of args, all of `type`: a float function is "     \
          "computed in double precision and rounded to `type`, an integer one in int64")
// clang-format on
enum class ExprKind : uint8_t {
#define FF_LOOP_EXPR_ENUM(e, doc) e,
  FF_LOOP_EXPR_KINDS(FF_LOOP_EXPR_ENUM)
#undef FF_LOOP_EXPR_ENUM
};

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprKind kind = ExprKind::Const;
  ScalarType type = ScalarType::F32;
  uint8_t op = 0;  // UnaryOp / BinaryOp / MathFn
  int64_t i = 0;  // Const: the value; a float Mul: 1 where rounded() marked it
  double f = 0.0;
  int id = -1;  // Var / Local / Load (buffer id)
  std::vector<Expr> args;
};

// Checked factories (throw InternalError on type errors). Index helpers fold constants.
Expr const_int(int64_t v, ScalarType t = ScalarType::I64);
Expr const_float(double v, ScalarType t);
Expr const_of(double v, ScalarType t);  // a literal of any type
Expr var(int id);
Expr sym(SymbolId id);
// A size as an i64 expression: a literal, or the polynomial over Sym nodes it stands for.
Expr size_expr(const SymInt& s);
Expr local(int id, ScalarType t);
Expr load(int buffer, Expr index, ScalarType t);
Expr unary(UnaryOp op, Expr a);
Expr call(MathFn fn, std::vector<Expr> args);  // args of one float (int: math_fn_int) type, as many as fn's arity
Expr binary(BinaryOp op, Expr a, Expr b);
// `e` as one op's result, which eager rounds to its type before the next op reads it: a float
// multiply at its top is marked (ExprNode::i = 1) so that no code generator contracts it into a
// later op's add (NVRTC fuses x * y + z into one fma across two ops unless told not to; within one
// op's formula it may, as nvcc does in eager's own kernels). Any other e is returned as it is.
Expr rounded(Expr e);
inline bool is_rounded_mul(const ExprNode& e) {
  return e.kind == ExprKind::Binary && e.op == static_cast<uint8_t>(BinaryOp::Mul) && e.i == 1;
}
Expr select(Expr c, Expr a, Expr b);
// a * b + c rounded once, as eager CPU's kernels compute `a + alpha * b` where the CPU has fused
// multiply-adds (eager_cpu_fma() in graph/meta_rules.h says whether the running torch does).
Expr fma(Expr a, Expr b, Expr c);
Expr cast(Expr a, ScalarType t);  // identity when already `t`
// `a` as a value of dtype `dt` (computed in dtype_compute_type(dt), which must be a's type):
// identity where that type holds every value of it exactly (i32 for int32, f32 for float32).
Expr narrow(Expr a, DType dt);
bool needs_narrowing(DType dt);  // 8/16-bit ints, f16, bf16
// What a store into a buffer of dtype dt needs to compute: a's operand where a narrows to dt (the
// store rounds the same way), else a.
const Expr& stored_value(const Expr& a, DType dt);
struct Program;
// Whether every value `a` can take is one of dtype dt's, so that narrowing it to dt changes
// nothing: a load from a buffer of dt, a narrowing to dt, and selections among such values
// (where, neg, abs, max, min). The renderers skip those narrowings.
bool holds_dtype_values(const Expr& a, DType dt, const Program& p);
// Whether `a` calls a math function (exp, log, sin, pow ...) whose vector variant may round
// differently from its scalar one: the same expression can then take two values in one kernel
// (the vector body and the scalar remainder of a loop, or two loops).
bool calls_vector_math(const Expr& a);
Expr index_add(Expr a, Expr b);
Expr index_mul(Expr a, int64_t c);
Expr index_mul(Expr a, const SymInt& c);  // a * c, where c may be a symbolic size

bool expr_equal(const Expr& a, const Expr& b);
std::string expr_str(const Expr& e);

// Affine view of an index expression: sum(coef[v] * var v) + offset. False if not affine.
struct Affine {
  std::vector<std::pair<int, int64_t>> terms;  // (var, coefficient), sorted by var, no zeros
  int64_t offset = 0;
};
bool as_affine(const Expr& e, Affine* out);

// ---- statements and kernels ----------------------------------------------------------------

// X(kind, semantics)
// clang-format off
#define FF_LOOP_STMT_KINDS(X)                                                                    \
  X(Loop, "for var `var` in [0, extent): body. The kernel root is the one `parallel` loop")      \
  X(Store, "buffer `buf`[index] = value, converted to the buffer's dtype")                       \
  X(Let, "local `local` = value (declares or overwrites it)")                                   \
  X(Init, "local `local` = the identity of reduction `rop` for its type")                       \
  X(Reduce, "local `local` = rop(local, value)")
// clang-format on
enum class StmtKind : uint8_t {
#define FF_LOOP_STMT_ENUM(e, doc) e,
  FF_LOOP_STMT_KINDS(FF_LOOP_STMT_ENUM)
#undef FF_LOOP_STMT_ENUM
};

struct Stmt {
  StmtKind kind = StmtKind::Loop;
  int var = -1;
  // NB: reading a symbolic extent as int64_t specialises it, which throws while compiling a
  // program with symbolic sizes (there is no ShapeEnv to guard on): code that has not been taught
  // symbolic extents makes the compile fall back to one program per set of sizes, never wrong code.
  SymInt extent = 0;
  bool parallel = false;
  std::vector<Stmt> body;
  int buf = -1;
  Expr index;
  Expr value;
  int local = -1;
  ReduceOp rop = ReduceOp::Sum;
};

Stmt loop_stmt(int var, SymInt extent, std::vector<Stmt> body, bool parallel = false);
Stmt store_stmt(int buf, Expr index, Expr value);
Stmt let_stmt(int local, Expr value);
Stmt init_stmt(int local, ReduceOp rop);
Stmt reduce_stmt(int local, ReduceOp rop, Expr value);

// Where a buffer's memory comes from at run time.
// clang-format off
#define FF_LOOP_BUFFER_ROLES(X)                                                    \
  X(Input, "a graph input (placeholder `input`)")                                   \
  X(Intermediate, "allocated for one run, dead after its last use")                 \
  X(Output, "allocated for one run and returned (part of the graph output)")         \
  X(ExternResult, "the tensor an extern call returned (node `node`)")
// clang-format on
enum class BufferRole : uint8_t {
#define FF_LOOP_ROLE_ENUM(e, doc) e,
  FF_LOOP_BUFFER_ROLES(FF_LOOP_ROLE_ENUM)
#undef FF_LOOP_ROLE_ENUM
};

struct Buffer {
  std::string name;
  DType dtype = DType::Float32;
  SymShape sizes, strides;  // the layout kernels assume (elements)
  BufferRole role = BufferRole::Intermediate;
  int input = -1;     // Input: placeholder position
  bool mutated = false;  // Input: an in-place op on the graph input stores into the caller's tensor
  NodeId node = -1;   // the graph node it holds (when one does)
  // ExternResult of a call that may return a view of an operand (x[0], split, an op the registry
  // does not know): the buffer whose memory it may be. Writing into that buffer changes this one.
  int aliases = -1;
};

struct Kernel {
  std::string name;
  Stmt root;                       // a parallel Loop
  int num_vars = 0;
  std::vector<ScalarType> locals;  // local id -> type
  std::vector<int> buffers() const;  // buffer ids referenced, ascending (the kernel ABI order)
  std::vector<int> stored_buffers() const;
  std::vector<int> loaded_buffers() const;
  std::vector<SymbolId> symbols() const;  // size symbols its expressions and extents read, ascending
  // The buffers it stores that leave the program (outputs, inputs written in place) and span at
  // least `min_bytes` (none when it is 0): where the CPU renderer writes with streaming stores.
  std::vector<int> large_results(const Program& p, int64_t min_bytes) const;
  double work() const;             // element operations, to decide whether threading pays
};

// A view of a buffer (for passing to extern calls and returning outputs).
struct TensorRef {
  int buf = -1;
  SymShape sizes, strides;
  SymInt offset = 0;
};

// An extern call: graph node `node` (a Call or GetItem) is executed eagerly by torch, as op `op`
// with `args` (usually the node's own; a decomposition may call a simpler op, e.g. linear without bias). Its tensor
// operands are the views in `operands` (node id -> view); its result, when a tensor, lands in
// buffer `result` (-1: the result is kept as a Python object for later GetItem / output).
struct ExternCall {
  NodeId node = -1;
  OpId op = kNoOp;          // the op to call (kNoOp: `node` is a GetItem)
  std::vector<Value> args;  // bound to op's schema; Node values name graph nodes
  std::vector<std::pair<NodeId, TensorRef>> operands;
  int result = -1;
  std::string reason;  // why it is extern
};

struct Step {
  enum class Kind : uint8_t { Kernel,
                              Extern } kind = Kind::Kernel;
  int index = 0;
};

// An error eager raises for some values (an integer division by zero): buffer `buf` (a 0-d int64
// the kernels compute, role Output so that it lives to the end) counts the offending elements;
// the runtime raises RuntimeError(message) after the steps where it is not 0. Only in programs
// whose steps have no effect outside their buffers (no input writes, no extern calls): raising
// after them is then raising before them.
struct Check {
  int buf = -1;
  std::string message;
};

struct Program {
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<ExternCall> externs;
  std::vector<Step> steps;
  std::vector<Check> checks;
  // Graph output: node id -> where its tensor lives. Non-tensor nodes come from extern results.
  std::vector<std::pair<NodeId, TensorRef>> outputs;
  // Memory plan (schedule.h plan_memory): buffers with slot >= 0 share storage slot `slot`
  // (slot_bytes bytes) with others whose lifetimes do not overlap; -1: allocated on their own.
  std::vector<int> slot;
  std::vector<int64_t> slot_bytes;
  // Dynamic shapes: sizes, strides and extents above may be symbolic (SymInt); kernels read the
  // symbols' values from the run's bindings (Sym expressions). specialize_program gives the
  // concrete program of one call's bindings.
  bool symbolic = false;
};

// `p` with every symbolic size, stride, offset, extent and extern argument evaluated at
// `bindings` (symbol k's value is bindings[k]); kernel bodies keep their Sym expressions (the
// kernels compiled from `p` read them at run time).
Program specialize_program(const Program& p, const std::vector<int64_t>& bindings);

// Bytes a buffer's layout spans (0 when empty). Specialises symbolic sizes (see Stmt::extent).
int64_t buffer_bytes(const Buffer& b);

std::string stmt_str(const Stmt& s, int indent = 0);
std::string kernel_str(const Kernel& k, const Program& p);
std::string program_str(const Program& p);

// The verifier: named invariants; returns the first violation ("" when valid).
std::string verify_kernel(const Kernel& k, const Program& p);
std::string verify_program(const Program& p);

}  // namespace ff::loop
