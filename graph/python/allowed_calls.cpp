// allow_in_graph (torch.compiler.allow_in_graph, framefuse.compiler.allow_in_graph): a call of a
// marked function is one opaque node of the graph, not traced into. The function gets an open op
// per call signature (the kinds of its arguments), registered on first use with the function as
// its callable: the reference runner and inductor's extern calls run it on the real tensors, and
// it is typed on meta tensors (graph_calls.cpp meta_by_fallback, which also refuses a result that
// aliases an argument and an argument it writes).
#include <pybind11/pybind11.h>

#include <string>
#include <unordered_map>

#include "graph/aten_schema.h"
#include "graph/python/open_ops.h"
#include "src/base/errors.h"

namespace py = pybind11;

namespace ff {

void set_open_op_callable(OpId op, PyObject* fn);  // op_callables.cpp

namespace {

// The schema type of one argument, or "" where it has none (a dict, an object ...).
std::string arg_type(const Value& v, const Graph& g) {
  switch (v.kind) {
    case Value::Kind::Node: return g.node(v.node).meta.is_tensor() ? "Tensor" : "";
    case Value::Kind::None: return "Tensor?";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::Str: return "str";
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      bool tensors = !v.items.empty(), ints = true;
      for (const Value& item : v.items) {
        tensors = tensors && item.is_node() && g.node(item.node).meta.is_tensor();
        ints = ints && item.kind == Value::Kind::Int;
      }
      // NB: a tuple of ints reaches the function as a list (schemas know lists only): tuples only
      // of tensors, which the function reads alike.
      if (tensors) return "Tensor[]";
      return ints && v.kind == Value::Kind::List ? "int[]" : "";
    }
    default: return "";
  }
}

std::string callable_name(PyObject* fn) {
  py::handle h(fn);
  std::string mod = py::hasattr(h, "__module__") && !h.attr("__module__").is_none() ? py::str(h.attr("__module__")) : py::str("");
  std::string name = py::hasattr(h, "__qualname__") ? py::str(h.attr("__qualname__")) : py::str(py::repr(h));
  return (mod.empty() ? "" : mod + ".") + name;
}

}  // namespace

PyObject* allowed_in_graph_table() {
  static PyObject* table = PyDict_New();  // NB: immortal: id(fn) -> fn, the functions held for good
  return table;
}

bool allowed_in_graph(PyObject* fn) {
  if (PyDict_GET_SIZE(allowed_in_graph_table()) > 0) {
    PyObject* key = PyLong_FromVoidPtr(fn);
    PyObject* entry = key ? PyDict_GetItem(allowed_in_graph_table(), key) : nullptr;  // borrowed
    Py_XDECREF(key);
    if (entry == fn) return true;
  }
  // torch.compiler.allow_in_graph keeps the ids of the user's functions in trace_rules (no
  // function of torch's own is there); read once torch._dynamo is imported. NB: this runs for every
  // call a trace meets: the module name is interned and the id set, made at import, kept.
  static PyObject* const module_name = PyUnicode_InternFromString("torch._dynamo.trace_rules");
  static PyObject* ids = nullptr;
  if (!ids) {
    PyObject* rules = PyImport_GetModule(module_name);
    ids = rules ? PyObject_GetAttrString(rules, "_allowed_callable_ids") : nullptr;
    Py_XDECREF(rules);
    PyErr_Clear();
    if (!ids) return false;
  }
  PyObject* key = PyLong_FromVoidPtr(fn);
  int found = key ? PySequence_Contains(ids, key) : -1;
  Py_XDECREF(key);
  if (found < 0) PyErr_Clear();
  return found == 1;
}

std::optional<NodeId> add_allowed_call(Graph& g, PyObject* fn, const std::vector<Value>& args,
                                       const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                       bool grad_enabled) {
  std::string params;
  for (size_t i = 0; i < args.size() + kwargs.size(); ++i) {
    const Value& v = i < args.size() ? args[i] : kwargs[i - args.size()].second;
    std::string type = arg_type(v, g);
    if (type.empty()) {
      *reason = "allow_in_graph: " + callable_name(fn) + " takes an argument that is not a tensor, a list of tensors or a constant";
      return std::nullopt;
    }
    if (i == args.size()) params += (params.empty() ? "*, " : ", *, ");
    else if (!params.empty()) params += ", ";
    params += type + " " + (i < args.size() ? "a" + std::to_string(i) : kwargs[i - args.size()].first);
  }
  static std::unordered_map<std::string, std::vector<OpId>> by_signature;  // NB: under the GIL
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(fn)) + "(" + params + ")";
  auto it = by_signature.find(key);
  if (it == by_signature.end()) {
    AtenSchema schema;
    std::string error;
    // NB: the result's kinds come from the meta call; `Tensor` only marks the op as tensor-valued.
    if (!parse_aten_schema(std::string(kAllowedInGraphAten) + "(" + params + ") -> Tensor", &schema, &error))
      throw InternalError("allow_in_graph schema: " + error);
    OpenOpSpec spec;
    spec.target = "allow_in_graph(" + callable_name(fn) + ")";
    spec.schema_names = true;
    spec.overloads.push_back(std::move(schema));
    std::vector<std::string> skipped;
    std::vector<OpId> ops;
    for (OpDef& d : open_op_defs(spec, &skipped)) {
      d.name = spec.target + "#" + std::to_string(by_signature.size());
      OpId id = register_op(std::move(d));
      set_open_op_callable(id, fn);
      ops.push_back(id);
    }
    it = by_signature.emplace(key, std::move(ops)).first;
  }
  if (it->second.empty()) {
    *reason = "allow_in_graph: a call of " + callable_name(fn) + " with (" + params + ") cannot be put in the graph";
    return std::nullopt;
  }
  return add_open_call(g, it->second, args, kwargs, reason, grad_enabled);
}

}  // namespace ff
