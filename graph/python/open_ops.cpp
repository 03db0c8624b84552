#include "graph/python/open_ops.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <unordered_map>

#include "graph/aten_schema.h"
#include "graph/meta_rules_util.h"
#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/python/data_dependent.h"
#include "graph/python/graph_calls.h"
#include "src/base/config.h"
#include "src/base/errors.h"

namespace py = pybind11;

namespace ff {

// op_callables.cpp
py::object resolve_path(const std::string& path);
void set_open_op_callable(OpId op, PyObject* fn);
void refresh_open_op_callable(OpId op, PyObject* fn);

namespace {

struct Resolved {
  std::vector<OpId> ops;
  std::string reason;  // why `ops` is empty
};

struct OpenTables {
  // NB: keyed by the callable's address and holding a reference to it, so the address stays its
  // own. Only torch's builtins get here (a bounded set), never user objects.
  std::unordered_map<PyObject*, Resolved> by_callable;
  std::vector<py::object> owned;
  py::object torch, tensor, schemas_for, variable_functions, namespace_selves;
  py::object op_packet, op_overload;  // torch._ops.OpOverloadPacket / OpOverload
};

OpenTables& tables() {
  static OpenTables* t = nullptr;  // NB: leaked on purpose; outlives interpreter teardown
  if (!t) {
    t = new OpenTables();
    t->torch = py::module_::import("torch");
    t->tensor = t->torch.attr("Tensor");
    py::object c = t->torch.attr("_C");
    t->schemas_for = c.attr("_jit_get_schemas_for_operator");
    t->variable_functions = c.attr("_VariableFunctions");
    py::list selves;
    for (const char* m : {"_nn", "_linalg", "_fft", "_special"})
      if (py::hasattr(c, m)) selves.append(c.attr(m));
    t->namespace_selves = selves;
    py::object ops = py::module_::import("torch._ops");
    t->op_packet = ops.attr("OpOverloadPacket");
    t->op_overload = ops.attr("OpOverload");
  }
  return *t;
}

// Where a builtin of torch's namespaces is reached from: (public namespace, prefix of its ATen
// name the namespace drops). torch.linalg.svd is aten::linalg_svd.
constexpr std::pair<const char*, const char*> kNamespaces[] = {
    {"torch", ""},
    {"torch.linalg", "linalg_"},
    {"torch.fft", "fft_"},
    {"torch.special", "special_"},
    {"torch.nn.functional", ""},
    {"torch._C._nn", ""},
    {"torch._C._linalg", ""},
    {"torch._C._fft", ""},
    {"torch._C._special", ""},
    {"torch._C._VariableFunctions", ""},
};

std::string name_of(py::handle fn) {
  if (!py::hasattr(fn, "__name__")) return "";
  return py::str(fn.attr("__name__")).cast<std::string>();
}

// The target (dotted path) and print style of `fn`, or false when it is not one of torch's
// builtins. The target must give back `fn` itself: graphs replay through it.
bool classify(PyObject* fn, std::string* target, PrintStyle* style, std::string* aten_name) {
  OpenTables& t = tables();
  py::handle h(fn);
  if (PyCFunction_Check(fn)) {
    // torch.* functions are static methods of torch._C._VariableFunctions (no self); those of
    // torch._C._nn, _linalg, _fft and _special have their module as self.
    PyObject* self = PyCFunction_GET_SELF(fn);
    bool ours = false;
    for (py::handle s : t.namespace_selves) ours = ours || s.ptr() == self;
    *aten_name = name_of(h);
    if (!self && !aten_name->empty()) ours = py::getattr(t.variable_functions, aten_name->c_str(), py::none()).ptr() == fn;
    if (!ours) return false;
    for (const auto& [ns, prefix] : kNamespaces) {
      std::string_view p(prefix);
      if (!p.empty() && aten_name->rfind(prefix, 0) != 0) continue;
      std::string path = std::string(ns) + "." + aten_name->substr(p.size());
      py::object obj = resolve_path(path);
      if (obj && obj.ptr() == fn) {
        *target = path;
        *style = PrintStyle::Function;
        return true;
      }
    }
    return false;
  }
  if (py::isinstance(h, t.op_packet) || py::isinstance(h, t.op_overload)) {
    // torch.ops.aten.sort / torch.ops.aten.sort.stable, and a library's torch.ops.mylib.scale_add:
    // called with the schema's own names.
    bool packet = py::isinstance(h, t.op_packet);
    py::object p = packet ? py::reinterpret_borrow<py::object>(h) : h.attr("overloadpacket");
    std::string qualified = py::str(p.attr("_qualified_op_name")).cast<std::string>();
    size_t colons = qualified.find("::");
    if (colons == std::string::npos) return false;
    std::string rest = qualified.substr(colons + 2);  // "sort", then "sort.stable" for an overload
    if (!packet) rest += "." + py::str(h.attr("_overloadname")).cast<std::string>();
    *target = "torch.ops." + qualified.substr(0, colons) + "." + rest;
    py::object same = resolve_path(*target);
    if (!same || same.ptr() != fn) return false;
    *aten_name = qualified.substr(0, colons + 2) + rest;
    *style = PrintStyle::Function;
    return true;
  }
  std::string module = PyCFunction_Check(fn) ? py::str(py::getattr(h, "__module__", py::str())).cast<std::string>() : "";
  if (module.rfind("torch._ops.", 0) == 0) {
    // What an OpOverloadPacket's __call__ calls (the frontend inlines it): torch.ops.aten.sort._op,
    // whose module is torch._ops.<namespace>.
    std::string ns = module.substr(11);
    std::string name = name_of(h);
    *target = "torch.ops." + ns + "." + name;
    py::object packet = resolve_path(*target);
    if (name.empty() || !packet || !py::hasattr(packet, "_op") || packet.attr("_op").ptr() != fn) return false;
    *aten_name = ns + "::" + name;
    *style = PrintStyle::Function;
    return true;
  }
  if (Py_TYPE(fn) == &PyMethodDescr_Type) {
    *aten_name = name_of(h);
    py::object same = py::getattr(t.tensor, aten_name->c_str(), py::none());
    if (same.ptr() != fn) return false;
    *target = "torch.Tensor." + *aten_name;
    *style = PrintStyle::Method;
    return true;
  }
  return false;
}

// The overloads torch tags nondeterministic_seeded (torch 2.x; 1.13 has no such tag).
std::vector<std::string> random_overloads(const std::string& ns, const std::string& name) {
  std::vector<std::string> out;
  try {
    py::object torch = tables().torch;
    if (!py::hasattr(torch, "Tag") || !py::hasattr(torch.attr("Tag"), "nondeterministic_seeded")) return out;
    py::object tag = torch.attr("Tag").attr("nondeterministic_seeded");
    py::object packet = torch.attr("ops").attr(ns.c_str()).attr(name.c_str());
    for (py::handle o : packet.attr("overloads")()) {
      std::string name = py::str(o).cast<std::string>();
      py::object overload = packet.attr(name.c_str());
      for (py::handle tg : overload.attr("tags"))
        if (tg.equal(tag)) out.push_back(name == "default" ? "" : name);
    }
  } catch (py::error_already_set&) {
  }
  return out;
}

// `aten_name`: "sort", "sort.stable" or, qualified, "aten::sort.stable" and "mylib::scale_add.default".
Resolved resolve(PyObject* fn, const std::string& target, PrintStyle style, const std::string& aten_name) {
  Resolved r;
  // Resolved before (from graph code read back, or an operator a library defined again under the same
  // name): the ops are the same, called through the live callable. NB: an OpOverload of an operator
  // torch.library removed (its Library was destroyed) must not be called: torch frees its name.
  for (OpId op : ops_with_target(target))
    if (op_def(op).is_open() && op_def(op).positional < 0) {
      refresh_open_op_callable(op, fn);
      r.ops.push_back(op);
    }
  if (!r.ops.empty()) return r;
  OpenOpSpec spec;
  spec.target = target;
  spec.style = style;
  spec.schema_names = target.rfind("torch.ops.", 0) == 0;
  // torch.ops.aten.sort.stable is one overload of aten::sort ("default" is the unnamed one).
  size_t colons = aten_name.find("::");
  std::string ns = colons == std::string::npos ? "aten" : aten_name.substr(0, colons);
  std::string name = colons == std::string::npos ? aten_name : aten_name.substr(colons + 2);
  size_t dot = name.find('.');
  std::string base = name.substr(0, dot);
  std::optional<std::string> only;
  if (dot != std::string::npos) only = name.substr(dot + 1) == "default" ? "" : name.substr(dot + 1);
  try {
    for (py::handle s : tables().schemas_for(py::str(ns + "::" + base))) {
      AtenSchema schema;
      std::string error;
      if (!parse_aten_schema(py::str(s).cast<std::string>(), &schema, &error)) continue;
      if (!only || schema.overload == *only) spec.overloads.push_back(std::move(schema));
    }
  } catch (py::error_already_set& e) {
    r.reason = target + ": torch's schemas cannot be read (" + std::string(e.what()).substr(0, 200) + ")";
    return r;
  }
  if (spec.overloads.empty()) {
    r.reason = target + " is not in framefuse's op registry and torch has no schema " + ns + "::" + name;
    return r;
  }
  spec.random_overloads = random_overloads(ns, base);
  std::vector<std::string> skipped;
  for (OpDef& d : open_op_defs(spec, &skipped)) {
    OpId id = register_op(std::move(d));
    set_open_op_callable(id, fn);
    r.ops.push_back(id);
  }
  if (r.ops.empty()) {
    r.reason = target + " is not in framefuse's op registry and no overload of " + ns + "::" + name + " can be captured";
    if (!skipped.empty()) r.reason += " (" + skipped.front() + (skipped.size() > 1 ? ", ..." : "") + ")";
  }
  return r;
}

const std::vector<OpId> kNone;

// The OpOverload a torch.library.custom_op object calls, or null for anything else.
py::object custom_op_overload(PyObject* fn) {
  static PyObject* type = nullptr;  // torch._library.custom_ops.CustomOpDef, once its module is imported
  if (!type) {
    PyObject* m = PyImport_GetModule(py::str("torch._library.custom_ops").ptr());
    if (!m) {
      PyErr_Clear();
      return py::object();
    }
    py::object mod = py::reinterpret_steal<py::object>(m);
    if (!py::hasattr(mod, "CustomOpDef")) return py::object();
    type = py::object(mod.attr("CustomOpDef")).release().ptr();  // NB: kept for the process's lifetime
  }
  if (!PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject*>(type))) return py::object();
  py::object overload = py::getattr(py::handle(fn), "_opoverload", py::none());
  return overload.is_none() ? py::object() : overload;
}

// Ops whose running statistics a training-mode call updates although their schemas do not say so.
bool updates_running_stats(const OpDef& d, const std::vector<Value>& bound) {
  for (const char* n : {"aten::batch_norm", "aten::native_batch_norm", "aten::instance_norm", "aten::_batch_norm_impl_index",
                        "aten::cudnn_batch_norm", "aten::miopen_batch_norm", "aten::_native_batch_norm_legit"}) {
    if (d.aten != n && d.aten.rfind(std::string(n) + ".", 0) != 0) continue;
    for (const char* p : {"running_mean", "running_var"}) {
      int i = d.schema.index_of(p);
      if (i >= 0 && bound[static_cast<size_t>(i)].is_node()) return true;
    }
  }
  return false;
}

}  // namespace

