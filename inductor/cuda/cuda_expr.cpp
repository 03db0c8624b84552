// Loop IR expressions and statements as CUDA C++.
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_set>

#include "inductor/cuda/cuda_codegen.h"
#include "src/base/errors.h"

namespace ff::cuda::detail {

using loop::BinaryOp;
using loop::Expr;
using loop::ExprKind;
using loop::ExprNode;
using loop::ReduceOp;
using loop::ScalarType;
using loop::Stmt;
using loop::StmtKind;
using loop::UnaryOp;

const char* c_type(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return "bool";
    case ScalarType::I32: return "int";
    case ScalarType::I64: return "long long";
    case ScalarType::F32: return "float";
    case ScalarType::F64: return "double";
  }
  return "?";
}

const char* storage_type(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Bool: return "unsigned char";
    case DType::Int8: return "signed char";
    case DType::Int16: return "short";
    case DType::Int32: return "int";
    case DType::Int64: return "long long";
    case DType::Float16:
    case DType::BFloat16: return "unsigned short";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    default: break;
  }
  throw_internal(__FILE__, __LINE__, "the CUDA renderer has no storage type for " + std::string(dtype_name(t)));
}

namespace {

std::string float_literal(double v, ScalarType t) {
  bool f32 = t == ScalarType::F32;
  if (std::isnan(v)) return f32 ? "FF_NAN_F" : "FF_NAN_D";
  if (std::isinf(v)) return std::string(v < 0 ? "(-" : "(") + (f32 ? "FF_INF_F" : "FF_INF_D") + ")";
  char buf[64];
  if (f32) std::snprintf(buf, sizeof buf, "%.9gf", static_cast<double>(static_cast<float>(v)));
  else std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // "1f" is not a literal: make sure there is a decimal point or exponent.
  if (s.find_first_of(".eEn") == std::string::npos) s.insert(f32 ? s.size() - 1 : s.size(), ".0");
  if (s[0] == '-') s = "(" + s + ")";
  return s;
}

std::string int_literal(int64_t v, ScalarType t) {
  if (t == ScalarType::Bool) return v ? "true" : "false";
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
  std::string s = std::to_string(v);
  if (t == ScalarType::I64 && (v > INT32_MAX || v < INT32_MIN)) s += "LL";
  return v < 0 ? "(" + s + ")" : s;
}

std::string const_str(const ExprNode& e) {
  if (loop::is_float(e.type)) return float_literal(e.f, e.type);
  return int_literal(e.i, e.type);
}

const char* unary_fn(UnaryOp op) {
  switch (op) {
    case UnaryOp::Abs: return "ff_abs";
    case UnaryOp::Exp: return "ff_exp";
    case UnaryOp::Log: return "ff_log";
    case UnaryOp::Sin: return "ff_sin";
    case UnaryOp::Cos: return "ff_cos";
    case UnaryOp::Tan: return "ff_tan";
    case UnaryOp::Tanh: return "ff_tanh";
    case UnaryOp::Sqrt: return "ff_sqrt";
    case UnaryOp::Rsqrt: return "ff_rsqrt";
    case UnaryOp::Erf: return "ff_erf";
    case UnaryOp::Sigmoid: return "ff_sigmoid";
    case UnaryOp::Floor: return "ff_floor";
    case UnaryOp::Ceil: return "ff_ceil";
    case UnaryOp::Reciprocal: return "ff_recip";
    case UnaryOp::Log1p: return "ff_log1p";
    case UnaryOp::Expm1: return "ff_expm1";
    case UnaryOp::Exp2: return "ff_exp2";
    case UnaryOp::Log2: return "ff_log2";
    case UnaryOp::Log10: return "ff_log10";
    case UnaryOp::Asin: return "ff_asin";
    case UnaryOp::Acos: return "ff_acos";
    case UnaryOp::Atan: return "ff_atan";
    case UnaryOp::Sinh: return "ff_sinh";
    case UnaryOp::Cosh: return "ff_cosh";
    case UnaryOp::Erfc: return "ff_erfc";
    case UnaryOp::Asinh: return "ff_asinh";
    case UnaryOp::Acosh: return "ff_acosh";
    case UnaryOp::Atanh: return "ff_atanh";
    case UnaryOp::Round: return "ff_round";
    case UnaryOp::SignBit: return "ff_signbit";
    default: return nullptr;
  }
}

const char* infix(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "!=";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "<=";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return ">=";
    case BinaryOp::And: return "&&";
    case BinaryOp::Or: return "||";
    case BinaryOp::BitAnd: return "&";
    case BinaryOp::BitOr: return "|";
    case BinaryOp::BitXor: return "^";
    default: return nullptr;
  }
}

