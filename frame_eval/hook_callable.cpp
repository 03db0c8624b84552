// The callables framefuse.compile and framefuse.disable return: a small C type, so that a cached
// call costs one C-level call on top of the function itself (no Python-level wrapper).
#include <Python.h>
#include <structmember.h>

#include "frame_eval/hook.h"
#include "frame_eval/hook_internal.h"
#include "frame_eval/torch_refs.h"
#include "src/base/errors.h"

namespace ff {
namespace {

struct FrameEvalCallable {
  PyObject_HEAD
      vectorcallfunc vectorcall;
  PyObject* fn;         // strong: the wrapped callable
  PyObject* root_code;  // strong or null
  PyObject* dict;       // __dict__ (functools.wraps writes __name__, __wrapped__ ...)
  PyObject* weakrefs;
  std::shared_ptr<CompileOptions>* options;  // heap-allocated; null in Disable mode
  CallableMode mode;
};

PyObject* callable_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* c = reinterpret_cast<FrameEvalCallable*>(self);
  ThreadState& st = thread_state();
  // NB: under a user's TorchDispatchMode or a torch.func transform the function runs uncompiled
  // (eager_context_active says why), as under torch.compile.
  if (c->mode == CallableMode::Disable || eager_context_active()) {
    ++st.disabled;
    PyObject* r = PyObject_Vectorcall(c->fn, args, nargsf, kwnames);
    --st.disabled;
    return r;
  }
  // NB: a compiled callable called from a disabled region compiles again (as torch.compile does):
  // `disabled` is reset for its extent and restored after.
  CompileOptions* saved_options = st.options;
  const std::shared_ptr<CompileOptions>* saved_owner = st.options_owner;
  PyObject* saved_root = st.root_code;
  int saved_disabled = st.disabled;
  st.options = c->options->get();
  st.options_owner = c->options;
  st.root_code = c->root_code;
  st.disabled = 0;
  thread_enter_compiled(st);
  PyObject* r = PyObject_Vectorcall(c->fn, args, nargsf, kwnames);
  thread_exit_compiled(st);
  st.options = saved_options;
  st.options_owner = saved_owner;
  st.root_code = saved_root;
  st.disabled = saved_disabled;
  return r;
}

int callable_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* c = reinterpret_cast<FrameEvalCallable*>(self);
  Py_VISIT(c->fn);
  Py_VISIT(c->root_code);
  Py_VISIT(c->dict);
  return 0;
}

int callable_clear(PyObject* self) {
  auto* c = reinterpret_cast<FrameEvalCallable*>(self);
  Py_CLEAR(c->fn);
  Py_CLEAR(c->root_code);
  Py_CLEAR(c->dict);
  return 0;
}

void callable_dealloc(PyObject* self) {
  auto* c = reinterpret_cast<FrameEvalCallable*>(self);
  PyObject_GC_UnTrack(self);
  if (c->weakrefs) PyObject_ClearWeakRefs(self);
  callable_clear(self);
  delete c->options;
  c->options = nullptr;
  Py_TYPE(self)->tp_free(self);
}

PyObject* callable_descr_get(PyObject* self, PyObject* obj, PyObject* /*type*/) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* callable_repr(PyObject* self) {
  auto* c = reinterpret_cast<FrameEvalCallable*>(self);
  return PyUnicode_FromFormat(c->mode == CallableMode::Disable ? "<framefuse disabled %R>" : "<framefuse compiled %R>", c->fn);
}

PyObject* get_fn(PyObject* self, void*) {
  PyObject* fn = reinterpret_cast<FrameEvalCallable*>(self)->fn;
  Py_INCREF(fn);
  return fn;
}

PyGetSetDef callable_getset[] = {
    {"_framefuse_fn", get_fn, nullptr, "the wrapped callable", nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject g_callable_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace

void init_frame_eval_types() {
  if (g_callable_type.tp_flags & Py_TPFLAGS_READY) return;
  g_callable_type.tp_name = "framefuse._C.FrameEvalCallable";
  g_callable_type.tp_basicsize = sizeof(FrameEvalCallable);
  // NB: METHOD_DESCRIPTOR lets `instance.method(...)` and `module(...)` (a __call__ in a class)
  // call us with self prepended instead of allocating a bound method.
  g_callable_type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  g_callable_type.tp_vectorcall_offset = offsetof(FrameEvalCallable, vectorcall);
  g_callable_type.tp_call = PyVectorcall_Call;
  g_callable_type.tp_dealloc = callable_dealloc;
  g_callable_type.tp_traverse = callable_traverse;
  g_callable_type.tp_clear = callable_clear;
  g_callable_type.tp_descr_get = callable_descr_get;
  g_callable_type.tp_repr = callable_repr;
  g_callable_type.tp_getset = callable_getset;
  g_callable_type.tp_dictoffset = offsetof(FrameEvalCallable, dict);
  g_callable_type.tp_weaklistoffset = offsetof(FrameEvalCallable, weakrefs);
  g_callable_type.tp_doc = "A callable run by framefuse (framefuse.compile / framefuse.disable).";
  if (PyType_Ready(&g_callable_type) < 0) throw InternalError("PyType_Ready failed for FrameEvalCallable");
}

PyTypeObject* frame_eval_callable_type() { return &g_callable_type; }

PyObject* frame_eval_callable_target(PyObject* o, bool* disabled) {
  if (Py_TYPE(o) != &g_callable_type) return nullptr;
  auto* c = reinterpret_cast<FrameEvalCallable*>(o);
  *disabled = c->mode == CallableMode::Disable;
  return c->fn;
}

PyObject* make_frame_eval_callable(PyObject* fn, std::shared_ptr<CompileOptions> options, PyObject* root_code,
                                   CallableMode mode) {
  init_frame_eval_types();
  auto* c = PyObject_GC_New(FrameEvalCallable, &g_callable_type);
  if (!c) return nullptr;
  c->vectorcall = callable_vectorcall;
  Py_INCREF(fn);
  c->fn = fn;
  Py_XINCREF(root_code);
  c->root_code = root_code;
  c->dict = nullptr;
  c->weakrefs = nullptr;
  c->options = mode == CallableMode::Compile ? new std::shared_ptr<CompileOptions>(std::move(options)) : nullptr;
  c->mode = mode;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(c));
  return reinterpret_cast<PyObject*>(c);
}

}  // namespace ff
