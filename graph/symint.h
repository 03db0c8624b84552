// Symbolic integers: the sizes and strides of a graph compiled for more than one shape.
//
// A SymInt is either a constant or an expression over size symbols (s0, s1 ...) together with the
// value it had in the traced call (its hint). Expressions are interned, immutable polynomials with
// integer coefficients over atoms: a symbol, or floor division / modulo by an expression that did
// not simplify away. Arithmetic simplifies eagerly (like terms combine, exact divisions cancel), so
// two expressions that are equal as polynomials are the same id.
//
// Symbols are names local to one graph: s0 is whatever the graph's inputs bind it to (see
// Graph::symbol_bindings), so an expression means nothing without the graph it came from.
//
// Deciding a comparison between symbolic values records what was relied on. Each symbol is a size
// that is at least 2 (sizes 0 and 1 are specialised, as torch.compile does), which settles many
// comparisons (`s0 == 1`, `s0 * 4 > 0`) with no guard. The rest are decided by the hints and
// recorded as guards in the active ShapeEnv; with no ShapeEnv active, deciding one throws
// SymbolicSpecialization (the caller specialises the graph to concrete sizes instead).
//
// Unbacked symbols (u0, u1 ...) are sizes no input has: an op's output whose size depends on its
// operands' values (nonzero, masked_select, unique ...; config capture_dynamic_output_shape_ops).
// The run binds them from that output. Each is >= 0, and a comparison its bounds do not settle
// throws UnbackedDecision: there is no value to guard (the frontend breaks the graph there).
//
// NB: conversion to int64_t is implicit and specialises (guards `expr == hint`). Code written for
// concrete sizes thus stays correct on symbolic ones: at worst it pins a size to the traced value.
// Code that keeps sizes symbolic works on SymInt directly.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace ff {

using SymExprId = uint32_t;  // 0: no expression (a constant SymInt)
using SymbolId = int32_t;

// How a guard compares its expression with 0.
enum class SymRel : uint8_t { Eq,
                              Ne,
                              Lt,
                              Le };
const char* sym_rel_str(SymRel r);  // "==", "!=", "<", "<="

// A comparison the trace relied on: `expr REL 0`.
struct SymGuard {
  SymExprId expr = 0;
  SymRel rel = SymRel::Eq;
  bool operator==(const SymGuard&) const = default;
};

// Deciding a symbolic comparison (or converting to int64_t) with no ShapeEnv to record it in.
class SymbolicSpecialization : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Deciding a comparison (or converting to int64_t) that needs an unbacked symbol's value.
class UnbackedDecision : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SymInt {
 public:
  SymInt() = default;
  SymInt(int64_t v) : v_(v) {}  // NOLINT(google-explicit-constructor): sizes are ints
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, int64_t> &&
                                          !std::is_same_v<T, bool>,
                                      int> = 0>
  SymInt(T v) : v_(static_cast<int64_t>(v)) {}  // NOLINT(google-explicit-constructor)
  static SymInt symbol(SymbolId id, int64_t hint);
  static SymInt unbacked(SymbolId id, int64_t hint);  // see ShapeEnv::new_unbacked
  // An expression and its hint; a constant expression gives a constant SymInt.
  static SymInt of_expr(SymExprId e, int64_t hint);

  bool is_symbolic() const { return e_ != 0; }
  SymExprId expr() const { return e_; }
  int64_t hint() const { return v_; }  // the value in the traced call (a constant's value)
  // The value, recording `expr == hint` in the active ShapeEnv when symbolic.
  int64_t guard_int() const;
  operator int64_t() const { return e_ == 0 ? v_ : guard_int(); }  // NOLINT: see the header comment
  // The symbol this is, or -1 when it is not a bare symbol.
  SymbolId as_symbol() const;
  // Same value for every binding (not a comparison: records nothing).
  bool same_as(const SymInt& o) const { return e_ == o.e_ && (e_ != 0 || v_ == o.v_); }
  std::string str() const;  // "8", "s0", "2*s0*s1 + 4"

  friend SymInt operator+(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a, const SymInt& b);
  friend SymInt operator*(const SymInt& a, const SymInt& b);
  // Floor division and modulo (Python's, the same as C's on the non-negative sizes they serve).
  friend SymInt operator/(const SymInt& a, const SymInt& b);
  friend SymInt operator%(const SymInt& a, const SymInt& b);
  SymInt operator-() const { return SymInt(0) - *this; }
  SymInt& operator+=(const SymInt& o) { return *this = *this + o; }
  SymInt& operator-=(const SymInt& o) { return *this = *this - o; }
  SymInt& operator*=(const SymInt& o) { return *this = *this * o; }
  SymInt& operator/=(const SymInt& o) { return *this = *this / o; }