bool trivial(const ExprNode& e) {
  return e.kind == ExprKind::Const || e.kind == ExprKind::Var || e.kind == ExprKind::Local || e.kind == ExprKind::Sym;
}

}  // namespace

bool Emitter::nonneg(const Expr& e) const {
  switch (e->kind) {
    case ExprKind::Const: return !loop::is_float(e->type) && e->i >= 0;
    case ExprKind::Var:
    case ExprKind::Sym: return true;  // sizes
    case ExprKind::Binary: {
      auto op = static_cast<BinaryOp>(e->op);
      if (op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::FloorDiv || op == BinaryOp::Mod ||
          op == BinaryOp::Div)
        return nonneg(e->args[0]) && nonneg(e->args[1]);
      return false;
    }
    default: return false;
  }
}

bool Emitter::reads_data(const Expr& e) {
  auto it = reads_data_.find(e.get());
  if (it != reads_data_.end()) return it->second;
  bool r = e->kind == ExprKind::Load || e->kind == ExprKind::Local;
  for (const Expr& a : e->args) r = reads_data(a) || r;
  reads_data_.emplace(e.get(), r);
  return r;
}

namespace {

// Integer + - * and negation on values wrap like torch's (two's complement); C++ leaves signed
// overflow undefined, so they are computed unsigned. Index arithmetic (no loads) never overflows
// and keeps the signed form the compiler optimizes better.
std::string wrapping_int(ScalarType t, const std::string& op, const std::string& a, const std::string& b) {
  const char* s = c_type(t);
  const char* u = t == ScalarType::I64 ? "unsigned long long" : "unsigned";
  if (b.empty()) return std::string("((") + s + ")(0" + (t == ScalarType::I64 ? "ull" : "u") + " - (" + u + ")" + a + "))";
  return std::string("((") + s + ")((" + u + ")" + a + " " + op + " (" + u + ")" + b + "))";
}

// loop::narrow as C++: 8/16-bit ints through their C types, f16/bf16 through the prelude's conversions.
std::string narrow_str(DType dt, const std::string& a) {
  switch (dt) {
    case DType::UInt8: return "((int)(unsigned char)" + a + ")";
    case DType::Int8: return "((int)(signed char)" + a + ")";
    case DType::Int16: return "((int)(short)" + a + ")";
    case DType::Float16: return "ff_f16_to_f32(ff_f32_to_f16(" + a + "))";
    case DType::BFloat16: return "ff_bf16_to_f32(ff_f32_to_bf16(" + a + "))";
    default: return a;
  }
}

}  // namespace

std::string Emitter::load_value(int buf, const std::string& element, ScalarType type) const {
  DType dt = p_.buffers.at(static_cast<size_t>(buf)).dtype;
  std::string v;
  ScalarType have;
  if (dt == DType::Float16) v = "ff_f16_to_f32(" + element + ")", have = ScalarType::F32;
  else if (dt == DType::BFloat16) v = "ff_bf16_to_f32(" + element + ")", have = ScalarType::F32;
  else if (dt == DType::Bool) v = "(" + element + " != 0)", have = ScalarType::Bool;
  else v = element, have = loop::dtype_compute_type(dt);
  if (dt == DType::Int64) have = ScalarType::I64;
  if (dt == DType::Float64) have = ScalarType::F64;
  if (have == type && (dt == DType::Int32 || dt == DType::Int64 || dt == DType::Float32 || dt == DType::Float64 ||
                       dt == DType::Float16 || dt == DType::BFloat16 || dt == DType::Bool))
    return v;
  if (type == ScalarType::Bool) return "(" + v + " != 0)";
  return std::string("((") + c_type(type) + ")" + v + ")";
}

std::string Emitter::store_value(int buf, const std::string& value) const {
  DType dt = p_.buffers.at(static_cast<size_t>(buf)).dtype;
  if (dt == DType::Float16) return "ff_f32_to_f16((float)(" + value + "))";
  if (dt == DType::BFloat16) return "ff_f32_to_bf16((float)(" + value + "))";
  if (dt == DType::Bool) return "(unsigned char)((" + value + ") != 0)";
  return std::string("(") + storage_type(dt) + ")(" + value + ")";
}