const std::vector<OpId>& open_ops_for_callable(PyObject* fn, std::string* reason) {
  // NB: without torch imported no callable can be one of torch's (and importing it here would run
  // Python inside the frame hook, or fail where there is no torch).
  static bool torch_seen = false;
  if (!torch_seen) {
    PyObject* m = PyImport_GetModule(py::str("torch").ptr());
    if (!m) {
      PyErr_Clear();
      return kNone;
    }
    Py_DECREF(m);
    torch_seen = true;
  }
  OpenTables& t = tables();
  auto it = t.by_callable.find(fn);
  if (it == t.by_callable.end()) {
    init_op_callables();  // the callable table open ops are added to (idempotent)
    std::string target, aten_name;
    PrintStyle style = PrintStyle::Function;
    // A torch.library.custom_op (a CustomOpDef) calls its OpOverload with the same arguments.
    py::object overload = custom_op_overload(fn);
    PyObject* op = overload ? overload.ptr() : fn;
    if (!classify(op, &target, &style, &aten_name)) return kNone;
    t.owned.push_back(py::reinterpret_borrow<py::object>(fn));
    it = t.by_callable.emplace(fn, resolve(op, target, style, aten_name)).first;
  }
  if (it->second.ops.empty()) *reason = it->second.reason;
  return it->second.ops;
}