  // Comparisons decide, recording a guard when they rely on the hints.
  friend bool operator==(const SymInt& a, const SymInt& b);
  friend bool operator!=(const SymInt& a, const SymInt& b) { return !(a == b); }
  friend bool operator<(const SymInt& a, const SymInt& b);
  friend bool operator<=(const SymInt& a, const SymInt& b);
  friend bool operator>(const SymInt& a, const SymInt& b) { return b < a; }
  friend bool operator>=(const SymInt& a, const SymInt& b) { return b <= a; }

 private:
  int64_t v_ = 0;
  SymExprId e_ = 0;
};

// Mixed operations with plain integers pick these (an exact match), not int64_t's built-ins.
#define FF_SYMINT_MIXED(op, R)                                                                     \
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0> \
  inline R operator op(const SymInt& a, T b) {                                                     \
    return a op SymInt(static_cast<int64_t>(b));                                                   \
  }                                                                                                \
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0> \
  inline R operator op(T a, const SymInt& b) {                                                     \
    return SymInt(static_cast<int64_t>(a)) op b;                                                   \
  }
FF_SYMINT_MIXED(+, SymInt)
FF_SYMINT_MIXED(-, SymInt)
FF_SYMINT_MIXED(*, SymInt)
FF_SYMINT_MIXED(/, SymInt)
FF_SYMINT_MIXED(%, SymInt)
FF_SYMINT_MIXED(==, bool)
FF_SYMINT_MIXED(!=, bool)
FF_SYMINT_MIXED(<, bool)
FF_SYMINT_MIXED(<=, bool)
FF_SYMINT_MIXED(>, bool)
FF_SYMINT_MIXED(>=, bool)
#undef FF_SYMINT_MIXED

// Sizes or strides. Converts to std::vector<int64_t> implicitly, specialising every entry, so code
// written for concrete shapes keeps working.
class SymShape : public std::vector<SymInt> {
 public:
  using std::vector<SymInt>::vector;
  SymShape() = default;
  SymShape(const std::vector<int64_t>& v) : std::vector<SymInt>(v.begin(), v.end()) {}  // NOLINT
  operator std::vector<int64_t>() const { return ints(); }  // NOLINT: specialises, see above
  std::vector<int64_t> ints() const;   // specialises every symbolic entry
  std::vector<int64_t> hints() const;  // the traced values; records nothing
  bool is_symbolic() const;
  bool has_unbacked() const;  // an entry mentions an unbacked symbol
  bool same_as(const SymShape& o) const;
  std::string str() const;  // "[s0, 8]"
};
// Equal when each entry is (deciding symbolic entries records guards).
bool operator==(const SymShape& a, const SymShape& b);
bool operator==(const SymShape& a, const std::vector<int64_t>& b);

// ---- expressions ------------------------------------------------------------------------------

// The symbols an expression mentions, ascending.
std::vector<SymbolId> sym_free_symbols(SymExprId e);
// The value of `e` with symbol i bound to bindings[i]. Throws std::out_of_range on an unbound
// symbol, std::domain_error on division by zero.
int64_t sym_evaluate(SymExprId e, const std::vector<int64_t>& bindings);
std::string sym_str(SymExprId e);
// Whether `e` mentions an unbacked symbol; the unbacked symbols it mentions, ascending.
bool sym_has_unbacked(SymExprId e);
std::vector<SymbolId> sym_unbacked_symbols(SymExprId e);
// `e`'s value when it is a constant expression.
bool sym_constant(SymExprId e, int64_t* value);
// Builds `e` from its parts; exposed for tests and the guard printer.
SymExprId sym_of_symbol(SymbolId id);
// Whether `x` is a multiple of `k` (> 0) for every binding: a constant that is, or a polynomial
// whose coefficients all are (records nothing; false where only some bindings make it one).
bool sym_divisible(const SymInt& x, int64_t k);
// The value under `bindings` as a constant SymInt.
SymInt sym_specialize(const SymInt& x, const std::vector<int64_t>& bindings);
// `x` with the symbols in `values` replaced (by a constant, or another symbol); the others stay.
// Each replacement must have the symbol's traced value (x keeps its hint).
SymInt sym_substitute(const SymInt& x, const std::vector<std::pair<SymbolId, SymInt>>& values);

// ---- the shape environment --------------------------------------------------------------------

