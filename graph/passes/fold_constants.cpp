#include "graph/passes/fold_constants.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/rewriter.h"
#include "graph/printer.h"
#include "src/base/logging.h"

namespace ff {
namespace {

// ---- Python scalar arithmetic, exactly as CPython computes it (or not at all) ----------------

// Ints of magnitude up to 2**53 convert to double exactly. NB: compare as ints: 2**53 + 1 rounds
// to 2**53 as a double and would pass a floating-point check.
bool exact_as_double(int64_t v) {
  constexpr int64_t kLimit = int64_t{1} << 53;
  return v >= -kLimit && v <= kLimit;
}

// int/bool operands as ints (True + True == 2), or nullopt.
std::optional<int64_t> as_int(const Value& v) {
  if (v.kind == Value::Kind::Int) return v.i;
  if (v.kind == Value::Kind::Bool) return v.b ? 1 : 0;
  return std::nullopt;
}

std::optional<Value> int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    // Python: a float result; 0 ** -1 raises.
    if (base == 0 || !exact_as_double(base)) return std::nullopt;
    double r = std::pow(static_cast<double>(base), static_cast<double>(exp));
    return std::isfinite(r) ? std::optional<Value>(Value::of_float(r)) : std::nullopt;
  }
  int64_t result = 1;
  for (int64_t k = 0; k < exp; ++k) {
    if (__builtin_mul_overflow(result, base, &result)) return std::nullopt;
    if (result == 0 || result == 1) break;  // stays there (base 0 or 1)
    if (base == -1) {                        // alternates
      result = (exp % 2 == 0) ? 1 : -1;
      break;
    }
  }
  return Value::of_int(result);
}

std::optional<Value> int_arith(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == Op::op_add) return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional<Value>(Value::of_int(r));
  if (op == Op::op_sub) return __builtin_sub_overflow(a, b, &r) ? std::nullopt : std::optional<Value>(Value::of_int(r));
  if (op == Op::op_mul) return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional<Value>(Value::of_int(r));
  if (op == Op::op_floordiv || op == Op::op_mod) {
    if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1)) return std::nullopt;
    int64_t q = a / b, m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {  // Python rounds toward -inf; the remainder takes b's sign
      q -= 1;
      m += b;
    }
    return Value::of_int(op == Op::op_floordiv ? q : m);
  }
  if (op == Op::op_truediv) {
    if (b == 0 || !exact_as_double(a) || !exact_as_double(b)) return std::nullopt;
    return Value::of_float(static_cast<double>(a) / static_cast<double>(b));
  }
  if (op == Op::op_pow) return int_pow(a, b);
  if (op == Op::op_lt) return Value::of_bool(a < b);
  if (op == Op::op_le) return Value::of_bool(a <= b);
  if (op == Op::op_gt) return Value::of_bool(a > b);
  if (op == Op::op_ge) return Value::of_bool(a >= b);
  if (op == Op::op_eq) return Value::of_bool(a == b);
  if (op == Op::op_ne) return Value::of_bool(a != b);
  return std::nullopt;
}

