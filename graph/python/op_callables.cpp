// Resolves every op's target (and aliases) to the Python callable that implements it.
#include <pybind11/pybind11.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/fuse_attention.h"
#include "graph/python/graph_calls.h"
#include "graph/python/open_ops.h"
#include "src/base/errors.h"

namespace py = pybind11;

namespace ff {
namespace {

struct Alias {
  const char* target;
  Op op;  // NB: an enumerator, so an alias of a renamed op is a compile error
};

constexpr Alias kAliases[] = {
#define FF_ALIAS(target, op) {target, Op::op},
#if __has_include("graph/op_aliases.def")
#include "graph/op_aliases.def"
#endif
#undef FF_ALIAS
    {nullptr, Op::Open},
};

struct CallableTables {
  bool initialized = false;
  // Strong references; null when unavailable. NB: sized for the ops registered at run time too,
  // so it never reallocates under a reader.
  std::vector<PyObject*> by_op;
  std::unordered_map<PyObject*, OpId> by_callable;  // keys kept alive by `owned`
  std::vector<py::object> owned;
};

CallableTables& tables() {
  static CallableTables* t = new CallableTables();  // NB: leaked on purpose; outlives interpreter teardown
  return *t;
}

}  // namespace

// Imports the module prefix of a dotted path and walks the attributes ("torch.nn.functional.relu").
// An empty object when the path does not exist.
py::object resolve_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(path.substr(start, dot - start));
  parts.push_back(path.substr(start));
  py::object obj;
  size_t first_attr = 1;
  // Import the longest importable module prefix (torch.nn.functional is a module; torch.Tensor is not).
  for (size_t n = parts.size(); n >= 1; --n) {
    std::string mod;
    for (size_t i = 0; i < n; ++i) mod += (i ? "." : "") + parts[i];
    try {
      obj = py::module_::import(mod.c_str());
      first_attr = n;
      break;
    } catch (py::error_already_set&) {
      continue;
    }
  }
  if (!obj) return py::object();
  for (size_t i = first_attr; i < parts.size(); ++i) {
    if (!py::hasattr(obj, parts[i].c_str())) return py::object();
    obj = obj.attr(parts[i].c_str());
  }
  return obj;
}

namespace {

// Whether fn is torch._disable_dynamo's wrapper (torch/_compile.py): importing torch._dynamo
// replaces torch.manual_seed with one; it matters only to Dynamo.
bool is_dynamo_disable_wrapper(PyObject* fn) {
  if (!PyFunction_Check(fn)) return false;
  PyObject* file = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn))->co_filename;
  const char* f = PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : nullptr;
  if (!f) PyErr_Clear();
  return f && std::string_view(f).ends_with("/torch/_compile.py") && py::hasattr(fn, "__wrapped__");
}

// What those wrappers wrap, else fn.
py::object unwrap_dynamo_disable(py::object fn) {
  while (fn && is_dynamo_disable_wrapper(fn.ptr())) fn = fn.attr("__wrapped__");
  return fn;
}

void register_callable(CallableTables& t, py::object fn, OpId op) {
  if (!fn) return;
  // First registration wins: torch.relu and torch.Tensor.relu are different objects, but if two
  // targets resolve to the same object they are one callable.
  if (t.by_callable.emplace(fn.ptr(), op).second) t.owned.push_back(fn);
}

// torch's version is at least major.minor ("2.13.0+cpu").
bool torch_at_least(int major, int minor) {
  try {
    std::string v = py::str(py::module_::import("torch").attr("__version__"));
    int a = 0, b = 0;
    if (std::sscanf(v.c_str(), "%d.%d", &a, &b) != 2) return false;
    return a > major || (a == major && b >= minor);
  } catch (py::error_already_set&) {
    return false;
  }
}

}  // namespace

void init_op_callables() {
  CallableTables& t = tables();
  if (t.initialized) return;
  const auto& ops = all_ops();
  t.by_op.assign(ops.size() + kMaxOpenOps, nullptr);
  for (const OpDef& d : ops) {
    py::object fn = unwrap_dynamo_disable(resolve_path(d.target));
    if (!fn) continue;
    t.by_op[static_cast<size_t>(d.id)] = fn.ptr();
    register_callable(t, fn, d.id);
  }
  for (const Alias* a = kAliases; a->target; ++a) {
    register_callable(t, unwrap_dynamo_disable(resolve_path(a->target)), op_id(a->op));
  }
  AttentionSupport attention;
  attention.sdpa = t.by_op[static_cast<size_t>(op_id(Op::scaled_dot_product_attention))] != nullptr;
  attention.scale_keyword = attention.sdpa && torch_at_least(2, 1);
  set_attention_support(attention);
  set_op_resolver(&open_ops_for_target);
  t.initialized = true;
}

void set_open_op_callable(OpId op, PyObject* fn) {
  CallableTables& t = tables();
  FF_CHECK(static_cast<size_t>(op) < t.by_op.size() && !t.by_op[static_cast<size_t>(op)], "open op callable set twice");
  Py_INCREF(fn);  // NB: the registry's reference, never released (op ids live as long as the process)
  t.by_op[static_cast<size_t>(op)] = fn;
}

void refresh_open_op_callable(OpId op, PyObject* fn) {
  CallableTables& t = tables();
  FF_CHECK(static_cast<size_t>(op) < t.by_op.size(), "open op without a callable");
  PyObject*& slot = t.by_op[static_cast<size_t>(op)];
  if (slot == fn) return;
  // NB: the old callable is kept, not released: a graph compiled before may still hold it.
  Py_INCREF(fn);
  slot = fn;
}

std::optional<OpId> op_for_callable(PyObject* fn) {
  const CallableTables& t = tables();
  auto it = t.by_callable.find(fn);
  if (it != t.by_callable.end()) return it->second;
  if (is_dynamo_disable_wrapper(fn)) {
    py::object inner = unwrap_dynamo_disable(py::reinterpret_borrow<py::object>(fn));
    if (inner.ptr() != fn && (it = t.by_callable.find(inner.ptr())) != t.by_callable.end()) return it->second;
  }
  std::string reason;
  const std::vector<OpId>& open = open_ops_for_callable(fn, &reason);
  if (open.empty()) return std::nullopt;
  return open.front();
}

PyObject* op_callable(OpId op) {
  const CallableTables& t = tables();
  if (op < 0 || static_cast<size_t>(op) >= t.by_op.size()) return nullptr;
  PyObject* fn = t.by_op[static_cast<size_t>(op)];
  if (!fn && is_op(op) && op_def(op).overload != kNoOp) return op_callable(op_def(op).overload);  // a replay variant
  return fn;
}

}  // namespace ff
