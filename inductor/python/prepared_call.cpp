#include "inductor/python/prepared_call.h"

#include "graph/python/graph_calls.h"
#include "src/base/errors.h"

namespace ff::inductor {

namespace {

bool holds_node(const Value& v) {
  bool found = false;
  v.for_each_node([&](NodeId) { found = true; });
  return found;
}

}  // namespace

PreparedCall::PreparedCall(PyObject* fn, const OpDef& op, const std::vector<Value>& bound) : fn_(fn) {
  CallArgs ca = call_args(op, bound);
  auto add = [&](const Value& v) {
    Arg a;
    if (v.is_node()) a.node = v.node;
    else if (holds_node(v)) a.value = &v;
    else if (!(a.constant = value_to_py(v, nullptr))) throw InternalError("cannot convert an argument of " + op.target + " to Python");
    args_.push_back(a);
  };
  for (const Value* v : ca.positional) add(*v);
  positional_ = args_.size();
  if (!ca.keywords.empty()) {
    kwnames_ = PyTuple_New(static_cast<Py_ssize_t>(ca.keywords.size()));
    FF_CHECK(kwnames_, "out of memory");
    for (size_t i = 0; i < ca.keywords.size(); ++i) {
      add(*ca.keywords[i].second);
      PyTuple_SET_ITEM(kwnames_, static_cast<Py_ssize_t>(i), PyUnicode_InternFromString(ca.keywords[i].first.c_str()));
    }
  }
}

PreparedCall::~PreparedCall() {
  if (!Py_IsInitialized()) return;
  for (Arg& a : args_) Py_CLEAR(a.constant);
  Py_CLEAR(kwnames_);
}

PyObject* PreparedCall::call(PyObject* const* nodes) const {
  constexpr size_t kInline = 16;
  PyObject* inline_stack[kInline];
  std::vector<PyObject*> heap;
  PyObject** stack = inline_stack;
  if (args_.size() > kInline) {
    heap.resize(args_.size());
    stack = heap.data();
  }
  std::vector<PyObject*> built;  // new references of per-call sequences
  for (size_t i = 0; i < args_.size(); ++i) {
    const Arg& a = args_[i];
    if (a.constant) {
      stack[i] = a.constant;
    } else if (a.node >= 0) {
      stack[i] = nodes[a.node];
      if (!stack[i]) {
        PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: graph value used before it was computed");
        for (PyObject* b : built) Py_DECREF(b);
        return nullptr;
      }
    } else {
      PyObject* v = value_to_py(*a.value, nodes);
      if (!v) {
        for (PyObject* b : built) Py_DECREF(b);
        return nullptr;
      }
      built.push_back(v);
      stack[i] = v;
    }
  }
  PyObject* r = PyObject_Vectorcall(fn_, stack, positional_, kwnames_);
  for (PyObject* b : built) Py_DECREF(b);
  return r;
}

}  // namespace ff::inductor
