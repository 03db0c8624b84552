#include "inductor/loop_ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "graph/passes/specialize_shapes.h"
#include "inductor/loop_visitor.h"
#include "src/base/errors.h"

namespace ff::loop {

const char* scalar_type_name(ScalarType t) {
  switch (t) {
#define FF_LOOP_ST_NAME(e, s) \
  case ScalarType::e:         \
    return s;
    FF_LOOP_SCALAR_TYPES(FF_LOOP_ST_NAME)
#undef FF_LOOP_ST_NAME
  }
  return "?";
}

ScalarType dtype_compute_type(DType t) {
  switch (t) {
    case DType::Bool: return ScalarType::Bool;
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::Int32: return ScalarType::I32;
    case DType::Int64: return ScalarType::I64;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32: return ScalarType::F32;
    case DType::Float64: return ScalarType::F64;
    default: break;
  }
  FF_CHECK(false, "no loop IR type for dtype " + std::string(dtype_name(t)));
  return ScalarType::F32;
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

const char* unary_name(UnaryOp op) {
  switch (op) {
#define FF_LOOP_UN_NAME(e, s, f) \
  case UnaryOp::e:               \
    return s;
    FF_LOOP_UNARY_OPS(FF_LOOP_UN_NAME)
#undef FF_LOOP_UN_NAME
  }
  return "?";
}

namespace {

bool unary_float_only(UnaryOp op) {
  switch (op) {
#define FF_LOOP_UN_FLOAT(e, s, f) \
  case UnaryOp::e:                \
    return f;
    FF_LOOP_UNARY_OPS(FF_LOOP_UN_FLOAT)
#undef FF_LOOP_UN_FLOAT
  }
  return false;
}
const char* binary_name(BinaryOp op) {
  switch (op) {
#define FF_LOOP_BIN_NAME(e, s) \
  case BinaryOp::e:            \
    return s;
    FF_LOOP_BINARY_OPS(FF_LOOP_BIN_NAME)
#undef FF_LOOP_BIN_NAME
  }
  return "?";
}
const char* reduce_name(ReduceOp op) {
  switch (op) {
#define FF_LOOP_RED_NAME(e, s) \
  case ReduceOp::e:            \
    return s;
    FF_LOOP_REDUCE_OPS(FF_LOOP_RED_NAME)
#undef FF_LOOP_RED_NAME
  }
  return "?";
}
const char* role_name(BufferRole r) {
  switch (r) {
#define FF_LOOP_ROLE_NAME(e, doc) \
  case BufferRole::e:             \
    return #e;
    FF_LOOP_BUFFER_ROLES(FF_LOOP_ROLE_NAME)
#undef FF_LOOP_ROLE_NAME
  }
  return "?";
}

Expr make(ExprKind k, ScalarType t, std::vector<Expr> args = {}) {
  auto n = std::make_shared<ExprNode>();
  n->kind = k;
  n->type = t;
  n->args = std::move(args);
  return n;
}

bool is_const(const Expr& e, int64_t v) {
  return e->kind == ExprKind::Const && !is_float(e->type) && e->i == v;
}

// NB: the shortest text that reads back as the same value of type t. The text form is the CPU
// object cache's key: two constants printed alike would share one compiled kernel.
std::string fmt_float(double v, ScalarType t) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  for (int digits = t == ScalarType::F32 ? 6 : 15; digits <= 17; ++digits) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    double back = std::strtod(b, nullptr);
    if (t == ScalarType::F32 ? static_cast<float>(back) == static_cast<float>(v) : back == v) break;
  }
  std::string s = b;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string narrow_dtype_name(int64_t dt) { return std::string(dtype_name(static_cast<DType>(dt))); }

// x rounded to nearest even with `bits` significant bits and no quantum below 2^min_exp: exact in
// double for every float x (scaling by powers of two is exact).
double round_significand(double x, int bits, int min_exp) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  double quantum = std::ldexp(1.0, std::max(e - bits, min_exp));
  return std::nearbyint(x / quantum) * quantum;
}

}  // namespace

bool needs_narrowing(DType dt) {
  return dt == DType::Int8 || dt == DType::UInt8 || dt == DType::Int16 || dt == DType::Float16 || dt == DType::BFloat16;
}

const Expr& stored_value(const Expr& a, DType dt) {
  return a->kind == ExprKind::Narrow && a->i == static_cast<int64_t>(dt) ? a->args[0] : a;
}

bool holds_dtype_values(const Expr& a, DType dt, const Program& p) {
  switch (a->kind) {
    case ExprKind::Load: return p.buffers.at(static_cast<size_t>(a->id)).dtype == dt;
    case ExprKind::Narrow: return a->i == static_cast<int64_t>(dt);
    case ExprKind::Select: return holds_dtype_values(a->args[1], dt, p) && holds_dtype_values(a->args[2], dt, p);
    case ExprKind::Unary: {
      auto op = static_cast<UnaryOp>(a->op);
      // NB: neg and abs of an int8 -128 leave the range; of floats they only flip the sign.
      return (op == UnaryOp::Neg || op == UnaryOp::Abs) && is_float(a->type) && holds_dtype_values(a->args[0], dt, p);
    }
    case ExprKind::Binary: {
      auto op = static_cast<BinaryOp>(a->op);
      // max/min return an operand (or NaN, a + b of a NaN, which stays NaN)
      return (op == BinaryOp::Max || op == BinaryOp::Min) && holds_dtype_values(a->args[0], dt, p) &&
             holds_dtype_values(a->args[1], dt, p);
    }
    default: return false;
  }
}