// What one trace relied on about its symbols. The trace creates the symbols (one per dynamic
// dimension of an input) and records guards while it is the active environment.
class ShapeEnv {
 public:
  // A new symbol for a size whose traced value is `hint` (>= 2); `origin` says where it was read,
  // e.g. "L['x'].size()[0]".
  SymInt new_symbol(int64_t hint, std::string origin);
  // A new unbacked symbol: the size of an op's output that depends on its operands' values;
  // `origin` says which ("nonzero(x).size()[0]").
  SymInt new_unbacked(std::string origin);
  static constexpr int64_t kUnbackedHint = 8191;
  size_t num_symbols() const { return origins_.size(); }
  bool is_unbacked(SymbolId s) const { return unbacked_.at(static_cast<size_t>(s)); }
  size_t num_unbacked() const { return num_unbacked_; }
  const std::string& origin(SymbolId s) const { return origins_.at(static_cast<size_t>(s)); }
  int64_t hint(SymbolId s) const { return hints_.at(static_cast<size_t>(s)); }  // its traced value
  // Records that `e REL 0` held (deduplicated).
  void add_guard(SymGuard g);
  const std::vector<SymGuard>& guards() const { return guards_; }
  // An expression compiled code evaluates at each call (an int operand, an int returned): the
  // guards check it fits in int64 there, as the trace's Python int did.
  void add_evaluated(SymExprId e);
  const std::vector<SymExprId>& evaluated() const { return evaluated_; }
  // Guards whose expression is `symbol - constant`: the symbols the trace pinned to a value.
  std::vector<SymbolId> specialized_symbols() const;
  // Pairs of symbols a guard says are equal (`s1 == s4`: broadcasting), the smaller id first.
  std::vector<std::pair<SymbolId, SymbolId>> equal_symbols() const;
  // Each guard as text over the symbols' origins: "L['x'].size()[0] * 2 <= L['y'].size()[1]".
  std::string guard_str(const SymGuard& g) const;
  std::string expr_str(SymExprId e) const;  // over the origins, as guard_str

  static ShapeEnv* current();

 private:
  std::vector<std::string> origins_;
  std::vector<int64_t> hints_;
  std::vector<bool> unbacked_;
  size_t num_unbacked_ = 0;
  std::vector<SymGuard> guards_;
  std::vector<SymExprId> evaluated_;
};

// Makes `env` the active ShapeEnv of this thread for the scope (nullptr: none).
class ShapeEnvScope {
 public:
  explicit ShapeEnvScope(ShapeEnv* env);
  ~ShapeEnvScope();
  ShapeEnvScope(const ShapeEnvScope&) = delete;
  ShapeEnvScope& operator=(const ShapeEnvScope&) = delete;

 private:
  ShapeEnv* previous_;
};

// For the scope, unbacked symbols count as >= 2 in decisions, as backed ones do (torch's
// size-oblivious reasoning). Only for choices that cannot change values, such as a result's
// layout: what holds at sizes 0 and 1 differs there only in strides of empty or size-1 dims.
class SizeObliviousScope {
 public:
  SizeObliviousScope();
  ~SizeObliviousScope();
  SizeObliviousScope(const SizeObliviousScope&) = delete;
  SizeObliviousScope& operator=(const SizeObliviousScope&) = delete;

 private:
  bool previous_;
};

// Whether `g` holds under `bindings`.
bool sym_guard_holds(const SymGuard& g, const std::vector<int64_t>& bindings);

// Expressions flattened into one postfix program, for hot paths (guards): no locks, no allocation.
class SymProgram {
 public:
  SymProgram() = default;
  explicit SymProgram(const std::vector<SymExprId>& exprs);
  size_t size() const { return outputs_.size(); }
  size_t stack_size() const { return max_stack_; }
  // out[i] = exprs[i] with symbol j bound to bindings[j]; `stack` holds stack_size() entries.
  // False on division by zero or where a value overflows int64.
  bool run(const int64_t* bindings, int64_t* stack, int64_t* out) const;

  struct Op {
    enum class Kind : uint8_t { Const,
                                Symbol,
                                Add,
                                Mul,
                                FloorDiv,
                                Mod,
                                Output };
    Kind kind;
    int64_t value;  // Const: the constant; Symbol: its id; Output: the output index
  };
  const std::vector<Op>& ops() const { return ops_; }  // postfix: what code generators render

  // Rebuilds expression `e` bottom-up in another algebra: `constant(int64_t)`, `symbol(SymbolId)`,
  // then `combine(kind, a, b)` with kind Add, Mul, FloorDiv or Mod (loop IR expressions, SymInts
  // with some symbols replaced ...).
  template <class T, class Constant, class Symbol, class Combine>
  static T fold(SymExprId e, Constant&& constant, Symbol&& symbol, Combine&& combine) {
    const SymProgram program(std::vector<SymExprId>{e});
    std::vector<T> stack;
    for (const Op& op : program.ops()) {
      switch (op.kind) {
        case Op::Kind::Const: stack.push_back(constant(op.value)); break;
        case Op::Kind::Symbol: stack.push_back(symbol(static_cast<SymbolId>(op.value))); break;
        case Op::Kind::Output: break;
        default: {
          T b = std::move(stack.back());
          stack.pop_back();
          stack.back() = combine(op.kind, stack.back(), b);
        }
      }
    }
    return stack.back();
  }

 private:
  std::vector<Op> ops_;
  std::vector<size_t> outputs_;
  size_t max_stack_ = 0;
};

}  // namespace ff
