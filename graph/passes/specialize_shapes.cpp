#include "graph/passes/specialize_shapes.h"

#include <algorithm>
#include <functional>
#include <string>

#include "src/base/errors.h"

namespace ff {

namespace {

bool meta_symbolic(const ValueMeta& m) {
  if (m.is_tensor()) return m.tensor.is_symbolic();
  return std::any_of(m.items.begin(), m.items.end(), meta_symbolic);
}

void specialize_meta(ValueMeta& m, const std::vector<int64_t>& bindings) {
  if (m.is_tensor()) {
    for (SymInt& s : m.tensor.sizes) s = sym_specialize(s, bindings);
    for (SymInt& s : m.tensor.strides) s = sym_specialize(s, bindings);
  }
  for (ValueMeta& item : m.items) specialize_meta(item, bindings);
}

bool value_symbolic(const Value& v) {
  return v.sym != 0 || std::any_of(v.items.begin(), v.items.end(), value_symbolic);
}

void substitute_meta(ValueMeta& m, const std::vector<std::pair<SymbolId, SymInt>>& values) {
  if (m.is_tensor()) {
    for (SymInt& s : m.tensor.sizes) s = sym_substitute(s, values);
    for (SymInt& s : m.tensor.strides) s = sym_substitute(s, values);
  }
  for (ValueMeta& item : m.items) substitute_meta(item, values);
}

void substitute_value(Value& v, const std::vector<std::pair<SymbolId, SymInt>>& values) {
  if (v.sym) {
    SymInt x = sym_substitute(v.as_symint(), values);
    v = x.is_symbolic() ? Value::of_symint(x) : Value::of_int(x.hint());
  }
  for (Value& item : v.items) substitute_value(item, values);
}

void note_symbols(const SymInt& x, SymbolId* max_symbol) {
  if (!x.is_symbolic()) return;
  for (SymbolId s : sym_free_symbols(x.expr())) *max_symbol = std::max(*max_symbol, s);
}

void note_meta_symbols(const ValueMeta& m, SymbolId* max_symbol) {
  if (m.is_tensor()) {
    for (const SymInt& s : m.tensor.sizes) note_symbols(s, max_symbol);
    for (const SymInt& s : m.tensor.strides) note_symbols(s, max_symbol);
  }
  for (const ValueMeta& item : m.items) note_meta_symbols(item, max_symbol);
}

}  // namespace

void specialize_value(Value& v, const std::vector<int64_t>& bindings) {
  if (v.sym) v = Value::of_int(sym_evaluate(v.sym, bindings));
  for (Value& item : v.items) specialize_value(item, bindings);
}

bool has_symbolic_shapes(const Graph& g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node& n) {
    return meta_symbolic(n.meta) || std::any_of(n.args.begin(), n.args.end(), value_symbolic);
  });
}

bool has_symbolic_int_args(const Graph& g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(),
                     [](const Node& n) { return std::any_of(n.args.begin(), n.args.end(), value_symbolic); });
}

std::vector<std::pair<int, int>> symbol_bindings(const Graph& g) {
  SymbolId max_symbol = -1;
  for (const Node& n : g.nodes()) note_meta_symbols(n.meta, &max_symbol);
  std::vector<std::pair<int, int>> out(static_cast<size_t>(max_symbol + 1), {-1, -1});
  std::vector<NodeId> inputs = g.placeholders();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueMeta& m = g.node(inputs[i]).meta;
    if (!m.is_tensor()) continue;
    for (size_t d = 0; d < m.tensor.sizes.size(); ++d) {
      SymbolId s = m.tensor.sizes[d].as_symbol();
      if (s >= 0 && out[static_cast<size_t>(s)].first < 0) out[static_cast<size_t>(s)] = {static_cast<int>(i), static_cast<int>(d)};
    }
  }
  // NB: a symbol the trace specialised (substitute_symbols) appears nowhere: it stays unbound.
  std::vector<bool> used(out.size(), false);
  auto note_used = [&](const SymInt& x) {
    if (x.is_symbolic())
      for (SymbolId s : sym_free_symbols(x.expr())) used[static_cast<size_t>(s)] = true;
  };
  std::function<void(const ValueMeta&)> meta_used = [&](const ValueMeta& m) {
    if (m.is_tensor()) {
      for (const SymInt& x : m.tensor.sizes) note_used(x);
      for (const SymInt& x : m.tensor.strides) note_used(x);
    }
    for (const ValueMeta& item : m.items) meta_used(item);
  };
  std::function<void(const Value&)> value_used = [&](const Value& v) {
    if (v.sym) note_used(v.as_symint());
    for (const Value& item : v.items) value_used(item);
  };
  for (const Node& n : g.nodes()) {
    meta_used(n.meta);
    for (const Value& a : n.args) value_used(a);
  }
  for (size_t s = 0; s < out.size(); ++s)
    FF_CHECK(!used[s] || out[s].first >= 0, "symbol s" + std::to_string(s) + " is no graph input's size");
  return out;
}

Graph substitute_symbols(const Graph& g, const std::vector<std::pair<SymbolId, SymInt>>& values) {
  Graph out = g;
  for (size_t i = 0; i < out.size(); ++i) {
    Node& n = out.mutable_node(static_cast<NodeId>(i));
    substitute_meta(n.meta, values);
    for (Value& a : n.args) substitute_value(a, values);
  }
  return out;
}

Graph specialize_shapes(const Graph& g, const std::vector<int64_t>& bindings) {
  Graph out = g;
  for (size_t i = 0; i < out.size(); ++i) {
    Node& n = out.mutable_node(static_cast<NodeId>(i));
    specialize_meta(n.meta, bindings);
    for (Value& a : n.args) specialize_value(a, bindings);
  }
  return out;
}

}  // namespace ff