bool calls_vector_math(const Expr& a) {
  if (a->kind == ExprKind::Unary) {
    switch (static_cast<UnaryOp>(a->op)) {
      case UnaryOp::Exp:
      case UnaryOp::Log:
      case UnaryOp::Sin:
      case UnaryOp::Cos:
      case UnaryOp::Tan:
      case UnaryOp::Tanh:
      case UnaryOp::Erf:
      case UnaryOp::Sigmoid:
      case UnaryOp::Log1p:
      case UnaryOp::Expm1:
      case UnaryOp::Exp2:
      case UnaryOp::Log2:
      case UnaryOp::Log10:
      case UnaryOp::Asin:
      case UnaryOp::Acos:
      case UnaryOp::Atan:
      case UnaryOp::Sinh:
      case UnaryOp::Cosh:
      case UnaryOp::Erfc:
      case UnaryOp::Asinh:
      case UnaryOp::Acosh:
      case UnaryOp::Atanh:
        return true;
      default: break;
    }
  }
  if (a->kind == ExprKind::Binary && (static_cast<BinaryOp>(a->op) == BinaryOp::Pow || static_cast<BinaryOp>(a->op) == BinaryOp::Atan2))
    return true;
  for (const Expr& x : a->args)
    if (calls_vector_math(x)) return true;
  return false;
}

Expr narrow(Expr a, DType dt) {
  FF_CHECK(a, "null operand");
  FF_CHECK(a->type == dtype_compute_type(dt), "narrow to " + std::string(dtype_name(dt)) + " of a " + scalar_type_name(a->type));
  if (!needs_narrowing(dt)) return a;
  if (a->kind == ExprKind::Narrow && a->i == static_cast<int64_t>(dt)) return a;
  if (a->kind == ExprKind::Const) {
    switch (dt) {
      case DType::Int8: return const_int(static_cast<int8_t>(static_cast<uint64_t>(a->i)), a->type);
      case DType::UInt8: return const_int(static_cast<uint8_t>(static_cast<uint64_t>(a->i)), a->type);
      case DType::Int16: return const_int(static_cast<int16_t>(static_cast<uint64_t>(a->i)), a->type);
      case DType::Float16: {
        // f16: 11 significant bits, subnormal quantum 2^-24; from 65520 on it rounds to inf.
        double r = round_significand(a->f, 11, -24);
        if (std::fabs(r) > 65504) r = std::copysign(INFINITY, r);
        return const_float(r, a->type);
      }
      case DType::BFloat16: return const_float(round_significand(a->f, 8, -133), a->type);
      default: break;
    }
  }
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Narrow;
  n->type = a->type;
  n->i = static_cast<int64_t>(dt);
  n->args = {std::move(a)};
  return n;
}

namespace {

}  // namespace

Expr const_int(int64_t v, ScalarType t) {
  FF_CHECK(!is_float(t), "const_int needs an integer or bool type");
  auto n = make(ExprKind::Const, t);
  // NB: an i32 literal holds its value modulo 2^32, as the renderers' 32-bit constants do.
  std::const_pointer_cast<ExprNode>(n)->i = t == ScalarType::Bool ? (v != 0) : t == ScalarType::I32 ? static_cast<int32_t>(static_cast<uint64_t>(v))
                                                                                                    : v;
  return n;
}
Expr const_float(double v, ScalarType t) {
  FF_CHECK(is_float(t), "const_float needs a float type");
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Const;
  n->type = t;
  n->f = t == ScalarType::F32 ? static_cast<double>(static_cast<float>(v)) : v;
  return n;
}
Expr const_of(double v, ScalarType t) {
  return is_float(t) ? const_float(v, t) : const_int(static_cast<int64_t>(v), t);
}
namespace {
Expr leaf(ExprKind kind, ScalarType t, int id) {
  auto n = std::make_shared<ExprNode>();
  n->kind = kind;
  n->type = t;
  n->id = id;
  return n;
}
}  // namespace
Expr var(int id) {
  FF_CHECK(id >= 0, "negative loop variable");
  return leaf(ExprKind::Var, ScalarType::I64, id);
}
Expr sym(SymbolId id) {
  FF_CHECK(id >= 0, "negative size symbol");
  return leaf(ExprKind::Sym, ScalarType::I64, id);
}
Expr size_expr(const SymInt& s) {
  if (!s.is_symbolic()) return const_int(s.hint());
  using K = SymProgram::Op::Kind;
  return SymProgram::fold<Expr>(
      s.expr(), [](int64_t c) { return const_int(c); }, [](SymbolId id) { return sym(id); },
      [](K kind, const Expr& a, const Expr& b) {
        switch (kind) {
          case K::Add: return index_add(a, b);
          case K::Mul:
            if (a->kind == ExprKind::Const) return index_mul(b, a->i);
            if (b->kind == ExprKind::Const) return index_mul(a, b->i);
            return binary(BinaryOp::Mul, a, b);
          default: return binary(kind == K::FloorDiv ? BinaryOp::FloorDiv : BinaryOp::Mod, a, b);
        }
      });
}
Expr local(int id, ScalarType t) { return leaf(ExprKind::Local, t, id); }
Expr load(int buffer, Expr index, ScalarType t) {
  FF_CHECK(buffer >= 0, "load from no buffer");
  FF_CHECK(index && index->type == ScalarType::I64, "load index must be i64");
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Load;
  n->type = t;
  n->id = buffer;
  n->args = {std::move(index)};
  return n;
}
const char* math_fn_name(MathFn fn) {
  switch (fn) {
#define FF_LOOP_MATH_NAME(e, name, n) \
  case MathFn::e:                     \
    return #name;
    FF_LOOP_MATH_FNS(FF_LOOP_MATH_NAME)
    FF_LOOP_INT_MATH_FNS(FF_LOOP_MATH_NAME)
#undef FF_LOOP_MATH_NAME
  }
  return "?";
}