std::optional<Value> float_arith(Op op, const Value& va, const Value& vb) {
  // Python's arithmetic converts an int operand to the nearest float, as the cast does; its
  // comparisons compare exactly, which doubles do only while the int converts exactly.
  bool comparison = op == Op::op_lt || op == Op::op_le || op == Op::op_gt || op == Op::op_ge || op == Op::op_eq || op == Op::op_ne;
  for (const Value* v : {&va, &vb})
    if (auto i = as_int(*v); comparison && i && !exact_as_double(*i)) return std::nullopt;
  double a = va.as_double(), b = vb.as_double();
  if (op == Op::op_add) return Value::of_float(a + b);
  if (op == Op::op_sub) return Value::of_float(a - b);
  if (op == Op::op_mul) return Value::of_float(a * b);
  if (op == Op::op_truediv) return b == 0.0 ? std::nullopt : std::optional<Value>(Value::of_float(a / b));
  if (op == Op::op_pow) {
    // NB: Python's float ** has its own errors (0.0 ** -1 raises, (-8.0) ** 0.5 is complex,
    // overflow raises) and special cases for inf/nan: only the plain finite case is folded.
    if (!std::isfinite(a) || !std::isfinite(b) || (a == 0.0 && b < 0.0) || (a < 0.0 && b != std::floor(b)))
      return std::nullopt;
    double r = std::pow(a, b);
    return std::isfinite(r) ? std::optional<Value>(Value::of_float(r)) : std::nullopt;
  }
  if (op == Op::op_lt) return Value::of_bool(a < b);
  if (op == Op::op_le) return Value::of_bool(a <= b);
  if (op == Op::op_gt) return Value::of_bool(a > b);
  if (op == Op::op_ge) return Value::of_bool(a >= b);
  if (op == Op::op_eq) return Value::of_bool(a == b);
  if (op == Op::op_ne) return Value::of_bool(a != b);
  return std::nullopt;  // floordiv / mod on floats: CPython's rounding rules, not worth the risk
}

// ---- the rule table ---------------------------------------------------------------------------

struct FoldSite {
  const GraphRewriter& rw;
  const Node& node;
  const std::vector<Value>& args;     // operands, already rewritten
  const std::set<NodeId>& returned;   // source nodes the output names directly
  NodeId id;

  const OpDef* op() const { return node.kind == NodeKind::Call ? &op_def(node.op) : nullptr; }
};

struct FoldRule {
  const char* name;
  const char* doc;
  bool (*pattern)(const FoldSite&);
  bool (*guard)(const FoldSite&);                         // nullptr: none
  std::optional<Value> (*replacement)(const FoldSite&);  // nullopt: refuses (Python would raise ...)
};

std::string_view operator_name(const OpDef& op) {
  std::string_view t = op.target;
  return t.starts_with("operator.") ? t.substr(9) : std::string_view();
}

bool is_number(const Value& v) { return v.is_number(); }

bool python_scalar_pattern(const FoldSite& s) {
  const OpDef* op = s.op();
  if (!op || operator_name(*op).empty() || (op->style != PrintStyle::Infix && op->style != PrintStyle::Prefix)) return false;
  for (const Value& v : s.args)
    if (!is_number(v)) return false;
  return true;
}

bool scalar_result_guard(const FoldSite& s) {
  ValueMeta::Kind k = s.node.meta.kind;
  return k == ValueMeta::Kind::Int || k == ValueMeta::Kind::Float || k == ValueMeta::Kind::Bool;
}

std::optional<Value> python_scalar_value(const FoldSite& s) {
  const Op op = op_kind(s.op()->id);
  std::optional<Value> r;
  if (s.args.size() == 1) {
    const Value& a = s.args[0];
    if (op == Op::op_neg && a.kind == Value::Kind::Float) r = Value::of_float(-a.f);
    else if (op == Op::op_neg && as_int(a) && *as_int(a) != std::numeric_limits<int64_t>::min()) r = Value::of_int(-*as_int(a));
  } else if (s.args.size() == 2) {
    const Value &a = s.args[0], &b = s.args[1];
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) r = float_arith(op, a, b);
    else r = int_arith(op, *as_int(a), *as_int(b));
  }
  // The result must be what the node promised (int + int is an int ...).
  if (r && s.node.meta == ValueMeta::of(r->kind == Value::Kind::Int     ? ValueMeta::Kind::Int
                                        : r->kind == Value::Kind::Float ? ValueMeta::Kind::Float
                                                                        : ValueMeta::Kind::Bool))
    return r;
  return std::nullopt;
}

