// The Python objects the interpreter compares against (Known), resolved once.
#include <Python.h>

#include "frame_eval/interpreter_impl.h"
#include "src/base/gil_once.h"

namespace ff {

namespace {
PyObject* import_attr(const char* module, const char* attr) {
  PyObject* m = PyImport_ImportModule(module);
  FF_CHECK(m, std::string("cannot import ") + module);
  PyObject* a = PyObject_GetAttrString(m, attr);
  Py_DECREF(m);
  if (!a) PyErr_Clear();
  return a;
}

}  // namespace

const Known& known() {
  static Known* known_ = nullptr;
  return *gil_once(known_, [] {
    auto* k = new Known();  // NB: leaked on purpose; outlives interpreter teardown
    k->torch = PyImport_ImportModule("torch");
    if (k->torch) {
      k->tensor_type = import_attr("torch", "Tensor");
      k->module_type = import_attr("torch.nn", "Module");
      k->no_grad = import_attr("torch", "no_grad");
      k->enable_grad = import_attr("torch", "enable_grad");
      k->set_grad_enabled = import_attr("torch", "set_grad_enabled");
      k->disable_torch_dispatch = import_attr("torch._C", "_DisableTorchDispatch");
      k->disable_functorch = import_attr("torch._C", "_DisableFuncTorch");
      k->logger_type = import_attr("logging", "Logger");
      k->autocast_types[0] = import_attr("torch", "autocast");
      k->autocast_types[1] = import_attr("torch.cpu.amp", "autocast");
      k->autocast_types[2] = import_attr("torch.cuda.amp", "autocast");
      k->autocast_exit = k->autocast_types[0] ? PyObject_GetAttrString(k->autocast_types[0], "__exit__") : nullptr;
      if (!k->autocast_exit) PyErr_Clear();
      k->record_function = import_attr("torch.autograd.profiler", "record_function");
      k->nullcontext = import_attr("contextlib", "nullcontext");
      k->default_generator = import_attr("torch", "default_generator");
      k->size_type = import_attr("torch", "Size");
      k->torch_tensor = import_attr("torch", "tensor");
      k->torch_clone = import_attr("torch", "clone");
    } else {
      // NB: without torch (pure-Python tracing tests) the torch types are a fresh class that no
      // object is an instance of, so every torch-specific path is simply never taken.
      PyErr_Clear();
      PyObject* absent = PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyType_Type), "s()N", "_framefuse_no_torch", PyDict_New());
      FF_CHECK(absent, "cannot create the no-torch sentinel type");
      k->tensor_type = k->module_type = k->size_type = absent;
    }
    k->module_call = PyObject_GetAttrString(k->module_type, "__call__");
    k->module_getattr = PyObject_GetAttrString(k->module_type, "__getattr__");
    k->module_setattr = PyObject_GetAttrString(k->module_type, "__setattr__");
    PyErr_Clear();
    k->partial_type = import_attr("functools", "partial");
    k->generator_cm_type = import_attr("contextlib", "_GeneratorContextManager");
    k->ordered_dict_type = import_attr("collections", "OrderedDict");
    k->inspect_signature = import_attr("inspect", "signature");
    k->copy_deepcopy = import_attr("copy", "deepcopy");
    k->itertools_repeat = import_attr("itertools", "repeat");
    k->itertools_chain = import_attr("itertools", "chain");
    k->itertools_islice = import_attr("itertools", "islice");
    k->functools_reduce = import_attr("functools", "reduce");
    k->build_class = import_attr("builtins", "__build_class__");
    PyObject* os_environ = import_attr("os", "environ");
    k->environ_type = reinterpret_cast<PyObject*>(Py_TYPE(os_environ));
    Py_INCREF(k->environ_type);
    Py_DECREF(os_environ);
    PyObject* mapping = import_attr("collections.abc", "Mapping");
    k->mapping_get = PyObject_GetAttrString(mapping, "get");
    Py_DECREF(mapping);
    PyObject* sequence = import_attr("collections.abc", "Sequence");
    k->sequence_iter = PyObject_GetAttrString(sequence, "__iter__");
    Py_DECREF(sequence);
    PyErr_Clear();
    k->operator_mod = PyImport_ImportModule("operator");
    k->builtins = PyImport_ImportModule("builtins");
    k->object_getattribute = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__getattribute__");
    k->object_setattr = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__setattr__");
    k->object_init = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__init__");
    k->object_new = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__new__");
    PyObject* mm = k->torch ? PyImport_ImportModule("torch.nn.modules.module") : nullptr;
    std::vector<PyObject*> hooks;
    for (const char* name : {"_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                             "_global_backward_pre_hooks", "_global_forward_hooks_always_called"}) {
      PyObject* d = mm ? PyObject_GetAttrString(mm, name) : nullptr;
      if (d) hooks.push_back(d);
      else PyErr_Clear();
    }
    Py_XDECREF(mm);
    k->global_hook_dicts = PyTuple_New(static_cast<Py_ssize_t>(hooks.size()));
    for (size_t i = 0; i < hooks.size(); ++i) PyTuple_SET_ITEM(k->global_hook_dicts, i, hooks[i]);
    PyObject* ff_mod = PyImport_GetModule(PyUnicode_FromString("framefuse"));
    if (ff_mod) {
      k->graph_break_fn = PyObject_GetAttrString(ff_mod, "graph_break");
      Py_DECREF(ff_mod);
    }
    PyErr_Clear();
    for (int i = 0; i < kNumDTypes; ++i) {
      PyObject* d = k->torch ? PyObject_GetAttrString(k->torch, std::string(dtype_name(static_cast<DType>(i))).c_str()) : nullptr;
      if (!d) PyErr_Clear();
      k->dtypes.push_back(d);
    }
    return k;
  });
}

}  // namespace ff
