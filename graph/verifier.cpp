#include "graph/verifier.h"

#include <cctype>
#include <cmath>
#include <unordered_map>

#include "graph/op_registry.h"
#include "graph/printer.h"
#include "src/base/errors.h"

namespace ff {
namespace {

using Inv = GraphInvariant;

// Value equality where NaN equals NaN (a default of nan must compare equal to itself).
bool same_value(const Value& a, const Value& b) {
  if (a.kind == Value::Kind::Float && b.kind == Value::Kind::Float && std::isnan(a.f) && std::isnan(b.f)) return true;
  if (a.kind != b.kind || a.items.size() != b.items.size()) return false;
  Value a0 = a, b0 = b;
  a0.items.clear();
  b0.items.clear();
  if (!(a0 == b0)) return false;
  for (size_t i = 0; i < a.items.size(); ++i)
    if (!same_value(a.items[i], b.items[i])) return false;
  return true;
}

struct Checker {
  const Graph& g;
  std::vector<Violation> out;
  // Nodes with a structural problem; later predicates skip them rather than read bad operands.
  std::vector<bool> broken;

  explicit Checker(const Graph& graph) : g(graph), broken(graph.size(), false) {}

  void report(Inv inv, const Node* n, std::string detail) {
    out.push_back({inv, n ? n->name : "", std::move(detail)});
  }
  void report_broken(Inv inv, NodeId id, std::string detail) {
    broken[static_cast<size_t>(id)] = true;
    report(inv, &g.node(id), std::move(detail));
  }
  std::string name(NodeId id) const {
    if (id < 0 || static_cast<size_t>(id) >= g.size()) return "#" + std::to_string(id);
    return g.node(id).name;
  }

  void placeholders_first() {
    bool seen_other = false;
    for (const Node& n : g.nodes()) {
      if (n.kind != NodeKind::Placeholder) seen_other = true;
      else if (seen_other) report(Inv::placeholders_first, &n, "is a placeholder after the first non-placeholder node");
      if (n.kind == NodeKind::Placeholder && (!n.args.empty() || n.op != kNoOp))
        report(Inv::placeholders_first, &n, "is a placeholder with arguments or an op");
    }
  }

  void one_output_last() {
    int outputs = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      if (n.kind != NodeKind::Output) continue;
      ++outputs;
      if (i + 1 != g.size()) report(Inv::one_output_last, &n, "is an Output that is not the last node");
      if (n.args.size() != 1)
        report_broken(Inv::one_output_last, static_cast<NodeId>(i), "holds " + std::to_string(n.args.size()) + " values, not 1");
    }
    if (outputs == 0) report(Inv::one_output_last, nullptr, "the graph has no Output node");
    if (outputs > 1) report(Inv::one_output_last, nullptr, "the graph has " + std::to_string(outputs) + " Output nodes");
  }

  void operands_defined_before_use() {
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      for (const Value& v : n.args) {
        v.for_each_node([&](NodeId id) {
          if (id < 0 || static_cast<size_t>(id) >= g.size())
            report_broken(Inv::operands_defined_before_use, static_cast<NodeId>(i), "uses node #" + std::to_string(id) + ", which does not exist");
          else if (static_cast<size_t>(id) >= i)
            report_broken(Inv::operands_defined_before_use, static_cast<NodeId>(i), "uses '" + name(id) + "', which comes later");
          else if (g.node(id).kind == NodeKind::Output)
            report_broken(Inv::operands_defined_before_use, static_cast<NodeId>(i), "uses the Output node");
        });
      }
    }
  }