std::string Emitter::expr(const Expr& e, int indent) {
  // Count uses within this expression DAG so that shared nodes are computed once.
  std::unordered_map<const ExprNode*, int> uses;
  std::function<void(const Expr&)> count = [&](const Expr& x) {
    if (uses[x.get()]++ > 0) return;
    for (const Expr& a : x->args) count(a);
  };
  count(e);
  std::unordered_map<const ExprNode*, std::string> temps;
  // sin and cos of one value in one expression become one ff_sincos: a single argument reduction,
  // and half the inlined library code for NVRTC to compile.
  bool has_sin = false, has_cos = false;
  for (auto& [node, n] : uses) {
    if (node->kind != ExprKind::Unary) continue;
    has_sin |= static_cast<UnaryOp>(node->op) == UnaryOp::Sin;
    has_cos |= static_cast<UnaryOp>(node->op) == UnaryOp::Cos;
  }
  pair_sincos_ = has_sin && has_cos;
  sincos_.clear();
  std::string s = render(e, uses, temps, indent);
  pair_sincos_ = false;
  return s;
}

std::string Emitter::render(const Expr& e, const std::unordered_map<const ExprNode*, int>& uses,
                            std::unordered_map<const ExprNode*, std::string>& temps, int indent) {
  auto it = temps.find(e.get());
  if (it != temps.end()) return it->second;
  std::vector<std::string> a;
  for (const Expr& x : e->args) a.push_back(render(x, uses, temps, indent));
  std::string s;
  switch (e->kind) {
    case ExprKind::Const: s = const_str(*e); break;
    case ExprKind::Var: {
      auto v = vars_.find(e->id);
      FF_CHECK(v != vars_.end(), "loop variable v" + std::to_string(e->id) + " used outside its loop");
      s = v->second;
      break;
    }
    case ExprKind::Local: s = "t" + std::to_string(e->id); break;
    case ExprKind::Sym: s = "s" + std::to_string(e->id); break;
    case ExprKind::Load: {
      auto reg = vec_loads.find(e.get());
      if (reg != vec_loads.end() && lane_ >= 0)
        s = load_value(e->id, reg->second + ".v[" + std::to_string(lane_) + "]", e->type);
      else
        s = load_value(e->id, "b" + std::to_string(e->id) + "[" + a[0] + "]", e->type);
      break;
    }
    case ExprKind::Unary: {
      auto op = static_cast<UnaryOp>(e->op);
      if (op == UnaryOp::Neg && !loop::is_float(e->type) && e->type != ScalarType::Bool && reads_data(e))
        s = wrapping_int(e->type, "-", a[0], "");
      else if (op == UnaryOp::Neg) s = "(-" + a[0] + ")";
      else if (op == UnaryOp::Not) s = "(!" + a[0] + ")";
      else if (op == UnaryOp::IsNan) s = "(" + a[0] + " != " + a[0] + ")";
      else if (pair_sincos_ && (op == UnaryOp::Sin || op == UnaryOp::Cos)) {
        // NB: keyed by the operand's C++ text (side-effect free), so equal loads pair up too.
        std::string key = std::string(c_type(e->type)) + " " + a[0];
        auto sc = sincos_.find(key);
        if (sc == sincos_.end()) {
          std::string id = std::to_string(temp_counter_++);
          line(indent, std::string(c_type(e->type)) + " sn" + id + ", cs" + id + ";");
          line(indent, "ff_sincos(" + a[0] + ", &sn" + id + ", &cs" + id + ");");
          sc = sincos_.emplace(key, std::make_pair("sn" + id, "cs" + id)).first;
        }
        s = op == UnaryOp::Sin ? sc->second.first : sc->second.second;
      } else {
        const char* fn = unary_fn(op);
        FF_CHECK(fn, "unary op without a CUDA rendering");
        s = std::string(fn) + "(" + a[0] + ")";
      }
      break;
    }
    case ExprKind::Binary: {
      auto op = static_cast<BinaryOp>(e->op);
      bool ints = !loop::is_float(e->args[0]->type);
      bool wraps = (op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul) && ints &&
                   e->type != ScalarType::Bool && reads_data(e);
      if (wraps) {
        s = wrapping_int(e->type, infix(op), a[0], a[1]);
      } else if (op == BinaryOp::Shl || op == BinaryOp::Shr) {
        // NB: the count modulo the bit width (loop_ir.h); a left shift computed unsigned (C++ leaves
        // shifting a negative value left undefined), a right shift of a signed value is arithmetic
        std::string count = "(" + a[1] + " & " + (e->type == ScalarType::I64 ? "63" : "31") + ")";
        s = op == BinaryOp::Shl ? wrapping_int(e->type, "<<", a[0], count) : "(" + a[0] + " >> " + count + ")";
      } else if (loop::is_rounded_mul(*e) && loop::is_float(e->type)) {
        // NB: one op's result: rounded before the next op adds to it, as eager's separate kernels do.
        s = std::string(e->type == ScalarType::F64 ? "__dmul_rn(" : "__fmul_rn(") + a[0] + ", " + a[1] + ")";
      } else if (const char* sym = infix(op)) {
        s = "(" + a[0] + " " + sym + " " + a[1] + ")";
      } else if ((op == BinaryOp::FloorDiv || op == BinaryOp::Mod) && ints && nonneg(e->args[0]) &&
                 nonneg(e->args[1])) {
        // NB: index arithmetic: both sides are non-negative, so C's / and % are Python's.
        s = "(" + a[0] + (op == BinaryOp::FloorDiv ? " / " : " % ") + a[1] + ")";
      } else {
        const char* fn = op == BinaryOp::FloorDiv    ? "ff_floordiv"
                         : op == BinaryOp::Mod       ? "ff_mod"
                         : op == BinaryOp::Max       ? "ff_max"
                         : op == BinaryOp::Min       ? "ff_min"
                         : op == BinaryOp::Fmod      ? "ff_fmod"
                         : op == BinaryOp::Atan2     ? "ff_atan2"
                         : op == BinaryOp::NextAfter ? (e->type == ScalarType::F64 ? "nextafter" : "nextafterf")
                                                     : "ff_pow";
        s = std::string(fn) + "(" + a[0] + ", " + a[1] + ")";
      }
      break;
    }
    case ExprKind::Select: s = "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")"; break;
    case ExprKind::Fma: s = std::string(e->type == ScalarType::F64 ? "fma(" : "fmaf(") + a[0] + ", " + a[1] + ", " + a[2] + ")"; break;
    case ExprKind::Cast:
      if (e->type == ScalarType::Bool) s = "(" + a[0] + " != 0)";
      else s = std::string("((") + c_type(e->type) + ")" + a[0] + ")";
      break;
    case ExprKind::Narrow: {
      DType dt = static_cast<DType>(e->i);
      const Expr& x = e->args[0];
      s = loop::holds_dtype_values(x, dt, p_) ? a[0] : narrow_str(dt, a[0]);
      break;
    }
    case ExprKind::Call: {  // the math library (inductor/math_library.inc) computes in double or int64
      if (loop::math_fn_int(static_cast<loop::MathFn>(e->op))) {
        s = std::string("((") + c_type(e->type) + ")ff_math_" + loop::math_fn_name(static_cast<loop::MathFn>(e->op)) +
            "((long long)" + a[0] + ", (long long)" + a[1] + "))";
        break;
      }
      bool f64 = e->type == ScalarType::F64;
      s = std::string("ff_math_") + loop::math_fn_name(static_cast<loop::MathFn>(e->op)) + "(";
      for (size_t k = 0; k < a.size(); ++k) s += (k ? ", " : "") + (f64 ? a[k] : "(double)" + a[k]);
      s = f64 ? s + ")" : "((float)" + s + "))";
      break;
    }
  }
  auto u = uses.find(e.get());
  if (u != uses.end() && u->second > 1 && !trivial(*e)) {
    std::string name = "e" + std::to_string(temp_counter_++);
    line(indent, std::string("const ") + c_type(e->type) + " " + name + " = " + s + ";");
    s = name;
  }
  temps.emplace(e.get(), s);
  return s;
}

