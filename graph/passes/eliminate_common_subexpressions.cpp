#include "graph/passes/eliminate_common_subexpressions.h"

#include <bit>
#include <set>
#include <unordered_map>

#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "graph/passes/rewriter.h"
#include "graph/printer.h"

namespace ff {
namespace {

// An exact text key of a value: kinds are tagged (1 vs 1.0 vs True) and floats keep their bits
// (0.0 vs -0.0).
void append_key(std::string& key, const Value& v) {
  key += static_cast<char>('A' + static_cast<int>(v.kind));
  switch (v.kind) {
    case Value::Kind::Bool: key += v.b ? '1' : '0'; break;
    case Value::Kind::Int: key += std::to_string(v.i); break;
    case Value::Kind::Float: key += std::to_string(std::bit_cast<uint64_t>(v.f)); break;
    case Value::Kind::Str:
    case Value::Kind::MemoryFormat:
    case Value::Kind::Layout: key += std::to_string(v.s.size()) + ":" + v.s; break;
    case Value::Kind::DType: key += std::to_string(static_cast<int>(v.dtype)); break;
    case Value::Kind::Device: key += v.device.str(); break;
    case Value::Kind::Node: key += std::to_string(v.node); break;
    default: break;
  }
  if (!v.items.empty()) {
    key += '(';
    for (const Value& item : v.items) {
      append_key(key, item);
      key += ',';
    }
    key += ')';
  }
}

struct Seen {
  NodeId result;       // the node in the result graph
  NodeId source;       // the node in the source graph
  bool returned;       // the result is a graph output (itself or a node merged into it)
};

}  // namespace

Graph eliminate_common_subexpressions(const Graph& g) {
  AliasClasses alias(g);
  // Bumped by every mutation of a class: a value computed before it is not the one after.
  std::vector<int64_t> version(g.size(), 0);
  std::set<int> output_classes;
  std::set<NodeId> outputs;
  if (auto out = g.output())
    for (const Value& v : g.node(*out).args)
      v.for_each_node([&](NodeId id) {
        output_classes.insert(alias.of(id));
        outputs.insert(id);
      });
  // Memory some call writes into: two results that are equal when computed stop being equal when
  // one of them is written to later, so results in such a class are never merged.
  std::set<int> mutated_classes;
  for (const Node& n : g.nodes())
    for (NodeId w : written_operands(n)) mutated_classes.insert(alias.of(w));

  GraphRewriter rw(g);
  std::unordered_map<std::string, Seen> seen;
  std::vector<NodeId> origin;  // result node -> the source node it copies
  auto copied = [&](NodeId result, NodeId source) {
    if (origin.size() <= static_cast<size_t>(result)) origin.resize(static_cast<size_t>(result) + 1, -1);
    origin[static_cast<size_t>(result)] = source;
    return result;
  };
  for (size_t k = 0; k < g.size(); ++k) {
    NodeId id = static_cast<NodeId>(k);
    const Node& n = g.nodes()[k];
    bool candidate = n.kind == NodeKind::GetItem || (n.kind == NodeKind::Call && is_pure_call(n));
    if (!candidate) {
      copied(rw.copy(id), id);
      for (NodeId w : written_operands(n)) ++version[alias.of(w)];
      continue;
    }
    std::vector<Value> args;
    for (const Value& v : n.args) args.push_back(rw.map(v));
    std::string key = n.kind == NodeKind::GetItem ? "getitem" : "call" + std::to_string(n.op);
    for (const Value& v : args) append_key(key, v);
    key += "|" + meta_str(n.meta) + "|";
    // The memory the operands read, as of now: a mutation in between changes the key.
    for (const Value& v : args)
      v.for_each_node([&](NodeId op) {
        int cls = alias.of(origin.at(static_cast<size_t>(op)));
        key += std::to_string(cls) + "@" + std::to_string(version[cls]) + ",";
      });

    auto it = seen.find(key);
    if (it != seen.end()) {
      const Seen& prev = it->second;
      int prev_class = alias.of(prev.source), this_class = alias.of(id);
      // NB: this also covers an earlier result mutated since it was computed.
      bool written = mutated_classes.count(prev_class) || mutated_classes.count(this_class);
      // NB: eager returns two tensors (or two tensors that do not share memory): so must we. A node
      // merged into `prev` makes prev what it was: returned, of its class.
      bool this_returned = outputs.count(id) > 0;
      bool both_returned = (prev_class != this_class && output_classes.count(prev_class) && output_classes.count(this_class)) ||
                           (this_returned && prev.returned);
      if (!written && !both_returned) {
        it->second.returned |= this_returned;
        if (output_classes.count(this_class)) output_classes.insert(prev_class);
        rw.replace(id, Value::of_node(prev.result));
        continue;
      }
    }
    NodeId result = copied(rw.copy_with(id, std::move(args)), id);
    seen[key] = Seen{result, id, outputs.count(id) > 0};
  }
  return rw.finish();
}

}  // namespace ff