  void call_matches_schema() {
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      NodeId id = static_cast<NodeId>(i);
      if (n.kind != NodeKind::Call || broken[i]) continue;
      if (!is_op(n.op)) {
        report_broken(Inv::call_matches_schema, id, "calls op #" + std::to_string(n.op) + ", which is not registered");
        continue;
      }
      const OpDef& op = op_def(n.op);
      if (n.args.size() != op.schema.params.size()) {
        report_broken(Inv::call_matches_schema, id,
                      "has " + std::to_string(n.args.size()) + " arguments; " + op.name + " takes " +
                          std::to_string(op.schema.params.size()));
        continue;
      }
      std::vector<std::pair<std::string, Value>> by_name;
      for (size_t k = 0; k < n.args.size(); ++k) by_name.emplace_back(op.schema.params[k].name, n.args[k]);
      std::string error;
      auto bound = bind_call(op, {}, by_name, g, &error);
      if (!bound) {
        report_broken(Inv::call_matches_schema, id, error);
        continue;
      }
      for (size_t k = 0; k < n.args.size(); ++k)
        if (!same_value((*bound)[k], n.args[k]))
          report_broken(Inv::call_matches_schema, id,
                        "holds argument '" + op.schema.params[k].name + "' as " + value_str(n.args[k], g) +
                            "; bind_call gives " + value_str((*bound)[k], g));
    }
  }

  void getitem_on_tuple() {
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      NodeId id = static_cast<NodeId>(i);
      if (n.kind != NodeKind::GetItem || broken[i]) continue;
      if (n.args.size() != 2 || !n.args[0].is_node() || n.args[1].kind != Value::Kind::Int) {
        report_broken(Inv::getitem_on_tuple, id, "does not hold {tuple node, int index}");
        continue;
      }
      const Node& base = g.node(n.args[0].node);
      if (base.meta.kind != ValueMeta::Kind::Tuple) {
        report_broken(Inv::getitem_on_tuple, id, "takes an element of '" + base.name + "', which produces " + meta_str(base.meta) + ", not a tuple");
        continue;
      }
      int64_t index = n.args[1].i;
      if (index < 0 || static_cast<size_t>(index) >= base.meta.items.size()) {
        report_broken(Inv::getitem_on_tuple, id, "takes element " + std::to_string(index) + " of '" + base.name + "', a tuple of " + std::to_string(base.meta.items.size()));
        continue;
      }
      if (!(base.meta.items[static_cast<size_t>(index)] == n.meta))
        report(Inv::getitem_on_tuple, &n, "carries " + meta_str(n.meta) + "; element " + std::to_string(index) + " of '" + base.name + "' is " + meta_str(base.meta.items[static_cast<size_t>(index)]));
    }
  }

  void tuple_subscript_is_getitem() {
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      if (n.kind != NodeKind::Call || broken[i] || op_def(n.op).style != PrintStyle::Subscript || n.args.size() != 2) continue;
      if (n.args[0].is_node() && g.node(n.args[0].node).meta.kind == ValueMeta::Kind::Tuple && n.args[1].kind == Value::Kind::Int)
        report(Inv::tuple_subscript_is_getitem, &n, "subscripts tuple-producing '" + name(n.args[0].node) + "' with an int; use a GetItem node");
    }
  }

  void unique_names() {
    std::unordered_map<std::string, NodeId> seen;
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      if (n.kind == NodeKind::Output) continue;  // never printed as a name
      bool ident = !n.name.empty() && !std::isdigit(static_cast<unsigned char>(n.name[0]));
      for (char c : n.name) ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (!ident) report(Inv::unique_names, &n, "is not a Python identifier");
      else if (Graph::is_reserved_name(n.name)) report(Inv::unique_names, &n, "is a reserved name");
      if (!seen.emplace(n.name, static_cast<NodeId>(i)).second) report(Inv::unique_names, &n, "names two nodes");
    }
  }

  // `expected` with requires_grad cleared wherever `actual` has it clear.
  static void without_grad_where(ValueMeta& expected, const ValueMeta& actual) {
    if (expected.kind != actual.kind) return;
    if (expected.is_tensor() && !actual.tensor.requires_grad) expected.tensor.requires_grad = false;
    for (size_t i = 0; i < expected.items.size() && i < actual.items.size(); ++i) without_grad_where(expected.items[i], actual.items[i]);
  }

  void meta_matches_rule() {
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      if (n.kind != NodeKind::Call || broken[i]) continue;
      const OpDef& op = op_def(n.op);
      std::optional<ValueMeta> expected;
      try {
        expected = infer_meta(op, n.args, g);
      } catch (const SymbolicSpecialization&) {
        continue;  // NB: the rule decides on sizes only the trace's guards settle: nothing to check
      } catch (const UnbackedDecision&) {
        continue;  // or on a data-dependent size, which only the run knows
      } catch (const std::exception& e) {
        report(Inv::meta_matches_rule, &n, std::string("its meta rule rejects the operands: ") + e.what());
        continue;
      }
      // NB: a call captured while grad mode was off carries requires_grad false where its rule,
      // which does not know the mode, gives true (graph/python/graph_calls.cpp clears it).
      if (expected) without_grad_where(*expected, n.meta);
      if (expected && !(*expected == n.meta))
        report(Inv::meta_matches_rule, &n, "carries " + meta_str(n.meta) + "; the meta rule gives " + meta_str(*expected));
    }
  }
};

}  // namespace

const char* invariant_name(GraphInvariant inv) {
  switch (inv) {
#define FF_INVARIANT_NAME(name, doc) \
  case GraphInvariant::name:         \
    return #name;
    FF_GRAPH_INVARIANTS(FF_INVARIANT_NAME)
#undef FF_INVARIANT_NAME
  }
  return "?";
}

std::string Violation::str() const {
  std::string s = std::string(invariant_name(invariant)) + ": ";
  if (!node.empty()) s += "'" + node + "' ";
  return s + detail;
}

std::vector<Violation> find_violations(const Graph& g) {
  Checker c(g);
  // Structure first: the later predicates read operands only of nodes that passed it.
  c.placeholders_first();
  c.one_output_last();
  c.operands_defined_before_use();
  c.call_matches_schema();
  c.getitem_on_tuple();
  c.tuple_subscript_is_getitem();
  c.unique_names();
  c.meta_matches_rule();
  return std::move(c.out);
}

std::vector<std::string> verify(const Graph& g) {
  std::vector<std::string> out;
  for (const Violation& v : find_violations(g)) out.push_back(v.str());
  return out;
}

void verify_or_throw(const Graph& g, std::string_view context) {
  std::vector<std::string> problems = verify(g);
  if (problems.empty()) return;
  std::string msg = "graph verification failed";
  if (!context.empty()) msg += " " + std::string(context);
  msg += ":\n";
  for (const std::string& p : problems) msg += "  " + p + "\n";
  throw_internal(__FILE__, __LINE__, msg + graph_code(g));
}

}  // namespace ff