std::string Emitter::identity(ReduceOp op, ScalarType t) {
  bool f = loop::is_float(t);
  switch (op) {
    case ReduceOp::Sum: return f ? float_literal(0.0, t) : int_literal(0, t);
    case ReduceOp::Prod: return f ? float_literal(1.0, t) : int_literal(1, t);
    case ReduceOp::Max:
    case ReduceOp::Min: {
      bool mx = op == ReduceOp::Max;
      if (f) return float_literal(mx ? -INFINITY : INFINITY, t);
      if (t == ScalarType::Bool) return mx ? "false" : "true";
      if (t == ScalarType::I32) return mx ? "(-2147483647 - 1)" : "2147483647";
      return mx ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL";
    }
  }
  return "0";
}

void Emitter::stmt(const Stmt& s, int indent) {
  switch (s.kind) {
    case StmtKind::Loop: {
      std::string v = "v" + std::to_string(s.var);
      bind_var(s.var, v);
      line(indent, std::string("for (") + ix_ + " " + v + " = 0; " + v + " < " + size(s.extent) + "; ++" + v + ") {");
      for (const Stmt& c : s.body) stmt(c, indent + 1);
      line(indent, "}");
      break;
    }
    case StmtKind::Store: {
      std::string value = expr(loop::stored_value(s.value, p_.buffers.at(static_cast<size_t>(s.buf)).dtype), indent);
      auto reg = vec_stores.find(&s);
      if (reg != vec_stores.end() && lane_ >= 0) {
        line(indent, reg->second + ".v[" + std::to_string(lane_) + "] = " + store_value(s.buf, value) + ";");
      } else {
        std::string index = expr(s.index, indent);
        line(indent, "b" + std::to_string(s.buf) + "[" + index + "] = " + store_value(s.buf, value) + ";");
      }
      break;
    }
    case StmtKind::Let: line(indent, "t" + std::to_string(s.local) + " = " + expr(s.value, indent) + ";"); break;
    case StmtKind::Init:
      line(indent, "t" + std::to_string(s.local) + " = " + identity(s.rop, k_.locals.at(static_cast<size_t>(s.local))) + ";");
      break;
    case StmtKind::Reduce: {
      std::string v = expr(s.value, indent);
      std::string t = "t" + std::to_string(s.local);
      line(indent, t + " = ff_comb<" + std::to_string(reduce_code(s.rop)) + ">(" + t + ", (" +
                       c_type(k_.locals.at(static_cast<size_t>(s.local))) + ")(" + v + "));");
      break;
    }
  }
}

