// Python bindings of the graph IR: build graphs from Python, inspect them, run them on the
// reference runner. python/framefuse/graph.py wraps these in the public `framefuse.graph` API.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "graph/autograd/autograd.h"
#include "graph/op_registry.h"
#include "graph/parser.h"
#include "graph/passes/fuse_attention.h"
#include "graph/passes/scalar_sinks.h"
#include "graph/passes/specialize_shapes.h"
#include "graph/pipeline.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "graph/python/graph_calls.h"
#include "graph/python/reference_runner.h"
#include "graph/python/torch_native.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/graph_handle.h"

namespace py = pybind11;

namespace ff {
namespace {

struct PyGraph;

// A handle to one node of a PyGraph (what Graph.call returns).
struct PyNode {
  std::shared_ptr<PyGraph> graph;
  NodeId id;
};

struct PyGraph : std::enable_shared_from_this<PyGraph> {
  Graph g;
  std::unique_ptr<ReferenceRunner> runner;  // built on first run, dropped when the graph changes

  Value to_value(py::handle obj) {
    if (py::isinstance<PyNode>(obj)) {
      const PyNode& n = obj.cast<const PyNode&>();
      if (n.graph.get() != this) throw py::value_error("node belongs to another graph");
      return Value::of_node(n.id);
    }
    if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
      std::vector<Value> items;
      for (py::handle item : obj) items.push_back(to_value(item));
      return py::isinstance<py::list>(obj) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (PySlice_Check(obj.ptr())) {
      auto* s = reinterpret_cast<PySliceObject*>(obj.ptr());
      return Value::slice(to_value(s->start), to_value(s->stop), to_value(s->step));
    }
    auto v = constant_from_py(obj.ptr());
    if (!v)
      throw py::type_error("cannot use a value of type " + std::string(Py_TYPE(obj.ptr())->tp_name) +
                           " in a graph: pass a graph node or a Python constant");
    return *v;
  }