std::vector<OpId> open_ops_for_target(std::string_view target) {
  try {
    py::object fn = resolve_path(std::string(target));
    if (!fn) return {};
    std::string reason;
    std::vector<OpId> ops = open_ops_for_callable(fn.ptr(), &reason);
    // NB: the target must be the one `fn` resolves to (torch.sort, not torch._C._VariableFunctions.sort).
    std::vector<OpId> out;
    for (OpId op : ops)
      if (op_def(op).target == target) out.push_back(op);
    return out;
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return {};
  }
}

namespace {

// An open in-place call (`x.sin_()`) whose out-of-place form is a hand-written pointwise op: that op
// (which inductor lowers), then `x.copy_(result)`, which stores it as eager does, cast to x's dtype.
// nullopt where eager would do something else: refuse (a result dtype x cannot
// hold, a broadcast past x's shape, an expanded x), or record autograd history.
std::optional<NodeId> inplace_as_functional(Graph& g, const OpDef& d, const std::vector<Value>& bound,
                                            const std::vector<Value>& args,
                                            const std::vector<std::pair<std::string, Value>>& kwargs,
                                            bool grad_enabled) {
  if (!d.has(kInplace) || d.target.size() < 2 || d.target.back() != '_' || bound.empty() || !bound[0].is_node()) return std::nullopt;
  if (!g.node(bound[0].node).meta.is_tensor()) return std::nullopt;
  // NB: float_power_ refuses a self that is not float64 (eager's own rule, not a cast)
  if (d.target == "torch.Tensor.float_power_" && g.node(bound[0].node).meta.tensor.dtype != DType::Float64) return std::nullopt;
  const TensorMeta self = g.node(bound[0].node).meta.tensor;  // NB: a copy; the graph grows below
  if (meta_util::has_internal_overlap(self)) return std::nullopt;
  // The memory a result is in: the node that made it, through views, in-place calls and tuple items.
  auto storage = [&](NodeId n) {
    for (;;) {
      const Node& nd = g.node(n);
      if (nd.kind == NodeKind::GetItem && nd.args[0].is_node()) {
        n = nd.args[0].node;
      } else if (nd.kind == NodeKind::Call && !nd.args.empty() && nd.args[0].is_node() &&
                 (op_def(nd.op).has(kView) || op_def(nd.op).has(kInplace))) {
        n = nd.args[0].node;
      } else {
        return n;
      }
    }
  };
  bool grad = false, overlap = false;
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i].for_each_node([&](NodeId n) {
      grad = grad || (g.node(n).meta.is_tensor() && g.node(n).meta.tensor.requires_grad);
      // NB: eager refuses an operand that overlaps x in part (x.atan2_(x.t())); x itself is fine.
      overlap = overlap || (i > 0 && n != bound[0].node && storage(n) == storage(bound[0].node));
    });
  if ((grad && grad_enabled) || overlap) return std::nullopt;
  static std::unordered_map<std::string, std::optional<OpId>> functional;  // NB: read and written under the GIL
  auto it = functional.find(d.target);
  if (it == functional.end()) {
    py::object fn = resolve_path(d.target.substr(0, d.target.size() - 1));
    it = functional.emplace(d.target, fn ? op_for_callable(fn.ptr()) : std::nullopt).first;
  }
  const std::optional<OpId> f = it->second;
  if (!f || op_def(*f).is_open() || !op_def(*f).has(kPointwise) || op_def(*f).has(kInplace) ||
      op_def(*f).has(kView) || op_def(*f).has(kRandom)) return std::nullopt;
  // NB: where the checks below refuse, the out-of-place node stays unused (dead code elimination
  // drops it): eager raises in those cases, and so does the in-place op added instead.
  std::string why;
  std::optional<NodeId> r = add_op_call(g, *f, args, kwargs, &why, grad_enabled);
  if (!r || !g.node(*r).meta.is_tensor()) return std::nullopt;
  const TensorMeta& rm = g.node(*r).meta.tensor;
  if (rm.sizes != self.sizes || rm.device != self.device || !can_cast(rm.dtype, self.dtype)) return std::nullopt;
  return add_op_call(g, op_id(Op::copy_), {bound[0], Value::of_node(*r)}, {}, &why, grad_enabled);
}