int math_fn_arity(MathFn fn) {
  switch (fn) {
#define FF_LOOP_MATH_ARITY(e, s, n) \
  case MathFn::e:                   \
    return n;
    FF_LOOP_MATH_FNS(FF_LOOP_MATH_ARITY)
    FF_LOOP_INT_MATH_FNS(FF_LOOP_MATH_ARITY)
#undef FF_LOOP_MATH_ARITY
  }
  return 0;
}

Expr call(MathFn fn, std::vector<Expr> args) {
  FF_CHECK(static_cast<int>(args.size()) == math_fn_arity(fn), std::string(math_fn_name(fn)) + ": wrong number of arguments");
  for (const Expr& a : args) {
    FF_CHECK(a, "null operand");
    bool kind = math_fn_int(fn) ? a->type == ScalarType::I32 || a->type == ScalarType::I64 : is_float(a->type);
    FF_CHECK(kind && a->type == args[0]->type, std::string(math_fn_name(fn)) + " needs operands of one type, " +
                                                   (math_fn_int(fn) ? "int" : "float"));
  }
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Call;
  n->type = args[0]->type;
  n->op = static_cast<uint8_t>(fn);
  n->args = std::move(args);
  return n;
}

Expr unary(UnaryOp op, Expr a) {
  FF_CHECK(a, "null operand");
  if (unary_float_only(op)) FF_CHECK(is_float(a->type), std::string(unary_name(op)) + " needs a float operand");
  if (op == UnaryOp::Not) FF_CHECK(a->type == ScalarType::Bool, "not needs a bool operand");
  ScalarType t = op == UnaryOp::IsNan || op == UnaryOp::SignBit ? ScalarType::Bool : a->type;
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Unary;
  n->type = t;
  n->op = static_cast<uint8_t>(op);
  n->args = {std::move(a)};
  return n;
}
Expr binary(BinaryOp op, Expr a, Expr b) {
  FF_CHECK(a && b, "null operand");
  FF_CHECK(a->type == b->type, std::string("binary ") + binary_name(op) + " operand types differ: " +
                                   scalar_type_name(a->type) + " vs " + scalar_type_name(b->type));
  if (op == BinaryOp::And || op == BinaryOp::Or) FF_CHECK(a->type == ScalarType::Bool, "and/or need bools");
  if (op == BinaryOp::Atan2 || op == BinaryOp::NextAfter) FF_CHECK(is_float(a->type), std::string(binary_name(op)) + " needs float operands");
  if (op == BinaryOp::BitAnd || op == BinaryOp::BitOr || op == BinaryOp::BitXor)
    FF_CHECK(!is_float(a->type), "bitwise ops need int or bool operands");
  if (op == BinaryOp::Shl || op == BinaryOp::Shr)
    FF_CHECK(a->type == ScalarType::I32 || a->type == ScalarType::I64, "shifts need int operands");
  ScalarType t = is_comparison(op) ? ScalarType::Bool : a->type;
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Binary;
  n->type = t;
  n->op = static_cast<uint8_t>(op);
  n->args = {std::move(a), std::move(b)};
  return n;
}
Expr rounded(Expr e) {
  if (!e || e->kind != ExprKind::Binary || static_cast<BinaryOp>(e->op) != BinaryOp::Mul || !is_float(e->type) ||
      e->i == 1)
    return e;
  auto n = std::make_shared<ExprNode>(*e);
  n->i = 1;
  return n;
}
Expr select(Expr c, Expr a, Expr b) {
  FF_CHECK(c && a && b, "null operand");
  FF_CHECK(c->type == ScalarType::Bool, "select condition must be bool");
  FF_CHECK(a->type == b->type, "select branches differ in type");
  ScalarType t = a->type;  // NB: read before the operands are moved
  return make(ExprKind::Select, t, {std::move(c), std::move(a), std::move(b)});
}
Expr fma(Expr a, Expr b, Expr c) {
  FF_CHECK(a && b && c, "null operand");
  FF_CHECK(is_float(a->type) && a->type == b->type && a->type == c->type, "fma needs floats of one type");
  ScalarType t = a->type;
  return make(ExprKind::Fma, t, {std::move(a), std::move(b), std::move(c)});
}
Expr cast(Expr a, ScalarType t) {
  FF_CHECK(a, "null operand");
  if (a->type == t) return a;
  if (a->kind == ExprKind::Const) {
    if (!is_float(a->type)) {
      // NB: straight from the integer: int64 -> double -> float would round twice.
      if (t == ScalarType::F32) return const_float(static_cast<double>(static_cast<float>(a->i)), t);
      if (t == ScalarType::F64) return const_float(static_cast<double>(a->i), t);
      return const_int(t == ScalarType::Bool ? a->i != 0 : a->i, t);
    }
    double v = a->f;
    if (t == ScalarType::Bool) return const_int(v != 0.0, t);  // NaN is true
    if (!is_float(t)) {
      // Out of range (NaN included) the conversion is undefined in C++ and in eager: left to the renderer.
      double lim = t == ScalarType::I32 ? 2147483648.0 : 9223372036854775808.0;
      if (!(std::trunc(v) < lim && std::trunc(v) >= -lim)) return make(ExprKind::Cast, t, {std::move(a)});
      return const_int(static_cast<int64_t>(std::trunc(v)), t);
    }
    return const_float(v, t);
  }
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::Cast;
  n->type = t;
  n->args = {std::move(a)};
  return n;
}
namespace {

bool is_binary(const Expr& e, BinaryOp op) { return e->kind == ExprKind::Binary && static_cast<BinaryOp>(e->op) == op; }

// An index term as x * m (m = 1 for a bare term) and x as y // q (q = 1 when x is no quotient).
void split_term(const Expr& e, Expr* x, int64_t* m) {
  bool scaled = is_binary(e, BinaryOp::Mul) && e->args[1]->kind == ExprKind::Const;
  *x = scaled ? e->args[0] : e;
  *m = scaled ? e->args[1]->i : 1;
}
void split_quotient(const Expr& e, Expr* y, int64_t* q) {
  bool quotient = is_binary(e, BinaryOp::FloorDiv) && e->args[1]->kind == ExprKind::Const && e->args[1]->i > 0;
  *y = quotient ? e->args[0] : e;
  *q = quotient ? e->args[1]->i : 1;
}

// (y // (q*c)) * (c*m) + ((y // q) % c) * m == (y // q) * m for every integer y (floored division
// and modulo, c > 0): a reshape that splits a dim and a load that merges it back, as in
// `x.view(-1, n)` ... `.view(b, t, n)` of a contiguous buffer, index it linearly again, so that
// the renderers see an affine index (vector loads) instead of a division and a modulo per element.
Expr merge_quotient_and_remainder(const Expr& hi, const Expr& lo) {
  Expr hx, lx, hy, ly, mod_arg;
  int64_t hm, lm, hq, lq;
  split_term(hi, &hx, &hm);
  split_term(lo, &lx, &lm);
  if (!is_binary(lx, BinaryOp::Mod) || lx->args[1]->kind != ExprKind::Const) return nullptr;
  int64_t c = lx->args[1]->i;
  if (c <= 1 || lm == 0) return nullptr;
  split_quotient(hx, &hy, &hq);
  split_quotient(lx->args[0], &ly, &lq);
  if (hq != lq * c || hm != lm * c || hy->type != ly->type || !expr_equal(hy, ly)) return nullptr;
  Expr x = lq == 1 ? ly : binary(BinaryOp::FloorDiv, ly, const_int(lq, ly->type));
  return lm == 1 ? x : binary(BinaryOp::Mul, x, const_int(lm, x->type));
}

}  // namespace