// Element `index` of a constant tuple/list operand, Python-style (negative counts from the end).
std::optional<Value> element(const Value& seq, int64_t index, const FoldSite& s) {
  int64_t n = static_cast<int64_t>(seq.items.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;  // IndexError at run time: leave it
  const Value& item = seq.items[static_cast<size_t>(index)];
  if (!(s.rw.result().meta_of(item) == s.node.meta)) return std::nullopt;
  return item;
}

bool getitem_of_constant_pattern(const FoldSite& s) {
  if (s.node.kind == NodeKind::GetItem) return s.args.size() == 2 && s.args[0].is_sequence();
  const OpDef* op = s.op();
  return op && op->style == PrintStyle::Subscript && s.args.size() == 2 && s.args[0].is_sequence() &&
         s.args[1].kind == Value::Kind::Int;
}

std::optional<Value> getitem_of_constant_value(const FoldSite& s) { return element(s.args[0], s.args[1].i, s); }

// Views that, with their result's sizes and strides equal to their input's, are the input:
// same storage, same offset (none of them moves the offset), same layout.
bool noop_view_pattern(const FoldSite& s) {
  static constexpr std::string_view kOps[] = {"view", "reshape", "expand", "flatten", "permute",
                                              "transpose", "t", "squeeze", "unsqueeze", "contiguous"};
  const OpDef* op = s.op();
  if (!op || s.args.empty() || !s.args[0].is_node()) return false;
  for (std::string_view name : kOps)
    if (op->name == name) return true;
  return false;
}

bool noop_view_guard(const FoldSite& s) {
  // NB: a returned view stays: eager returns a distinct tensor object (a view with its own
  // autograd history), not the input itself.
  if (s.returned.count(s.id)) return false;
  const ValueMeta& input = s.rw.result().node(s.args[0].node).meta;
  return input.is_tensor() && input == s.node.meta;
}

std::optional<Value> noop_view_value(const FoldSite& s) { return s.args[0]; }

const FoldRule kRules[] = {
    {"python_scalar_arith", "operator.* on Python numbers only (2 * 3, -n, 1 < 2.5) -> the number", python_scalar_pattern,
     scalar_result_guard, python_scalar_value},
    {"getitem_of_constant", "element i of a constant tuple or list -> that element", getitem_of_constant_pattern, nullptr,
     getitem_of_constant_value},
    {"noop_view", "view/reshape/expand/permute/... whose result has its input's exact metadata -> the input",
     noop_view_pattern, noop_view_guard, noop_view_value},
};

}  // namespace

std::vector<std::string> fold_rules() {
  std::vector<std::string> out;
  for (const FoldRule& r : kRules) out.push_back(std::string(r.name) + ": " + r.doc);
  return out;
}

Graph fold_constants(const Graph& g) { return fold_constants(g, nullptr); }

Graph fold_constants(const Graph& g, std::vector<std::string>* fired) {
  std::set<NodeId> returned;
  if (auto out = g.output())
    for (const Value& v : g.node(*out).args) v.for_each_node([&](NodeId id) { returned.insert(id); });
  GraphRewriter rw(g);
  for (size_t k = 0; k < g.size(); ++k) {
    NodeId id = static_cast<NodeId>(k);
    const Node& n = g.nodes()[k];
    if (n.kind != NodeKind::Call && n.kind != NodeKind::GetItem) {
      rw.copy(id);
      continue;
    }
    std::vector<Value> args;
    for (const Value& v : n.args) args.push_back(rw.map(v));
    FoldSite site{rw, n, args, returned, id};
    bool done = false;
    for (const FoldRule& rule : kRules) {
      if (!rule.pattern(site) || (rule.guard && !rule.guard(site))) continue;
      std::optional<Value> with = rule.replacement(site);
      if (!with) continue;
      if (log_enabled(LogComponent::graph, LogLevel::Debug))
        log_emit(LogComponent::graph, LogLevel::Debug,
                 "fold_constants: " + std::string(rule.name) + " replaced '" + n.name + "' with " +
                     value_str(*with, rw.result()));
      if (fired) fired->push_back(std::string(rule.name) + ": " + n.name);
      rw.replace(id, std::move(*with));
      done = true;
      break;
    }
    if (!done) rw.copy_with(id, std::move(args));
  }
  return rw.finish();
}

}  // namespace ff