  PyNode node(NodeId id) { return PyNode{shared_from_this(), id}; }
};

// Sizes or strides: ints, and a symbolic entry as its expression's text ("s0").
py::list shape_list(const SymShape& s) {
  py::list out;
  for (const SymInt& x : s) {
    if (x.is_symbolic()) out.append(x.str());
    else out.append(x.hint());
  }
  return out;
}

py::dict meta_dict(const ValueMeta& m) {
  py::dict d;
  switch (m.kind) {
    case ValueMeta::Kind::Tensor:
      d["kind"] = "tensor";
      d["sizes"] = shape_list(m.tensor.sizes);
      d["strides"] = shape_list(m.tensor.strides);
      d["dtype"] = std::string(dtype_name(m.tensor.dtype));
      d["device"] = m.tensor.device.str();
      d["requires_grad"] = m.tensor.requires_grad;
      break;
    case ValueMeta::Kind::Tuple: {
      d["kind"] = "tuple";
      py::list items;
      for (const ValueMeta& item : m.items) items.append(meta_dict(item));
      d["items"] = items;
      break;
    }
    case ValueMeta::Kind::Int: d["kind"] = "int"; break;
    case ValueMeta::Kind::Float: d["kind"] = "float"; break;
    case ValueMeta::Kind::Bool: d["kind"] = "bool"; break;
    case ValueMeta::Kind::None: d["kind"] = "none"; break;
  }
  return d;
}

// A Value as Python sees it in Node.args: node references as Nodes of `g`, everything else as the
// Python constant (what the reference runner passes the op).
py::object value_object(const std::shared_ptr<PyGraph>& g, const Value& v) {
  if (v.is_node()) return py::cast(PyNode{g, v.node});
  if (v.is_sequence()) {
    py::list items;
    for (const Value& item : v.items) items.append(value_object(g, item));
    if (v.kind == Value::Kind::List) return items;
    return py::tuple(items);
  }
  if (v.kind == Value::Kind::Slice)
    return py::reinterpret_steal<py::object>(PySlice_New(value_object(g, v.items[0]).ptr(), value_object(g, v.items[1]).ptr(),
                                                         value_object(g, v.items[2]).ptr()));
  PyObject* obj = value_to_py(v, nullptr);
  if (!obj) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(obj);
}

py::list traits_list(uint32_t traits) {
  py::list out;
  const std::pair<OpTrait, const char*> names[] = {
      {kPointwise, "pointwise"}, {kReduction, "reduction"}, {kView, "view"}, {kInplace, "inplace"}, {kRandom, "random"}, {kCreation, "creation"}, {kExtern, "extern"}, {kComposite, "composite"}, {kNondeterministicOutput, "nondeterministic_output"}, {kIndexing, "indexing"}};
  for (const auto& [t, name] : names)
    if (traits & t) out.append(name);
  return out;
}

}  // namespace

void define_graph(py::module_& m) {
  py::module_ g = m.def_submodule("graph", "graph IR bindings");

  g.def("init_ops", &init_op_callables, "Resolve every op's torch callable (call after importing torch).");

  g.def("torch_native_status", &torch_native_status,
        "\"loaded\" when framefuse._torch_native serves the hot-path tensor checks, else why not.");
  g.def("native_tensor_mismatch", [](py::handle expected, py::handle actual) -> py::object {
    NativeTensorMatch m;
    if (!m.record(expected.ptr())) return py::none();
    return py::str(m.mismatch(actual.ptr())); },
        "Testing: how `actual` differs from `expected` for the native tensor check (\"\" if it matches); "
        "None when the check does not read `expected`.");

  g.def("ops", [] {
    py::list out;
    for (const OpDef& d : all_ops()) {
      py::dict e;
      e["name"] = d.name;
      e["target"] = d.target;
      e["schema"] = d.schema.str();
      e["params"] = [&] {
        py::list ps;
        for (const ParamSpec& p : d.schema.params) ps.append(p.name);
        return ps;
      }();
      e["traits"] = traits_list(d.traits);
      e["has_meta_rule"] = d.meta != nullptr;
      e["available"] = op_callable(d.id) != nullptr;
      out.append(e);
    }
    return out;
  });

  g.def("op_for_callable", [](py::handle fn) -> py::object {
    auto op = op_for_callable(fn.ptr());
    if (!op) return py::none();
    return py::str(op_def(*op).name);
  });

  py::class_<PyNode>(g, "Node")
      .def_property_readonly("name", [](const PyNode& n) { return n.graph->g.node(n.id).name; })
      .def_property_readonly("id", [](const PyNode& n) { return n.id; })
      .def_property_readonly("kind", [](const PyNode& n) { return node_kind_name(n.graph->g.node(n.id).kind); })
      .def_property_readonly("op", [](const PyNode& n) -> py::object {
        const Node& node = n.graph->g.node(n.id);
        if (node.kind != NodeKind::Call) return py::none();
        return py::str(op_def(node.op).name);
      })
      .def_property_readonly("meta", [](const PyNode& n) { return meta_dict(n.graph->g.node(n.id).meta); })
      .def_property_readonly("target", [](const PyNode& n) -> py::object {
        const Node& node = n.graph->g.node(n.id);
        if (node.kind == NodeKind::GetItem) return py::module_::import("operator").attr("getitem");
        if (node.kind != NodeKind::Call) return py::none();
        PyObject* fn = op_callable(node.op);
        if (!fn) throw Unsupported(op_def(node.op).target + " is not available in the installed torch");
        return py::reinterpret_borrow<py::object>(fn); }, "The torch callable a call runs (operator.getitem for GetItem).")
      .def_property_readonly("args", [](const PyNode& n) {
        const Node& node = n.graph->g.node(n.id);
        py::list out;
        if (node.kind == NodeKind::Call) {
          for (const Value* v : call_args(op_def(node.op), node.args).positional) out.append(value_object(n.graph, *v));
        } else {
          for (const Value& v : node.args) out.append(value_object(n.graph, v));
        }
        return py::tuple(out); }, "Positional arguments as the op is called with them (nodes, constants).")
      .def_property_readonly("kwargs", [](const PyNode& n) {
        const Node& node = n.graph->g.node(n.id);
        py::dict out;
        if (node.kind == NodeKind::Call)
          for (const auto& [name, v] : call_args(op_def(node.op), node.args).keywords) out[py::str(name)] = value_object(n.graph, *v);
        return out; }, "Keyword arguments as the op is called with them.")
      .def("__repr__", [](const PyNode& n) { return "<framefuse node " + n.graph->g.node(n.id).name + ">"; });

  py::class_<PyGraph, std::shared_ptr<PyGraph>>(g, "Graph")
      .def(py::init([] { return std::make_shared<PyGraph>(); }))
      .def("placeholder", [](PyGraph& self, const std::string& name, py::handle example) {
             TensorMeta meta = meta_from_tensor(example.ptr());
             self.runner.reset();
             return self.node(self.g.add_placeholder(name, ValueMeta::of_tensor(std::move(meta)))); }, py::arg("name"), py::arg("example"), "Add a graph input typed like the example tensor.")
      .def("call", [](PyGraph& self, py::handle fn, py::args args, py::kwargs kwargs) {
             std::vector<Value> pos;
             for (py::handle a : args) pos.push_back(self.to_value(a));
             std::vector<std::pair<std::string, Value>> kw;
             for (auto item : kwargs) kw.emplace_back(item.first.cast<std::string>(), self.to_value(item.second));
             std::string reason;
             auto id = add_torch_call(self.g, fn.ptr(), pos, kw, &reason);
             if (!id) throw Unsupported(reason);
             self.runner.reset();
             return self.node(*id); }, "Add a call of a torch callable; arguments are nodes or Python constants.")
      .def("getitem", [](PyGraph& self, const PyNode& n, int64_t index) {
             self.runner.reset();
             return self.node(self.g.add_getitem(n.id, index)); })
      .def("output", [](PyGraph& self, py::handle result) {
             self.runner.reset();
             self.g.set_output(self.to_value(result)); })
      .def("nodes", [](PyGraph& self) {
             py::list out;
             for (NodeId id = 0; id < static_cast<NodeId>(self.g.size()); ++id) out.append(self.node(id));
             return out; })
      .def("__len__", [](const PyGraph& self) { return self.g.size(); })
      .def("code", [](const PyGraph& self) { return graph_code(self.g); }, "The graph as Python-like code.")
      .def("table", [](const PyGraph& self) { return graph_table(self.g); }, "The graph as a table.")
      .def("verify", [](const PyGraph& self) { return verify(self.g); }, "Invariant violations (empty: valid).")
      .def("optimized", [](const PyGraph& self) {
             auto out = std::make_shared<PyGraph>();
             out->g = run_graph_passes(self.g);
             return out; }, "A new graph after the graph passes (constant folding, attention, CSE, dead code, functionalization).")
      .def("fuse_attention", [](const PyGraph& self, bool cuda_tf32_matmul) {
             auto out = std::make_shared<PyGraph>();
             std::vector<std::string> fired;
             AttentionSupport support = attention_support();
             support.cuda_tf32_matmul = cuda_tf32_matmul;
             out->g = config().fuse_attention ? fuse_attention(self.g, support, &fired) : self.g;
             return py::make_tuple(out, fired); }, py::arg("cuda_tf32_matmul") = false,
           "(graph, rewritten softmax names): explicit attention rewritten into scaled_dot_product_attention "
           "(config fuse_attention; a no-op where the installed torch has no SDPA). cuda_tf32_matmul: float32 "
           "matmuls on CUDA run in TF32 now, so float32 CUDA attention stays explicit.")
      .def("autograd_split", [](const PyGraph& self) {
             GraphStageOptions options;
             options.fuse_attention = false;  // NB: scaled_dot_product_attention has no derivative rule yet
             Graph source = run_passes(self.g, graph_passes(options), verify_between_passes());
             AutogradGraphs split = split_for_autograd(source, python_typer());
             auto fwd = std::make_shared<PyGraph>();
             fwd->g = std::move(split.forward);
             auto bwd = std::make_shared<PyGraph>();
             bwd->g = std::move(split.backward);
             py::dict d;
             d["forward"] = fwd;
             d["backward"] = bwd;
             if (!split.alias_outputs.empty()) {
               auto aliases = std::make_shared<PyGraph>();
               aliases->g = std::move(split.aliases);
               d["aliases"] = aliases;
             } else {
               d["aliases"] = py::none();
             }
             d["alias_outputs"] = split.alias_outputs;
             d["outputs"] = split.outputs;
             d["differentiable"] = split.differentiable;
             d["saved_inputs"] = split.saved_inputs;
             d["grad_inputs"] = split.grad_inputs;
             d["grad_tangents"] = split.grad_tangents;
             return d; },
           "AOT autograd (graph/autograd/autograd.h): a dict of the forward and backward graphs and how the "
           "runtime connects them (outputs, differentiable, saved_inputs, grad_inputs, grad_tangents). Raises "
           "framefuse._C.Unsupported where the graph cannot be split exactly.")
      .def("is_symbolic", [](const PyGraph& self) { return has_symbolic_shapes(self.g); }, "Whether a size or stride is symbolic (dynamic shapes).")
      .def("has_unbacked_symbols", [](const PyGraph& self) { return has_unbacked_symbols(self.g); }, "Whether a size is data-dependent (an unbacked symbol u0, u1 ...: config capture_dynamic_output_shape_ops).")
      .def("scalar_sink_split", [](const PyGraph& self) -> py::object {
             std::optional<ScalarSinkSplit> split = split_scalar_sinks(self.g);
             if (!split) return py::none();
             auto tensors = std::make_shared<PyGraph>();
             tensors->g = std::move(split->tensors);
             auto scalars = std::make_shared<PyGraph>();
             scalars->g = std::move(split->scalars);
             py::dict d;
             d["tensors"] = tensors;
             d["scalars"] = scalars;
             d["operand_outputs"] = split->operand_outputs;
             d["scalar_outputs"] = split->scalar_outputs;
             d["outputs"] = self.g.output_value().items.size();
             return d; }, "None, or the graph's tensor work and the numbers it only returns (x.item() under config capture_scalar_outputs) as two graphs (graph/passes/scalar_sinks.h).")
      .def("has_data_dependent_values", [](const PyGraph& self) { return has_data_dependent_values(self.g); }, "Whether a size or a Python number of the graph comes from tensor data (unbacked symbols; x.item() under config capture_scalar_outputs): such graphs run on the reference runner, or split (scalar_sink_split).")
      .def("symbol_bindings", [](const PyGraph& self) { return symbol_bindings(self.g); }, "Per symbol s0, s1 ...: (input index, dim) whose size it is.")
      .def("specialize", [](const PyGraph& self, const std::vector<int64_t>& bindings) {
             auto out = std::make_shared<PyGraph>();
             out->g = specialize_shapes(self.g, bindings);
             return out; }, "The graph with symbol k replaced by bindings[k]: static, for one set of sizes.")
      .def("joint_graph", [](const PyGraph& self) {
             auto out = std::make_shared<PyGraph>();
             out->g = joint_graph(self.g, python_typer());
             return out; }, "The joint forward and backward graph (graph/autograd/autograd.h).")
      .def("pass_trace", [](const PyGraph& self) { return graph_pass_trace(self.g); }, "The IR after each graph pass, as text.")
      .def_static("parse", [](const std::string& text) {
                    auto out = std::make_shared<PyGraph>();
                    out->g = parse_graph(text);
                    return out; }, "Parse graph code (the printer's output) back into a graph.")
      .def("run", [](PyGraph& self, py::args inputs) -> py::object {
        if (!self.runner) self.runner = std::make_unique<ReferenceRunner>(self.g);
        std::vector<PyObject*> in;
        for (py::handle h : inputs) in.push_back(h.ptr());
        PyObject* r = self.runner->run(in.data(), in.size());
        if (!r) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(r); }, "Run the graph on the reference runner (eager torch ops).");
}

const Graph& graph_from_python(py::handle obj, const char* what) {
  py::handle h = obj;
  // framefuse.graph.Graph holds its _C.graph.Graph in `_g`.
  if (!py::isinstance<PyGraph>(h) && py::hasattr(h, "_g")) h = h.attr("_g");
  if (!py::isinstance<PyGraph>(h))
    throw py::type_error(std::string(what) + " must be a framefuse.graph.Graph, not " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  return h.cast<PyGraph&>().g;
}

py::object graph_to_python(const Graph& g) {
  auto pg = std::make_shared<PyGraph>();
  pg->g = g;
  return py::cast(pg);
}

}  // namespace ff