Expr index_add(Expr a, Expr b) {
  if (is_const(a, 0)) return b;
  if (is_const(b, 0)) return a;
  if (a->kind == ExprKind::Const && b->kind == ExprKind::Const) return const_int(a->i + b->i);
  if (Expr m = merge_quotient_and_remainder(a, b)) return m;
  if (Expr m = merge_quotient_and_remainder(b, a)) return m;
  // Sums are built left to right: the last term of a may merge with b, and the result with the term before it.
  if (is_binary(a, BinaryOp::Add) && a->type == b->type) {
    Expr last = a->args[1];
    Expr m = merge_quotient_and_remainder(last, b);
    if (!m) m = merge_quotient_and_remainder(b, last);
    if (m) return index_add(a->args[0], m);
  }
  return binary(BinaryOp::Add, std::move(a), std::move(b));
}
Expr index_mul(Expr a, int64_t c) {
  if (c == 0 || is_const(a, 0)) return const_int(0);
  if (c == 1) return a;
  if (a->kind == ExprKind::Const) return const_int(a->i * c);
  return binary(BinaryOp::Mul, std::move(a), const_int(c));
}
Expr index_mul(Expr a, const SymInt& c) {
  if (!c.is_symbolic()) return index_mul(std::move(a), c.hint());
  if (is_const(a, 0)) return const_int(0);
  Expr ce = size_expr(c);
  if (is_const(a, 1)) return ce;
  return binary(BinaryOp::Mul, std::move(a), std::move(ce));
}

bool expr_equal(const Expr& a, const Expr& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (a->kind != b->kind || a->type != b->type || a->op != b->op || a->i != b->i || a->id != b->id ||
      a->args.size() != b->args.size())
    return false;
  if (a->f != b->f && !(std::isnan(a->f) && std::isnan(b->f))) return false;
  for (size_t k = 0; k < a->args.size(); ++k)
    if (!expr_equal(a->args[k], b->args[k])) return false;
  return true;
}

