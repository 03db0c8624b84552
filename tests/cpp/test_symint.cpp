// The symbolic-integer engine: simplification, evaluation, bounds and the guards comparisons record.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "graph/op.h"
#include "graph/passes/specialize_shapes.h"
#include "graph/printer.h"
#include "graph/symbolic_fit.h"
#include "graph/symint.h"

namespace ff {
namespace {

TEST(SymInt, ConstantsStayPlainIntegers) {
  SymInt a = 6, b = 4;
  EXPECT_FALSE((a * b + 1).is_symbolic());
  EXPECT_EQ((a * b + 1).hint(), 25);
  EXPECT_EQ((SymInt(-7) / 2).hint(), -4);  // floor division, as Python
  EXPECT_EQ((SymInt(-7) % 2).hint(), 1);
}

TEST(SymInt, LikeTermsCombineAndCancel) {
  ShapeEnv env;
  SymInt s0 = env.new_symbol(5, "x0"), s1 = env.new_symbol(7, "x1");
  EXPECT_EQ((s0 + s1 - s0).str(), "s1");
  EXPECT_FALSE((s0 * 3 - s0 - s0 * 2).is_symbolic());
  EXPECT_EQ(((s0 + 1) * (s0 - 1)).str(), "s0*s0 - 1");
  EXPECT_EQ((s0 * s1 * 2 + 4).str(), "2*s0*s1 + 4");
  EXPECT_EQ((s0 * s1).expr(), (s1 * s0).expr());  // interned: equal polynomials are one id
  EXPECT_EQ((s0 * s1 * 2 + 4).hint(), 74);
}

TEST(SymInt, ExactDivisionCancels) {
  ShapeEnv env;
  SymInt s0 = env.new_symbol(5, "x0"), s1 = env.new_symbol(3, "x1");
  EXPECT_EQ(((s0 * 8) / 4).str(), "2*s0");
  EXPECT_EQ(((s0 * s1 * 6) / (s1 * 3)).str(), "2*s0");
  EXPECT_EQ(((s0 * 8 + 3) / 4).str(), "2*s0");           // (4*2*s0 + 3) // 4
  EXPECT_EQ(((s0 * 8 + 3) % 4).str(), "3");
  EXPECT_EQ((s0 / 4).str(), "((s0) // 4)");               // stays an atom
  EXPECT_EQ((s0 / 4).hint(), 1);
  EXPECT_EQ(((s0 * 12) % (s0 * 4)).str(), "0");
}

TEST(SymInt, BoundsSettleComparisonsWithoutGuards) {
  ShapeEnv env;
  ShapeEnvScope scope(&env);
  SymInt s0 = env.new_symbol(5, "x0"), s1 = env.new_symbol(9, "x1");
  EXPECT_FALSE(s0 == 1);
  EXPECT_FALSE(s0 == 0);
  EXPECT_TRUE(s0 > 1);
  EXPECT_TRUE(s0 * s1 >= 4);
  EXPECT_TRUE(s0 != -3);
  EXPECT_TRUE(s0 / 2 >= 0);
  EXPECT_TRUE(s0 % 3 >= 0);
  EXPECT_TRUE(s0 == s0 + 0);
  EXPECT_TRUE(env.guards().empty());
}

TEST(SymInt, ShiftedBoundsSettleProductsOfSymbols) {
  // Every symbol is >= 2: written over t = s - 2 >= 0, s1*s2 - s2 is 2 + 2*t1 + t2 + t1*t2 > 0.
  ShapeEnv env;
  SymInt s0 = env.new_symbol(5, "x0"), s1 = env.new_symbol(3, "x1");
  EXPECT_FALSE(s0 * s1 < s1);  // no environment: settled without a guard
  EXPECT_TRUE(s0 * s1 * 2 > s0 + s1);
  EXPECT_TRUE((s0 - 1) * (s0 - 2) >= 0);
  EXPECT_THROW((void)(s0 * s1 < s1 * 8), SymbolicSpecialization);
  EXPECT_THROW((void)(s0 - 1 == 1), SymbolicSpecialization);  // s0 may be 2
}

TEST(SymInt, UnbackedSymbolsAreNonNegativeAndNeverGuarded) {
  // A data-dependent size (u): >= 0, and what its bounds leave open throws instead of guarding.
  ShapeEnv env;
  ShapeEnvScope scope(&env);
  SymInt s0 = env.new_symbol(5, "x0");
  SymInt u = env.new_unbacked("nonzero(x).size()[0]");
  EXPECT_TRUE(env.is_unbacked(1) && !env.is_unbacked(0));
  EXPECT_EQ((u * s0).str(), "s0*u1");
  EXPECT_TRUE(u >= 0);
  EXPECT_TRUE(u * 4 + 1 > 0);
  EXPECT_TRUE(u == u + 0);
  EXPECT_THROW((void)(u == 1), UnbackedDecision);
  EXPECT_THROW((void)(u == s0), UnbackedDecision);
  EXPECT_THROW((void)(u * 8 == 0), UnbackedDecision);
  EXPECT_THROW((void)static_cast<int64_t>(u), UnbackedDecision);
  EXPECT_TRUE(env.guards().empty());
  {
    SizeObliviousScope oblivious;  // layouts: counts as >= 2, as a backed size
    EXPECT_FALSE(u == 1);
    EXPECT_TRUE(u * 8 > 8);
    EXPECT_THROW((void)(u == s0), UnbackedDecision);
  }
  EXPECT_THROW((void)(u == 1), UnbackedDecision);
  SymInt r = sym_substitute(u * s0 + u, {{0, SymInt(3)}});
  EXPECT_EQ(r.str(), "4*u1");
  EXPECT_TRUE(sym_has_unbacked(r.expr()));
  EXPECT_FALSE(sym_has_unbacked((s0 * 2).expr()));
  EXPECT_EQ(sym_unbacked_symbols((u * s0).expr()), std::vector<SymbolId>{1});
  EXPECT_EQ(sym_evaluate((u * s0 + 1).expr(), {3, 0}), 1);
}

TEST(SymInt, SubstitutingSymbolsKeepsTheOthers) {
  ShapeEnv env;
  SymInt s0 = env.new_symbol(5, "x0"), s1 = env.new_symbol(4, "x1");
  SymInt e = s0 * s1 + s1 * 3;
  SymInt r = sym_substitute(e, {{1, 4}});
  EXPECT_EQ(r.str(), "4*s0 + 12");
  EXPECT_EQ(r.hint(), e.hint());
  EXPECT_FALSE(sym_substitute(e, {{0, 5}, {1, 4}}).is_symbolic());
  EXPECT_EQ(sym_substitute(e, {{0, 5}, {1, 4}}).hint(), 32);
}

TEST(SymInt, ComparisonsOnHintsRecordWhatHeld) {
  ShapeEnv env;
  ShapeEnvScope scope(&env);
  SymInt s0 = env.new_symbol(5, "L['x'].size()[0]"), s1 = env.new_symbol(9, "L['y'].size()[0]");
  EXPECT_TRUE(s0 < s1);
  EXPECT_FALSE(s0 == s1);
  EXPECT_FALSE(s1 <= s0);
  ASSERT_EQ(env.guards().size(), 2u);  // s1 <= s0 being false is s0 - s1 < 0, already recorded
  EXPECT_EQ(env.guard_str(env.guards()[0]), "L['x'].size()[0] < L['y'].size()[0]");
  EXPECT_EQ(env.guard_str(env.guards()[1]), "L['x'].size()[0] != L['y'].size()[0]");
  int64_t v = s0;  // specialises
  EXPECT_EQ(v, 5);
  EXPECT_EQ(env.specialized_symbols(), std::vector<SymbolId>{0});
  EXPECT_TRUE(sym_guard_holds(env.guards()[0], {5, 9}));
  EXPECT_FALSE(sym_guard_holds(env.guards()[0], {9, 5}));
}

TEST(SymInt, DecidingWithoutAnEnvironmentThrows) {
  ShapeEnv env;
  SymInt s0 = env.new_symbol(5, "x0"), s1 = env.new_symbol(6, "x1");
  EXPECT_THROW((void)(s0 == s1), SymbolicSpecialization);
  EXPECT_THROW((void)static_cast<int64_t>(s0), SymbolicSpecialization);
  EXPECT_FALSE(s0 == 1);  // settled by bounds: no environment needed
}

TEST(SymbolicFit, ResultsAtProbesFitExpressionsOverTheOperands) {
  ShapeEnv env;
  ShapeEnvScope scope(&env);
  SymInt s0 = env.new_symbol(5, "a"), s1 = env.new_symbol(7, "b");
  std::vector<std::vector<int64_t>> probes{{5, 7}, {6, 9}, {7, 11}};
  auto fit = [&](std::vector<int64_t> values) { return fit_symint(values, probes, {s0, s1, s0 * s1}); };
  EXPECT_EQ(fit({5, 6, 7})->str(), "s0");
  EXPECT_EQ(fit({3, 4, 5})->str(), "s0 - 2");         // a convolution without padding
  EXPECT_EQ(fit({14, 18, 22})->str(), "2*s1");
  EXPECT_EQ(fit({12, 15, 18})->str(), "s0 + s1");     // a concatenation
  EXPECT_EQ(*fit({35, 54, 77}) - s0 * s1, SymInt(0));  // a flatten
  EXPECT_FALSE(fit({4, 4, 4})->is_symbolic());          // unchanged: a constant
  EXPECT_FALSE(fit({2, 3, 5}).has_value());             // nothing reproduces it: the caller specialises
  EXPECT_TRUE(env.guards().empty());                    // fitting decides nothing about the symbols
}

TEST(SymShape, ConvertsToConcreteSizesBySpecialising) {
  ShapeEnv env;
  ShapeEnvScope scope(&env);
  SymShape s{env.new_symbol(4, "x0"), 8};
  EXPECT_TRUE(s.is_symbolic());
  EXPECT_EQ(s.str(), "[s0, 8]");
  EXPECT_EQ(s.hints(), (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(env.guards().empty());
  std::vector<int64_t> concrete = s;
  EXPECT_EQ(concrete, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(env.guards().size(), 1u);
}

int64_t floordiv(int64_t a, int64_t c) { return a / c - ((a % c != 0) && ((a < 0) != (c < 0))); }

// Random expressions: the simplified form evaluates, at the hints and at other bindings, to what
// the same arithmetic on plain integers gives.
TEST(SymInt, SimplifiedFormsEvaluateLikeIntegers) {
  std::mt19937 rng(1234);
  ShapeEnv env;
  ShapeEnvScope scope(&env);
  struct Built {
    SymInt e;
    int64_t at_hints, at_other;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int64_t> hints, other;
    for (int i = 0; i < 3; ++i) {
      hints.push_back(2 + int64_t(rng() % 9));
      other.push_back(2 + int64_t(rng() % 9));
    }
    std::function<Built(int)> gen = [&](int depth) -> Built {
      if (depth == 0 || rng() % 4 == 0) {
        if (rng() % 2) {
          size_t k = rng() % hints.size();
          return {SymInt::symbol(SymbolId(k), hints[k]), hints[k], other[k]};
        }
        int64_t c = int64_t(rng() % 7) - 2;
        return {SymInt(c), c, c};
      }
      Built a = gen(depth - 1), b = gen(depth - 1);
      int64_t c = 1 + int64_t(rng() % 5);
      switch (rng() % 5) {
        case 0: return {a.e + b.e, a.at_hints + b.at_hints, a.at_other + b.at_other};
        case 1: return {a.e - b.e, a.at_hints - b.at_hints, a.at_other - b.at_other};
        case 2: return {a.e * b.e, a.at_hints * b.at_hints, a.at_other * b.at_other};
        case 3: return {a.e / c, floordiv(a.at_hints, c), floordiv(a.at_other, c)};
        default:
          return {a.e % c, a.at_hints - floordiv(a.at_hints, c) * c, a.at_other - floordiv(a.at_other, c) * c};
      }
    };
    Built b = gen(4);
    EXPECT_EQ(b.e.hint(), b.at_hints);
    if (b.e.is_symbolic()) {
      EXPECT_EQ(sym_evaluate(b.e.expr(), hints), b.at_hints) << b.e.str();
      EXPECT_EQ(sym_evaluate(b.e.expr(), other), b.at_other) << b.e.str();
      SymProgram prog({b.e.expr(), b.e.expr()});  // what guards run
      std::vector<int64_t> stack(prog.stack_size()), out(2);
      ASSERT_TRUE(prog.run(other.data(), stack.data(), out.data()));
      EXPECT_EQ(out[1], b.at_other) << b.e.str();
    } else {
      EXPECT_EQ(b.e.hint(), b.at_other) << "a constant that depends on the binding";
    }
  }
}

TEST(SymProgram, AValuePastInt64FailsTheRun) {
  // Guards evaluate the ints compiled code computes (a Python int that varies, squared): where
  // Python's int would leave int64 the check fails, and the call is traced again.
  ShapeEnv env;
  SymInt n = env.new_symbol(3, "L['n']");
  SymProgram prog({(n * n * n).expr()});
  std::vector<int64_t> stack(prog.stack_size()), out(1);
  int64_t small = 1000, big = int64_t(1) << 30;
  ASSERT_TRUE(prog.run(&small, stack.data(), out.data()));
  EXPECT_EQ(out[0], 1000000000);
  EXPECT_FALSE(prog.run(&big, stack.data(), out.data()));
  // A hint past int64 throws where the expression is built (the tracer keeps a Python int then).
  SymInt m = env.new_symbol(int64_t(1) << 40, "L['m']");
  EXPECT_THROW(m * m, std::overflow_error);
}

TEST(SymInt, AnIntPlaceholderBindsItsSymbol) {
  // f(x, n) = x * n with n a Python int that varies: the graph's input n is the symbol itself.
  ShapeEnv env;
  SymInt s0 = env.new_symbol(4, "L['x'].size()[0]"), s1 = env.new_symbol(7, "L['n']");
  Graph g;
  NodeId x = g.add_placeholder("x", ValueMeta::of_tensor(TensorMeta::contiguous({s0}, DType::Float32)));
  NodeId n = g.add_placeholder("n", ValueMeta::of_symint(s1));
  NodeId y = g.add_call(op_id(Op::op_mul), {Value::of_node(x), Value::of_symint(s1)},
                        ValueMeta::of_tensor(TensorMeta::contiguous({s0}, DType::Float32)));
  g.set_output(Value::tuple({Value::of_node(y)}));
  EXPECT_EQ(meta_str(g.node(n).meta), "Sym(s1)");
  EXPECT_TRUE(has_symbolic_shapes(g));
  EXPECT_EQ(symbol_bindings(g), (std::vector<std::pair<int, int>>{{0, 0}, {1, -1}}));
  Graph at = specialize_shapes(g, {5, 9});
  EXPECT_EQ(meta_str(at.node(n).meta), "int");
  EXPECT_EQ(at.node(y).args[1].i, 9);
  EXPECT_FALSE(has_symbolic_shapes(at));
}

}  // namespace
}  // namespace ff