// Ops eager answers with their operand itself (the same tensor object, no new node) for the
// dtypes given: conj, resolve_conj, conj_physical and real of a real tensor, positive of a non-bool.
// NB: resolve_neg is not among them: a real tensor may carry the neg bit (torch._neg_view), which
// the graph's metadata does not record.
bool returns_operand(const OpDef& d, const std::vector<Value>& bound, const Graph& g) {
  if (bound.empty() || !bound[0].is_node() || !g.node(bound[0].node).meta.is_tensor()) return false;
  const std::string& a = d.aten;
  std::string base = a.substr(0, a.find('.'));
  DType dt = g.node(bound[0].node).meta.tensor.dtype;
  if (base == "aten::positive") return dt != DType::Bool;
  static const char* kRealIdentity[] = {"aten::conj", "aten::resolve_conj", "aten::conj_physical", "aten::conj_physical_",
                                        "aten::real"};
  for (const char* name : kRealIdentity)
    if (base == name) return !is_complex(dt);
  return false;
}

}  // namespace

std::optional<NodeId> add_open_call(Graph& g, const std::vector<OpId>& overloads, const std::vector<Value>& args,
                                    const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                    bool grad_enabled) {
  if (!overloads.empty() && op_def(overloads[0]).aten.rfind("aten::nonzero", 0) == 0) {
    // nonzero(as_tuple=) is torch's Python binding's: as_tuple=True is nonzero(x).unbind(1), as
    // ATen's nonzero_numpy computes it (the tensors are views of one result, as in eager).
    auto as_tuple = std::find_if(kwargs.begin(), kwargs.end(), [](const auto& kv) { return kv.first == "as_tuple"; });
    if (as_tuple != kwargs.end()) {
      if (as_tuple->second.kind != Value::Kind::Bool) {
        *reason = "nonzero(as_tuple=) needs a constant bool";
        return std::nullopt;
      }
      bool tuple = as_tuple->second.b;
      std::vector<std::pair<std::string, Value>> rest = kwargs;
      rest.erase(rest.begin() + (as_tuple - kwargs.begin()));
      const TensorMeta* x = args.empty() || !args[0].is_node() || !g.node(args[0].node).meta.is_tensor() ? nullptr : &g.node(args[0].node).meta.tensor;
      if (tuple && (!x || x->dim() == 0)) {
        *reason = "nonzero(as_tuple=True) of a 0-dim tensor is not captured";
        return std::nullopt;
      }
      auto n = add_open_call(g, overloads, args, rest, reason, grad_enabled);
      if (!n || !tuple) return n;
      return add_op_call(g, *op_by_name("unbind"), {Value::of_node(*n), Value::of_int(1)}, {}, reason, grad_enabled);
    }
  }
  std::string first_error;
  for (OpId op : overloads) {
    const OpDef& d = op_def(op);
    std::string error;
    auto bound = bind_call(d, args, kwargs, g, &error);
    if (!bound) {
      if (first_error.empty()) first_error = error;
      continue;
    }
    if (updates_running_stats(d, *bound)) {
      *reason = d.target + " with running statistics may update them in place, which its schema does not say";
      return std::nullopt;
    }
    if (returns_operand(d, *bound, g)) return (*bound)[0].node;
    if (std::optional<NodeId> n = inplace_as_functional(g, d, *bound, args, kwargs, grad_enabled)) return n;
    // The node replays as many positional arguments as the call passed.
    int count = static_cast<int>(std::min(args.size(), d.schema.params.size()));
    OpId replayed = op_with_positional(op, count);
    // NB: an in-place op's out-of-place sibling (`abs_` -> `abs`) registered now, while the GIL is
    // held: functionalization (graph/passes/functionalize.cpp) looks it up, to compute the op out
    // of place and write the result back.
    if (d.has(kInplace) && d.target.size() > 1 && d.target.back() == '_') open_ops_for_target(d.target.substr(0, d.target.size() - 1));
    int out_index = d.schema.index_of("out");
    if (out_index < 0 || (*bound)[static_cast<size_t>(out_index)].is_none())
      return add_op_call(g, replayed, args, kwargs, reason, grad_enabled);
    // out=: the functional call, then out.copy_(result). Where eager would do more than write the
    // result into `out` (resize it, cast to its dtype, refuse autograd), the call is not captured.
    const Value& out = (*bound)[static_cast<size_t>(out_index)];
    if (!out.is_node() || !g.node(out.node).meta.is_tensor()) {
      *reason = d.target + " with out= other than one tensor is not captured";
      return std::nullopt;
    }
    std::vector<std::pair<std::string, Value>> functional_kwargs;
    for (const auto& kv : kwargs)
      if (kv.first != "out") functional_kwargs.push_back(kv);
    bool operand = false;
    for (const Value& a : args) a.for_each_node([&](NodeId n) { operand = operand || n == out.node; });
    for (const auto& kv : functional_kwargs) kv.second.for_each_node([&](NodeId n) { operand = operand || n == out.node; });
    if (operand) {
      *reason = d.target + " with out= one of its operands is not captured";
      return std::nullopt;
    }
    auto result = add_op_call(g, replayed, args, functional_kwargs, reason, grad_enabled);
    if (!result) return std::nullopt;
    const ValueMeta& rm = g.node(*result).meta;
    const TensorMeta& om = g.node(out.node).meta.tensor;
    if (!rm.is_tensor() || rm.tensor.sizes != om.sizes || rm.tensor.dtype != om.dtype || rm.tensor.device != om.device) {
      *reason = d.target + " with an out= tensor of other sizes or dtype than the result (eager resizes or casts it) is not captured";
      return std::nullopt;
    }
    if (grad_enabled && (rm.tensor.requires_grad || om.requires_grad)) {
      *reason = d.target + " with out= on tensors that require grad is not captured (eager refuses autograd there)";
      return std::nullopt;
    }
    return add_op_call(g, op_id(Op::copy_), {out, Value::of_node(*result)}, {}, reason, grad_enabled);
  }
  *reason = first_error;
  return std::nullopt;
}

}  // namespace ff
