#include "graph/passes/functionalize.h"

#include <exception>

#include "graph/op.h"
#include "graph/op_registry.h"

namespace ff {

std::string out_of_place_call(const Node& n, Node* out, const Graph* g) {
  const OpDef& op = op_def(n.op);
  *out = n;
  if (op.has(kInplace)) {
    Op fop = functional_form(op_kind(n));
    if (fop == Op::Open) return "no out-of-place form known";
    out->op = op_id(fop);
    if (op_def(out->op).schema.params.size() != n.args.size()) return "the out-of-place form takes other arguments";
  } else {
    int i = op.schema.index_of("inplace");
    out->args[static_cast<size_t>(i)] = Value::of_bool(false);
  }
  if (g && out->meta.is_tensor()) {
    try {
      if (auto m = infer_meta(op_def(out->op), out->args, *g); m && m->is_tensor() && m->tensor.sizes == n.meta.tensor.sizes)
        out->meta = *m;
    } catch (const std::exception&) {
      // the graph's own meta stays
    }
  }
  return "";
}

}  // namespace ff
