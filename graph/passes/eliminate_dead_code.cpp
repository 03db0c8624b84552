#include "graph/passes/eliminate_dead_code.h"

#include "graph/passes/effects.h"
#include "graph/passes/rewriter.h"

namespace ff {

Graph eliminate_dead_code(const Graph& g) {
  std::vector<bool> live(g.size(), false);
  // Users come after their operands, so one backward sweep settles liveness.
  for (size_t k = g.size(); k-- > 0;) {
    const Node& n = g.nodes()[k];
    if (n.kind == NodeKind::Placeholder || n.kind == NodeKind::Output || has_side_effects(n) || may_raise(n, g)) live[k] = true;
    if (!live[k]) continue;
    for (const Value& v : n.args) v.for_each_node([&](NodeId id) { live[static_cast<size_t>(id)] = true; });
  }
  GraphRewriter rw(g);
  for (size_t k = 0; k < g.size(); ++k)
    if (live[k]) rw.copy(static_cast<NodeId>(k));
  return rw.finish();
}

}  // namespace ff
