// Torch objects the frontend's hot path needs, resolved once on the cold path (the first compile):
// C getters of the tensor type's attributes, and the global-state functions. framefuse does not
// link libtorch; it reads tensors through the same C getters Python's attribute access would use,
// minus the attribute lookup.
#pragma once

#include <Python.h>

#include <string>

#include "graph/dtype.h"

namespace ff {

// A resolved attribute read: the type's C getter when the attribute is a getset descriptor, else
// a generic getattr. get() returns a new reference or null with an error set.
struct AttrGetter {
  getter fn = nullptr;
  void* closure = nullptr;
  PyObject* name = nullptr;  // interned; strong

  void resolve(PyTypeObject* type, const char* attr);
  PyObject* get(PyObject* obj) const { return fn ? fn(obj, closure) : PyObject_GetAttr(obj, name); }
};

// How to read one tensor type's metadata quickly (resolved per exact tensor type).
struct TensorReaders {
  AttrGetter shape, dtype, requires_grad, layout, is_cpu, is_cuda, is_meta, device;
  PyObject* stride = nullptr;      // method descriptor (strong)
  PyObject* get_device = nullptr;  // method descriptor (strong)
  PyObject* is_neg = nullptr;      // method descriptors (strong); null on a torch without them
  PyObject* is_conj = nullptr;
};

struct TorchRefs {
  PyObject* torch = nullptr;              // the torch module
  PyTypeObject* tensor_base = nullptr;    // torch._C.TensorBase (torch._C._TensorBase on 1.x)
  PyObject* is_grad_enabled = nullptr;    // torch.is_grad_enabled
  PyObject* get_default_dtype = nullptr;  // torch.get_default_dtype
  PyObject* get_deterministic = nullptr;  // torch._C._get_deterministic_algorithms
  PyObject* strided = nullptr;            // torch.strided
  PyObject* any_autocast = nullptr;       // torch._C._is_any_autocast_enabled (null on torch 1.x)
  // torch.utils._python_dispatch.is_in_torch_dispatch_mode (null where torch lacks it or its
  // include_infra_modes argument) and torch._C._len_torch_dispatch_stack (null on torch 1.x)
  PyObject* in_dispatch_mode = nullptr;
  PyObject* dispatch_stack_len = nullptr;
  PyObject* functorch_peek = nullptr;  // torch._C._functorch.peek_interpreter_stack (null on torch 1.x)
  PyObject* dtypes[kNumDTypes] = {};      // torch.float32 ... (null where torch lacks one)
};

// Resolves on first use (imports torch). Throws InternalError if torch cannot be imported.
const TorchRefs& torch_refs();
// The readers for `type` (a tensor type); cached per type. Cold path.
const TensorReaders& tensor_readers(PyTypeObject* type);
// True if `obj` is a torch tensor (any subclass). Cold path.
bool is_tensor(PyObject* obj);
// torch.<dtype_name(t)> (borrowed; null if the installed torch lacks it).
PyObject* torch_dtype_object(DType t);
// The DType of a torch.dtype object, if framefuse knows it.
bool dtype_from_object(PyObject* dtype_obj, DType* out);
// Hot path: torch.is_grad_enabled(); -1 on error (set).
int grad_enabled_now();
// Hot path: whether autocast is on for any device; -1 on error (set).
int autocast_enabled_now();
// Cold path: autocast's state as a tuple (per device: enabled, dtype), new reference; null with
// an error set.
PyObject* autocast_state_now();
// Cold path: autocast_state_now() where autocast is on, else null (no error set). Inside an
// AutocastOff with a state, it and autocast_state_now/autocast_enabled_now answer that state.
PyObject* autocast_state_if_on();

// While alive: torch.autocast is off on this thread (restored after, as it was). A frame traced
// under autocast is traced and compiled inside one (the graph holds autocast's casts; the torch
// calls the trace and the backend make must not be cast), with the state it was called in as
// `traced` (borrowed: autocast_state_if_on() answers it); its graph runs inside one (null).
class AutocastOff {
 public:
  explicit AutocastOff(PyObject* traced);
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  PyObject* saved_traced_;
  bool was_on_[2] = {false, false};
};
// Whether eager's ops must run as they are: a user's TorchDispatchMode (not one of torch's own
// infrastructure modes) is active, and sees every op eager runs; or a torch.func transform (vmap,
// grad, jvp, jacfwd...) is, whose wrapped tensors have no storage a kernel could read. A compiled
// callable entered then runs its function with the hook off, and no frame is compiled then (as
// torch.compile does). Where neither is on: two calls into torch's C code. False where torch was
// never imported, and on error (cleared).
bool eager_context_active();
// Calls torch.is_grad_enabled / torch.get_default_dtype (or any callable) without arguments: a
// new reference, or null with an error set.
PyObject* call_torch_getter(PyObject* fn);

}  // namespace ff
