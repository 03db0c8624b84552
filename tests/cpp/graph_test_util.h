// Helpers shared by the graph IR tests: building graphs call by call, and golden files.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_registry.h"
#include "graph/printer.h"

namespace ff::testing {

inline Value N(NodeId id) { return Value::of_node(id); }
inline Value I(int64_t v) { return Value::of_int(v); }
inline Value F(double v) { return Value::of_float(v); }
inline Value L(std::vector<Value> items) { return Value::list(std::move(items)); }

inline ValueMeta T(std::vector<int64_t> sizes, DType dt = DType::Float32) {
  return ValueMeta::of_tensor(TensorMeta::contiguous(std::move(sizes), dt));
}

// The name a call node gets: the last part of its op's target (`add` for operator.add).
inline std::string hint_for(const OpDef& op) {
  size_t dot = op.target.rfind('.');
  return op.target.substr(dot == std::string::npos ? 0 : dot + 1);
}

// Adds a call of the op named `op_name`: binds the arguments and takes the meta rule's result, or
// `fallback_meta` where the rule defers to the meta-tensor fallback. nullopt when the op does not
// exist, the arguments do not bind, or there is no meta.
inline std::optional<NodeId> try_call(Graph& g, const std::string& op_name, const std::vector<Value>& args,
                                      const std::vector<std::pair<std::string, Value>>& kwargs = {},
                                      std::optional<ValueMeta> fallback_meta = std::nullopt) {
  auto id = op_by_name(op_name);
  if (!id) return std::nullopt;
  const OpDef& op = op_def(*id);
  std::string error;
  auto bound = bind_call(op, args, kwargs, g, &error);
  if (!bound) return std::nullopt;
  std::optional<ValueMeta> meta = infer_meta(op, *bound, g);
  if (!meta) meta = fallback_meta;
  if (!meta) return std::nullopt;
  return g.add_call(*id, *bound, *meta, hint_for(op));
}

// A call with the given meta whatever the rules say (for printer and parser tests, where the
// metadata is text to carry, not a claim about the op).
inline NodeId call_as(Graph& g, const std::string& op_name, const std::vector<Value>& args, ValueMeta meta,
                      const std::vector<std::pair<std::string, Value>>& kwargs = {}) {
  auto id = op_by_name(op_name);
  if (!id) throw std::runtime_error("no op " + op_name);
  std::string error;
  auto bound = bind_call(op_def(*id), args, kwargs, g, &error);
  if (!bound) throw std::runtime_error(error);
  return g.add_call(*id, *bound, std::move(meta), hint_for(op_def(*id)));
}

// As try_call; a call that cannot be added fails the test.
inline NodeId call(Graph& g, const std::string& op_name, const std::vector<Value>& args,
                   const std::vector<std::pair<std::string, Value>>& kwargs = {},
                   std::optional<ValueMeta> fallback_meta = std::nullopt) {
  auto id = try_call(g, op_name, args, kwargs, fallback_meta);
  if (!id) throw std::runtime_error("cannot add a call of " + op_name);
  return *id;
}

// Random graphs over pointwise, infix, view, reduction and subscript ops, with random constants.
inline Graph random_graph(std::mt19937& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Graph g;
  std::vector<NodeId> tensors;
  const DType dtypes[] = {DType::Float32, DType::Float16, DType::Int64, DType::Float64};
  int n_inputs = 1 + static_cast<int>(pick(3));
  for (int i = 0; i < n_inputs; ++i) {
    TensorMeta t = TensorMeta::contiguous({4, 6}, dtypes[pick(4)]);
    if (pick(3) == 0) t.strides = {1, 4};
    if (pick(4) == 0) t.requires_grad = is_floating(t.dtype);
    tensors.push_back(g.add_placeholder("x", ValueMeta::of_tensor(t)));
  }
  std::uniform_real_distribution<double> real(-1e6, 1e6);
  auto scalar = [&]() -> Value {
    switch (pick(4)) {
      case 0: return I(static_cast<int64_t>(rng() % 100) - 50);
      case 1: return F(real(rng));
      case 2: return F(std::ldexp(real(rng), static_cast<int>(pick(600)) - 300));
      default: return Value::of_bool(pick(2) == 0);
    }
  };
  const char* unary[] = {"relu", "neg", "abs", "sin", "exp", "sigmoid", "op_neg", "floor"};
  const char* binary[] = {"add", "sub", "mul", "op_add", "op_sub", "op_mul", "op_truediv", "maximum"};
  int n_ops = 3 + static_cast<int>(pick(10));
  for (int i = 0; i < n_ops; ++i) {
    NodeId a = tensors[pick(tensors.size())];
    std::optional<NodeId> out;
    bool is_2d = g.node(a).meta.tensor.dim() == 2;
    switch (pick(6)) {
      case 0: out = try_call(g, unary[pick(8)], {N(a)}); break;
      case 1: {
        std::string op = binary[pick(8)];
        std::vector<NodeId> same;  // operands of the same shape broadcast trivially
        for (NodeId t : tensors)
          if (g.node(t).meta.tensor.sizes == g.node(a).meta.tensor.sizes) same.push_back(t);
        Value other = op == "maximum" || pick(2) ? N(same[pick(same.size())]) : scalar();
        if (op.find("sub") != std::string::npos && other.kind == Value::Kind::Bool) other = I(1);  // x - True raises
        bool swap = op.starts_with("op_") && !other.is_node() && pick(2);
        out = swap ? try_call(g, op, {other, N(a)}) : try_call(g, op, {N(a), other});
        break;
      }
      case 2:
        if (!is_2d) continue;
        out = try_call(g, "sum", {N(a)}, {{"dim", L({I(static_cast<int64_t>(pick(2)))})}, {"keepdim", Value::of_bool(true)}});
        break;
      case 3: {
        if (!is_2d) continue;
        out = try_call(g, "transpose", {N(a), I(0), I(1)});
        break;
      }
      case 4: {
        if (!is_2d) continue;
        out = try_call(g, "op_getitem", {N(a), Value::tuple({Value::slice(Value::none(), Value::none(), Value::none()), I(0)})});
        break;
      }
      case 5:
        if (!is_floating(g.node(a).meta.tensor.dtype)) continue;
        out = try_call(g, "layer_norm", {N(a), L({I(g.node(a).meta.tensor.sizes.back())})}, {{"eps", F(real(rng) * 1e-12)}});
        break;
    }
    if (out) tensors.push_back(*out);
  }
  std::vector<Value> outs;
  for (size_t k = 0; k < 1 + pick(3); ++k) outs.push_back(N(tensors[pick(tensors.size())]));
  g.set_output(Value::tuple(std::move(outs)));
  return g;
}

// ---- golden files ---------------------------------------------------------------------------
//
// A golden file holds cases, each
//
//   ## one line saying what the case checks
//   <graph code before>
//   ----
//   <graph code expected>
//
// FF_ACCEPT=1 rewrites the expected parts with what the test produced (review the diff).

struct GoldenCase {
  std::string intent;
  std::string before;
  std::string expected;
};

inline std::filesystem::path golden_path(const std::string& name) {
  return std::filesystem::path(__FILE__).parent_path() / "golden" / name;
}

inline std::vector<GoldenCase> read_golden(const std::string& name) {
  std::ifstream in(golden_path(name));
  EXPECT_TRUE(in.good()) << "cannot open golden file " << name;
  std::vector<GoldenCase> cases;
  std::string line;
  bool in_expected = false;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) {
      cases.push_back({line.substr(3), "", ""});
      in_expected = false;
      continue;
    }
    if (cases.empty()) continue;
    if (line == "----") {
      in_expected = true;
      continue;
    }
    (in_expected ? cases.back().expected : cases.back().before) += line + "\n";
  }
  auto trim_tail = [](std::string& s) {
    while (s.size() >= 2 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') s.pop_back();
  };
  for (GoldenCase& c : cases) {
    trim_tail(c.before);
    trim_tail(c.expected);
    EXPECT_FALSE(c.before.empty() || c.expected.empty()) << name << ": case '" << c.intent << "' lacks a part";
  }
  return cases;
}

inline bool accept_mode() {
  const char* v = std::getenv("FF_ACCEPT");
  return v != nullptr && std::string(v) == "1";
}

inline void write_golden(const std::string& name, const std::vector<GoldenCase>& cases) {
  std::ofstream out(golden_path(name));
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i) out << "\n";
    out << "## " << cases[i].intent << "\n"
        << cases[i].before << "----\n"
        << cases[i].expected;
  }
}

}  // namespace ff::testing