std::string Emitter::params() const {
  std::string out;
  std::vector<int> loaded = k_.loaded_buffers(), stored = k_.stored_buffers();
  std::unordered_set<int> st(stored.begin(), stored.end());
  for (int b : k_.buffers()) {
    if (!out.empty()) out += ", ";
    const loop::Buffer& buf = p_.buffers.at(static_cast<size_t>(b));
    out += std::string(st.count(b) ? "" : "const ") + storage_type(buf.dtype) + "* __restrict__ b" + std::to_string(b);
  }
  // NB: sizes by value after the buffers (the runtime passes each as a 64-bit integer); the kernel
  // computes with them in its index type (declare_locals).
  for (SymbolId id : k_.symbols()) out += (out.empty() ? "" : ", ") + std::string("long long ff_s") + std::to_string(id);
  return out;
}

std::string Emitter::size(const SymInt& s) const {
  if (!s.is_symbolic()) return std::to_string(s.hint());
  using K = SymProgram::Op::Kind;
  // NB: sizes are never negative, so C's division and remainder are Python's here.
  return SymProgram::fold<std::string>(
      s.expr(), [](int64_t c) { return c < 0 ? "(" + std::to_string(c) + ")" : std::to_string(c); },
      [](SymbolId id) { return "s" + std::to_string(id); },
      [](K kind, const std::string& a, const std::string& b) {
        const char* neutral = kind == K::Add ? "0" : kind == K::Mul ? "1"
                                                                    : nullptr;
        if (neutral && a == neutral) return b;
        if (neutral && b == neutral) return a;
        const char* op = kind == K::Add ? " + " : kind == K::Mul    ? " * "
                                              : kind == K::FloorDiv ? " / "
                                                                    : " % ";
        return "(" + a + op + b + ")";
      });
}

void Emitter::declare_locals(int indent) {
  for (SymbolId id : k_.symbols())
    line(indent, std::string("const ") + ix_ + " s" + std::to_string(id) + " = (" + ix_ + ")ff_s" + std::to_string(id) + ";");
  for (size_t i = 0; i < k_.locals.size(); ++i)
    line(indent, std::string(c_type(k_.locals[i])) + " t" + std::to_string(i) + ";");
}

}  // namespace ff::cuda::detail