bool as_affine(const Expr& e, Affine* out) {
  std::map<int, int64_t> terms;
  int64_t offset = 0;
  // Walks sums of (var * const), consts and vars.
  std::vector<std::pair<Expr, int64_t>> work{{e, 1}};
  while (!work.empty()) {
    auto [x, scale] = work.back();
    work.pop_back();
    if (x->type != ScalarType::I64 && x->type != ScalarType::I32) return false;
    switch (x->kind) {
      case ExprKind::Const: offset += scale * x->i; break;
      case ExprKind::Var: terms[x->id] += scale; break;
      case ExprKind::Binary: {
        auto op = static_cast<BinaryOp>(x->op);
        if (op == BinaryOp::Add) {
          work.push_back({x->args[0], scale});
          work.push_back({x->args[1], scale});
        } else if (op == BinaryOp::Sub) {
          work.push_back({x->args[0], scale});
          work.push_back({x->args[1], -scale});
        } else if (op == BinaryOp::Mul && x->args[1]->kind == ExprKind::Const) {
          work.push_back({x->args[0], scale * x->args[1]->i});
        } else if (op == BinaryOp::Mul && x->args[0]->kind == ExprKind::Const) {
          work.push_back({x->args[1], scale * x->args[0]->i});
        } else {
          return false;
        }
        break;
      }
      default: return false;
    }
  }
  out->terms.clear();
  for (auto [v, c] : terms)
    if (c != 0) out->terms.push_back({v, c});
  out->offset = offset;
  return true;
}

namespace {
// Index expressions print as `v0*16 + v1 + 3`.
bool affine_str(const Expr& e, std::string* out) {
  if (e->type != ScalarType::I64 || e->kind != ExprKind::Binary) return false;
  Affine a;
  if (!as_affine(e, &a)) return false;
  std::string s;
  for (auto [v, c] : a.terms) {
    if (!s.empty()) s += c < 0 ? " - " : " + ";
    else if (c < 0) s += "-";
    int64_t m = c < 0 ? -c : c;
    s += "v" + std::to_string(v) + (m == 1 ? "" : "*" + std::to_string(m));
  }
  if (a.offset != 0 || s.empty()) s += (s.empty() ? "" : a.offset < 0 ? " - "
                                                                      : " + ") +
                                       std::to_string(s.empty() ? a.offset : std::abs(a.offset));
  *out = s;
  return true;
}
}  // namespace

std::string expr_str(const Expr& e) {
  if (std::string s; affine_str(e, &s)) return s;
  switch (e->kind) {
    case ExprKind::Const:
      if (is_float(e->type)) return fmt_float(e->f, e->type) + (e->type == ScalarType::F64 ? "d" : "");
      if (e->type == ScalarType::Bool) return e->i ? "true" : "false";
      return std::to_string(e->i) + (e->type == ScalarType::I32 ? "i" : "");
    case ExprKind::Var: return "v" + std::to_string(e->id);
    case ExprKind::Sym: return "s" + std::to_string(e->id);
    case ExprKind::Local: return "t" + std::to_string(e->id);
    case ExprKind::Load: return "buf" + std::to_string(e->id) + "[" + expr_str(e->args[0]) + "]";
    case ExprKind::Unary:
      return std::string(unary_name(static_cast<UnaryOp>(e->op))) + "(" + expr_str(e->args[0]) + ")";
    case ExprKind::Binary: {
      auto op = static_cast<BinaryOp>(e->op);
      std::string n = binary_name(op);
      if (std::isalpha(static_cast<unsigned char>(n[0])) && op != BinaryOp::And && op != BinaryOp::Or)
        return n + "(" + expr_str(e->args[0]) + ", " + expr_str(e->args[1]) + ")";
      return "(" + expr_str(e->args[0]) + " " + n + " " + expr_str(e->args[1]) + ")";
    }
    case ExprKind::Select:
      return "where(" + expr_str(e->args[0]) + ", " + expr_str(e->args[1]) + ", " + expr_str(e->args[2]) + ")";
    case ExprKind::Fma:
      return "fma(" + expr_str(e->args[0]) + ", " + expr_str(e->args[1]) + ", " + expr_str(e->args[2]) + ")";
    case ExprKind::Cast: return std::string(scalar_type_name(e->type)) + "(" + expr_str(e->args[0]) + ")";
    case ExprKind::Narrow: return narrow_dtype_name(e->i) + "(" + expr_str(e->args[0]) + ")";
    case ExprKind::Call: {
      std::string r = std::string(math_fn_name(static_cast<MathFn>(e->op))) + "(";
      for (size_t k = 0; k < e->args.size(); ++k) r += (k ? ", " : "") + expr_str(e->args[k]);
      return r + ")";
    }
  }
  return "?";
}

Stmt loop_stmt(int v, SymInt extent, std::vector<Stmt> body, bool parallel) {
  FF_CHECK(v >= 0 && extent.hint() >= 0, "bad loop");
  Stmt s;
  s.kind = StmtKind::Loop;
  s.var = v;
  s.extent = extent;
  s.parallel = parallel;
  s.body = std::move(body);
  return s;
}
Stmt store_stmt(int buf, Expr index, Expr value) {
  FF_CHECK(buf >= 0 && index && value, "bad store");
  FF_CHECK(index->type == ScalarType::I64, "store index must be i64");
  Stmt s;
  s.kind = StmtKind::Store;
  s.buf = buf;
  s.index = std::move(index);
  s.value = std::move(value);
  return s;
}
Stmt let_stmt(int l, Expr value) {
  FF_CHECK(l >= 0 && value, "bad let");
  Stmt s;
  s.kind = StmtKind::Let;
  s.local = l;
  s.value = std::move(value);
  return s;
}
Stmt init_stmt(int l, ReduceOp rop) {
  Stmt s;
  s.kind = StmtKind::Init;
  s.local = l;
  s.rop = rop;
  return s;
}
Stmt reduce_stmt(int l, ReduceOp rop, Expr value) {
  FF_CHECK(l >= 0 && value, "bad reduce");
  Stmt s;
  s.kind = StmtKind::Reduce;
  s.local = l;
  s.rop = rop;
  s.value = std::move(value);
  return s;
}

