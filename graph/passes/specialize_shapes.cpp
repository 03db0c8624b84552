#include "graph/passes/specialize_shapes.h"

#include <algorithm>
#include <set>
#include <string>

#include "graph/op.h"
#include "src/base/errors.h"

namespace ff {

TensorMeta specialize_tensor_meta(TensorMeta m, const std::vector<int64_t>& bindings) {
  for (SymInt& s : m.sizes) s = sym_specialize(s, bindings);
  for (SymInt& s : m.strides) s = sym_specialize(s, bindings);
  return m;
}

namespace {

bool meta_symbolic(const ValueMeta& m) {
  if (m.is_tensor()) return m.tensor.is_symbolic();
  if (m.sym) return true;
  return std::any_of(m.items.begin(), m.items.end(), meta_symbolic);
}

void specialize_meta(ValueMeta& m, const std::vector<int64_t>& bindings) {
  if (m.is_tensor()) m.tensor = specialize_tensor_meta(std::move(m.tensor), bindings);
  if (m.sym) {
    m.hint = sym_evaluate(m.sym, bindings);
    m.sym = 0;
  }
  for (ValueMeta& item : m.items) specialize_meta(item, bindings);
}

void substitute_meta(ValueMeta& m, const std::vector<std::pair<SymbolId, SymInt>>& values) {
  if (m.is_tensor()) {
    for (SymInt& s : m.tensor.sizes) s = sym_substitute(s, values);
    for (SymInt& s : m.tensor.strides) s = sym_substitute(s, values);
  }
  if (m.sym) m.sym = sym_substitute(m.as_symint(), values).expr();
  for (ValueMeta& item : m.items) substitute_meta(item, values);
}

void substitute_value(Value& v, const std::vector<std::pair<SymbolId, SymInt>>& values) {
  if (v.sym) {
    SymInt x = sym_substitute(v.as_symint(), values);
    v = x.is_symbolic() ? Value::of_symint(x) : Value::of_int(x.hint());
  }
  for (Value& item : v.items) substitute_value(item, values);
}

void note_symbols(const SymInt& x, std::set<SymbolId>* used, bool only_unbacked = false) {
  if (!x.is_symbolic()) return;
  for (SymbolId s : only_unbacked ? sym_unbacked_symbols(x.expr()) : sym_free_symbols(x.expr())) used->insert(s);
}

void note_meta_symbols(const ValueMeta& m, std::set<SymbolId>* used, bool only_unbacked = false) {
  if (m.is_tensor()) {
    for (const SymInt& s : m.tensor.sizes) note_symbols(s, used, only_unbacked);
    for (const SymInt& s : m.tensor.strides) note_symbols(s, used, only_unbacked);
  }
  if (m.sym) note_symbols(m.as_symint(), used, only_unbacked);
  for (const ValueMeta& item : m.items) note_meta_symbols(item, used, only_unbacked);
}

void note_value_symbols(const Value& v, std::set<SymbolId>* used, bool only_unbacked = false) {
  if (v.sym) note_symbols(v.as_symint(), used, only_unbacked);
  for (const Value& item : v.items) note_value_symbols(item, used, only_unbacked);
}

std::set<SymbolId> unbacked_symbols(const Graph& g) {
  std::set<SymbolId> out;
  for (const Node& n : g.nodes()) {
    note_meta_symbols(n.meta, &out, true);
    for (const Value& a : n.args) note_value_symbols(a, &out, true);
  }
  return out;
}

}  // namespace

bool value_symbolic(const Value& v) { return v.sym != 0 || std::any_of(v.items.begin(), v.items.end(), value_symbolic); }

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
  // NB: a symbol the trace specialised (substitute_symbols) appears nowhere: it stays unbound.
  std::set<SymbolId> used;
  for (const Node& n : g.nodes()) {
    note_meta_symbols(n.meta, &used);
    for (const Value& a : n.args) note_value_symbols(a, &used);
  }
  const std::set<SymbolId> unbacked = unbacked_symbols(g);
  std::vector<std::pair<int, int>> out(used.empty() ? 0 : static_cast<size_t>(*used.rbegin()) + 1, {-1, -1});
  std::vector<NodeId> inputs = g.placeholders();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueMeta& m = g.node(inputs[i]).meta;
    if (m.kind == ValueMeta::Kind::Int) {  // a Python int that varies: dimension -1
      SymbolId s = m.as_symint().as_symbol();
      if (s >= 0 && out[static_cast<size_t>(s)].first < 0) out[static_cast<size_t>(s)] = {static_cast<int>(i), -1};
    }
    if (!m.is_tensor()) continue;
    for (size_t d = 0; d < m.tensor.sizes.size(); ++d) {
      SymbolId s = m.tensor.sizes[d].as_symbol();
      if (s >= 0 && out[static_cast<size_t>(s)].first < 0) out[static_cast<size_t>(s)] = {static_cast<int>(i), static_cast<int>(d)};
    }
  }
  for (SymbolId s : used)
    FF_CHECK(out[static_cast<size_t>(s)].first >= 0 || unbacked.count(s), "symbol s" + std::to_string(s) + " is no graph input's size");
  return out;
}

bool has_unbacked_symbols(const Graph& g) { return !unbacked_symbols(g).empty(); }

bool has_data_dependent_values(const Graph& g) {
  for (size_t i = 0; i < g.size(); ++i)
    if (op_kind(g.node(static_cast<NodeId>(i))) == Op::tensor_item) return true;
  return has_unbacked_symbols(g);
}

std::vector<SymbolSource> symbol_sources(const Graph& g) {
  std::vector<std::pair<int, int>> inputs = symbol_bindings(g);
  std::vector<SymbolSource> out(inputs.size());
  std::vector<NodeId> placeholders = g.placeholders();
  for (size_t s = 0; s < inputs.size(); ++s)
    if (inputs[s].first >= 0) out[s] = {static_cast<int>(placeholders[static_cast<size_t>(inputs[s].first)]), -1, inputs[s].second};
  auto note = [&](const TensorMeta& t, int node, int item) {
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      SymbolId s = t.sizes[d].as_symbol();
      if (s >= 0 && static_cast<size_t>(s) < out.size() && out[static_cast<size_t>(s)].node < 0)
        out[static_cast<size_t>(s)] = {node, item, static_cast<int>(d)};
    }
  };
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.kind != NodeKind::Call && n.kind != NodeKind::GetItem) continue;
    if (n.meta.is_tensor()) note(n.meta.tensor, static_cast<int>(i), -1);
    for (size_t k = 0; k < n.meta.items.size(); ++k)
      if (n.meta.items[k].is_tensor()) note(n.meta.items[k].tensor, static_cast<int>(i), static_cast<int>(k));
  }
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
