// The version-specific frame layer: the only code in framefuse that reads CPython's internal
// `_PyInterpreterFrame`. It is C (frame_access.c) because the internal headers do not compile as
// C++. Everything else sees frames through these functions.
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

struct _PyInterpreterFrame;

// 1 when this build supports frame evaluation on the running CPython (3.11, 3.12, 3.13).
int ff_frame_supported(void);

// 1 on CPython 3.12+: the default evaluator clears and pops the frame it evaluates, so a hook that
// does not hand the frame to it must do so itself (ff_frame_release). See docs §1.4.
int ff_frame_evaluator_pops(void);

// What a fresh frame holds. All references are borrowed from the frame.
typedef struct {
  PyCodeObject* code;
  PyObject* func;       // the function object being called
  PyObject* globals;
  PyObject* builtins;
  PyObject* closure;    // func.__closure__ (tuple of cells) or NULL
  PyObject** localsplus;  // arguments bound; cells not yet made; free-variable slots NULL
  int nlocalsplus;
} ff_frame_info;

// Fills `out` and returns 1 when the frame may be handled by framefuse: owned by the thread (not
// a generator), not started, no throw, no exception set, an optimized function frame with no
// frame object and no locals dict, and not a generator/coroutine code. Returns 0 otherwise:
// the frame must run natively.
int ff_frame_inspect(PyThreadState* tstate, struct _PyInterpreterFrame* frame, int throwflag, ff_frame_info* out);

// Called when the hook returns without handing `frame` to the evaluator (a cached graph ran, or an
// error is being raised). 3.12+: drops the frame's references and pops it off the thread's data
// stack, as the evaluator would have (3.13: CPython's own _PyEval_FrameClearAndPop). 3.11: nothing
// (the caller, _PyEval_Vector, pops it).
void ff_frame_release(PyThreadState* tstate, struct _PyInterpreterFrame* frame);

// C-API spellings that differ between the versions (the only other place besides the frame that
// does; the opcode facts live in opcodes_31x.cpp).
// co_extra: `_PyEval_RequestCodeExtraIndex`/`_PyCode_{Get,Set}Extra` (3.11), `PyUnstable_*` (3.12+).
Py_ssize_t ff_request_code_extra_index(freefunc free_fn);
int ff_code_get_extra(PyObject* code, Py_ssize_t index, void** extra);
int ff_code_set_extra(PyObject* code, Py_ssize_t index, void* extra);
// The object a weak reference refers to (new reference), or NULL once it is dead (no error set).
PyObject* ff_weakref_target(PyObject* ref);
// A type's dict (new reference; 3.12+ keeps static builtin types' dicts per interpreter, so their
// tp_dict is NULL), or NULL.
PyObject* ff_type_dict(PyTypeObject* type);

#ifdef __cplusplus
}
#endif