std::vector<int> Kernel::buffers() const {
  std::set<int> ids;
  for_each_stmt(root, [&](const Stmt& s) {
    if (s.kind == StmtKind::Store) ids.insert(s.buf);
  });
  for_each_expr_in(root, [&](const Expr& x) {
    if (x->kind == ExprKind::Load) ids.insert(x->id);
  });
  return {ids.begin(), ids.end()};
}
std::vector<int> Kernel::stored_buffers() const {
  std::set<int> ids;
  for_each_stmt(root, [&](const Stmt& s) {
    if (s.kind == StmtKind::Store) ids.insert(s.buf);
  });
  return {ids.begin(), ids.end()};
}
std::vector<int> Kernel::loaded_buffers() const {
  std::set<int> ids;
  for_each_expr_in(root, [&](const Expr& x) {
    if (x->kind == ExprKind::Load) ids.insert(x->id);
  });
  return {ids.begin(), ids.end()};
}

std::vector<SymbolId> Kernel::symbols() const {
  std::set<SymbolId> ids;
  auto note = [&](const Expr& x) {
    if (x->kind == ExprKind::Sym) ids.insert(x->id);
  };
  for_each_expr_in(root, note);
  for_each_stmt(root, [&](const Stmt& s) {
    if (s.kind == StmtKind::Loop && s.extent.is_symbolic()) for_each_expr(size_expr(s.extent), note);
  });
  return {ids.begin(), ids.end()};
}

std::vector<int> Kernel::large_results(const Program& p, int64_t min_bytes) const {
  std::vector<int> out;
  if (min_bytes <= 0) return out;
  for (int id : stored_buffers()) {
    const Buffer& buf = p.buffers[static_cast<size_t>(id)];
    // NB: graph outputs and the inputs an in-place op writes only: an intermediate is read again
    // by a later kernel of the graph, which streaming would send to memory for it. Not for
    // symbolic sizes: whether a buffer is large is only known per call.
    bool leaves = buf.role == BufferRole::Output || (buf.role == BufferRole::Input && buf.mutated);
    if (leaves && !buf.sizes.is_symbolic() && buffer_bytes(buf) >= min_bytes) out.push_back(id);
  }
  return out;
}

namespace {
// Sums the trip counts of the statements that are not loops.
struct WorkCounter : Visitor {
  double trip = 1.0, total = 0.0;
  void visit_Loop(const Stmt& s) override {
    double outer = trip;
    trip = outer * static_cast<double>(s.extent.hint());  // NB: a heuristic: the traced sizes do
    for (const Stmt& c : s.body) visit(c);
    trip = outer;
  }
  void visit_Store(const Stmt&) override { total += trip; }
  void visit_Let(const Stmt&) override { total += trip; }
  void visit_Init(const Stmt&) override { total += trip; }
  void visit_Reduce(const Stmt&) override { total += trip; }
};
}  // namespace

double Kernel::work() const {
  WorkCounter w;
  w.visit(root);
  return w.total;
}

int64_t buffer_bytes(const Buffer& b) {
  int64_t span = 1;
  for (size_t d = 0; d < b.sizes.size(); ++d) {
    if (b.sizes[d] == 0) return 0;
    span += (b.sizes[d] - 1) * std::abs(b.strides[d]);
  }
  return span * dtype_size(b.dtype);
}

std::string stmt_str(const Stmt& s, int indent) {
  std::string pad(static_cast<size_t>(indent) * 2, ' ');
  switch (s.kind) {
    case StmtKind::Loop: {
      std::string out = pad + "for v" + std::to_string(s.var) + " in 0.." + s.extent.str() +
                        (s.parallel ? " parallel" : "") + ":\n";
      for (const Stmt& c : s.body) out += stmt_str(c, indent + 1);
      return out;
    }
    case StmtKind::Store:
      return pad + "buf" + std::to_string(s.buf) + "[" + expr_str(s.index) + "] = " + expr_str(s.value) + "\n";
    case StmtKind::Let: return pad + "t" + std::to_string(s.local) + " = " + expr_str(s.value) + "\n";
    case StmtKind::Init:
      return pad + "t" + std::to_string(s.local) + " = " + reduce_name(s.rop) + "_init\n";
    case StmtKind::Reduce:
      return pad + "t" + std::to_string(s.local) + " = " + reduce_name(s.rop) + "(t" + std::to_string(s.local) +
             ", " + expr_str(s.value) + ")\n";
  }
  return pad + "?\n";
}

namespace {
std::string list_str(const SymShape& v) { return v.str(); }
}  // namespace

std::string kernel_str(const Kernel& k, const Program& p) {
  std::string out = "kernel " + k.name + " (";
  auto stored = k.stored_buffers();
  bool first = true;
  for (int b : k.buffers()) {
    const Buffer& buf = p.buffers.at(static_cast<size_t>(b));
    out += (first ? "" : ", ") + std::string("buf") + std::to_string(b) + ": " +
           std::string(dtype_short_name(buf.dtype)) + list_str(buf.sizes);
    if (std::find(stored.begin(), stored.end(), b) != stored.end()) out += " out";
    first = false;
  }
  out += ")\n";
  for (size_t l = 0; l < k.locals.size(); ++l)
    out += "  t" + std::to_string(l) + ": " + scalar_type_name(k.locals[l]) + "\n";
  out += stmt_str(k.root, 1);
  return out;
}

std::string program_str(const Program& p) {
  std::string out;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    out += "buf" + std::to_string(b) + ": " + std::string(dtype_short_name(buf.dtype)) + list_str(buf.sizes) +
           " strides " + list_str(buf.strides) + " " + role_name(buf.role);
    if (buf.role == BufferRole::Input) out += " #" + std::to_string(buf.input) + (buf.mutated ? " mutated" : "");
    if (!buf.name.empty()) out += " (" + buf.name + ")";
    out += "\n";
  }
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::Kernel) {
      out += kernel_str(p.kernels.at(static_cast<size_t>(s.index)), p);
    } else {
      const ExternCall& e = p.externs.at(static_cast<size_t>(s.index));
      out += "extern node " + std::to_string(e.node);
      if (e.result >= 0) out += " -> buf" + std::to_string(e.result);
      if (!e.reason.empty()) out += "  # " + e.reason;
      out += "\n";
    }
  }
  for (const Check& c : p.checks) out += "check buf" + std::to_string(c.buf) + " == 0 else " + c.message + "\n";
  return out;
}

namespace {

// The kernel invariants, checked in one walk; `err` holds the first violation.
struct KernelVerifier : Visitor {
  const Kernel& k;
  const Program& p;
  const std::string where;
  std::string err;
  std::vector<bool> bound;    // loop variables of the enclosing loops
  std::vector<bool> defined;  // locals set by a statement before this one

  KernelVerifier(const Kernel& kernel, const Program& program)
      : k(kernel), p(program), where("kernel " + kernel.name + ": "), bound(static_cast<size_t>(kernel.num_vars), false), defined(kernel.locals.size(), false) {}

  // ---- expressions
  void visit_Var(const Expr& x) override {
    if (err.empty() && (x->id >= k.num_vars || !bound[static_cast<size_t>(x->id)]))
      err = where + "vars_bound_by_enclosing_loop violated by v" + std::to_string(x->id);
  }
  void visit_Local(const Expr& x) override {
    if (!err.empty()) return;
    if (x->id < 0 || x->id >= static_cast<int>(k.locals.size()) || !defined[static_cast<size_t>(x->id)])
      err = where + "locals_defined_before_use violated by t" + std::to_string(x->id);
    else if (k.locals[static_cast<size_t>(x->id)] != x->type)
      err = where + "local_types_match violated by t" + std::to_string(x->id);
  }
  void visit_Load(const Expr& x) override {
    if (err.empty() && (x->id < 0 || x->id >= static_cast<int>(p.buffers.size())))
      err = where + "buffers_exist violated by buf" + std::to_string(x->id);
    if (err.empty() && x->args[0]->type != ScalarType::I64)
      err = where + "indices_are_i64 violated by a load of buf" + std::to_string(x->id);
    visit_children(x);
  }

  // ---- statements
  void visit_Loop(const Stmt& s) override {
    if (!err.empty()) return;
    if (s.var < 0 || s.var >= k.num_vars) {
      err = where + "loop_var_in_range violated";
      return;
    }
    if (bound[static_cast<size_t>(s.var)]) {
      err = where + "loop_vars_not_shadowed violated by v" + std::to_string(s.var);
      return;
    }
    if (s.parallel && &s != &k.root) {
      err = where + "only_root_is_parallel violated";
      return;
    }
    bound[static_cast<size_t>(s.var)] = true;
    for (const Stmt& c : s.body) visit(c);
    bound[static_cast<size_t>(s.var)] = false;
  }
  void visit_Store(const Stmt& s) override {
    if (!err.empty()) return;
    if (s.buf < 0 || s.buf >= static_cast<int>(p.buffers.size())) {
      err = where + "buffers_exist violated";
      return;
    }
    if (p.buffers[static_cast<size_t>(s.buf)].role == BufferRole::Input && !p.buffers[static_cast<size_t>(s.buf)].mutated) {
      err = where + "inputs_read_only violated";  // only inputs an in-place op mutates are written
      return;
    }
    if (s.index->type != ScalarType::I64) {
      err = where + "indices_are_i64 violated by a store to buf" + std::to_string(s.buf);
      return;
    }
    visit(s.index);
    visit(s.value);
    if (err.empty() && s.value->type != dtype_compute_type(p.buffers[static_cast<size_t>(s.buf)].dtype))
      err = where + "store_type_matches_buffer violated for buf" + std::to_string(s.buf);
  }
  void set_local(const Stmt& s) {
    if (!err.empty()) return;
    if (s.local < 0 || s.local >= static_cast<int>(k.locals.size())) {
      err = where + "local_in_range violated";
      return;
    }
    if (s.kind == StmtKind::Reduce && !defined[static_cast<size_t>(s.local)]) {
      err = where + "reduce_after_init violated by t" + std::to_string(s.local);
      return;
    }
    if (s.value) {
      visit(s.value);
      if (err.empty() && s.value->type != k.locals[static_cast<size_t>(s.local)])
        err = where + "local_types_match violated by t" + std::to_string(s.local);
    }
    defined[static_cast<size_t>(s.local)] = true;
  }
  void visit_Let(const Stmt& s) override { set_local(s); }
  void visit_Init(const Stmt& s) override { set_local(s); }
  void visit_Reduce(const Stmt& s) override { set_local(s); }
};

}  // namespace

std::string verify_kernel(const Kernel& k, const Program& p) {
  if (k.root.kind != StmtKind::Loop || !k.root.parallel) return "kernel " + k.name + ": root_is_parallel_loop violated";
  KernelVerifier v(k, p);
  v.visit(k.root);
  return v.err;
}

std::string verify_program(const Program& p) {
  std::vector<bool> written(p.buffers.size(), false);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.sizes.size() != buf.strides.size()) return "buf" + std::to_string(b) + ": sizes_match_strides violated";
    bool empty = std::any_of(buf.sizes.begin(), buf.sizes.end(), [](const SymInt& x) { return x == 0; });
    if (buf.role == BufferRole::Input || empty) written[b] = true;  // empty: nothing to write
  }
  auto buffer_exists = [&](int b) { return b >= 0 && b < static_cast<int>(p.buffers.size()); };
  for (const Step& s : p.steps) {
    size_t steps_of_kind = s.kind == Step::Kind::Kernel ? p.kernels.size() : p.externs.size();
    if (s.index < 0 || static_cast<size_t>(s.index) >= steps_of_kind) return "steps_in_range violated";
    if (s.kind == Step::Kind::Kernel) {
      const Kernel& k = p.kernels.at(static_cast<size_t>(s.index));
      if (auto e = verify_kernel(k, p); !e.empty()) return e;
      const std::vector<int> stored = k.stored_buffers();
      for (int b : k.loaded_buffers())
        if (!written[static_cast<size_t>(b)] && !std::binary_search(stored.begin(), stored.end(), b))
          return "kernel " + k.name + ": buffers_written_before_read violated by buf" + std::to_string(b);
      for (int b : stored) written[static_cast<size_t>(b)] = true;
    } else {
      const ExternCall& e = p.externs.at(static_cast<size_t>(s.index));
      for (auto& [n, ref] : e.operands)
        if (ref.buf >= 0 && !buffer_exists(ref.buf))
          return "extern node " + std::to_string(e.node) + ": buffers_exist violated by buf" + std::to_string(ref.buf);
      if (e.result >= 0 && !buffer_exists(e.result))
        return "extern node " + std::to_string(e.node) + ": buffers_exist violated by buf" + std::to_string(e.result);
      for (auto& [n, ref] : e.operands)
        if (ref.buf >= 0 && !written[static_cast<size_t>(ref.buf)])
          return "extern node " + std::to_string(e.node) + ": buffers_written_before_read violated by buf" + std::to_string(ref.buf);
      if (e.result >= 0) written[static_cast<size_t>(e.result)] = true;
    }
  }
  for (auto& [n, ref] : p.outputs) {
    if (ref.buf >= 0 && !buffer_exists(ref.buf))
      return "output node " + std::to_string(n) + ": buffers_exist violated by buf" + std::to_string(ref.buf);
    if (ref.buf >= 0 && !written[static_cast<size_t>(ref.buf)])
      return "output node " + std::to_string(n) + ": outputs_written violated by buf" + std::to_string(ref.buf);
  }
  for (const Check& c : p.checks) {
    if (!buffer_exists(c.buf) || !written[static_cast<size_t>(c.buf)] || p.buffers[static_cast<size_t>(c.buf)].role != BufferRole::Output ||
        p.buffers[static_cast<size_t>(c.buf)].dtype != DType::Int64)
      return "check of buf" + std::to_string(c.buf) + ": checks_read_written_int64_outputs violated";
    if (!p.externs.empty()) return "check of buf" + std::to_string(c.buf) + ": checks_without_externs violated";
  }
  return "";
}

// ---- dynamic shapes ----------------------------------------------------------------------------

namespace {

void specialize_shape(SymShape& s, const std::vector<int64_t>& bindings) {
  for (SymInt& x : s) x = sym_specialize(x, bindings);
}

void specialize_ref(TensorRef& r, const std::vector<int64_t>& bindings) {
  specialize_shape(r.sizes, bindings);
  specialize_shape(r.strides, bindings);
  r.offset = sym_specialize(r.offset, bindings);
}

void specialize_extents(Stmt& s, const std::vector<int64_t>& bindings) {
  s.extent = sym_specialize(s.extent, bindings);
  for (Stmt& c : s.body) specialize_extents(c, bindings);
}

}  // namespace

Program specialize_program(const Program& p, const std::vector<int64_t>& bindings) {
  Program out = p;
  out.symbolic = false;
  for (Buffer& b : out.buffers) {
    specialize_shape(b.sizes, bindings);
    specialize_shape(b.strides, bindings);
  }
  for (Kernel& k : out.kernels) specialize_extents(k.root, bindings);
  for (ExternCall& e : out.externs) {
    for (Value& a : e.args) specialize_value(a, bindings);
    for (auto& [node, ref] : e.operands) specialize_ref(ref, bindings);
  }
  for (auto& [node, ref] : out.outputs) specialize_ref(ref, bindings);
  return out;
}

}  // namespace ff::loop
