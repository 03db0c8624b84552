// See frame_access.h. NB: internal headers need Py_BUILD_CORE; on 3.12 `_PyGC_FINALIZED` must be
// undefined first (cpython issue #105268).
#define Py_BUILD_CORE 1
#include <Python.h>

#include "frame_eval/frame_access.h"

// NB: not on a free-threaded build (3.13t): the caches in co_extra rely on the GIL.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define FF_FRAMES_SUPPORTED 1
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#undef _PyGC_FINALIZED
#endif
#include <internal/pycore_frame.h>
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_ceval.h>  // _PyEval_FrameClearAndPop (exported from 3.13)
#endif
#else
#define FF_FRAMES_SUPPORTED 0
#endif

int ff_frame_supported(void) { return FF_FRAMES_SUPPORTED; }

#if PY_VERSION_HEX >= 0x030C0000
Py_ssize_t ff_request_code_extra_index(freefunc free_fn) { return PyUnstable_Eval_RequestCodeExtraIndex(free_fn); }
int ff_code_get_extra(PyObject* code, Py_ssize_t index, void** extra) {
  return PyUnstable_Code_GetExtra(code, index, extra);
}
int ff_code_set_extra(PyObject* code, Py_ssize_t index, void* extra) {
  return PyUnstable_Code_SetExtra(code, index, extra);
}
PyObject* ff_type_dict(PyTypeObject* type) { return PyType_GetDict(type); }
#else
Py_ssize_t ff_request_code_extra_index(freefunc free_fn) { return _PyEval_RequestCodeExtraIndex(free_fn); }
int ff_code_get_extra(PyObject* code, Py_ssize_t index, void** extra) { return _PyCode_GetExtra(code, index, extra); }
int ff_code_set_extra(PyObject* code, Py_ssize_t index, void* extra) { return _PyCode_SetExtra(code, index, extra); }
PyObject* ff_type_dict(PyTypeObject* type) {
  Py_XINCREF(type->tp_dict);
  return type->tp_dict;
}
#endif

PyObject* ff_weakref_target(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* target = NULL;
  if (PyWeakref_GetRef(ref, &target) < 0) PyErr_Clear();
  return target;
#else
  PyObject* target = PyWeakref_GetObject(ref);  // borrowed; None once dead
  if (target == NULL) {
    PyErr_Clear();
    return NULL;
  }
  if (target == Py_None) return NULL;
  Py_INCREF(target);
  return target;
#endif
}

int ff_frame_evaluator_pops(void) { return PY_VERSION_HEX >= 0x030C0000; }

#if FF_FRAMES_SUPPORTED

#if PY_VERSION_HEX >= 0x030C0000
#define FF_FRAME_FUNC(f) ((f)->f_funcobj)
#else
#define FF_FRAME_FUNC(f) ((PyObject*)(f)->f_func)
#endif
#if PY_VERSION_HEX >= 0x030D0000
#define FF_FRAME_CODE(f) _PyFrame_GetCode(f)  // 3.13: f_executable (a code object here)
// A fresh 3.13 frame points at its first instruction (LASTI 0), not before it.
#define FF_FRAME_STARTED(f, code) (_PyInterpreterFrame_LASTI(f) > (code)->_co_firsttraceable)
#else
#define FF_FRAME_CODE(f) ((f)->f_code)
// A fresh 3.11/3.12 frame points before its first instruction (LASTI -1).
#define FF_FRAME_STARTED(f, code) (_PyInterpreterFrame_LASTI(f) >= (code)->_co_firsttraceable)
#endif

int ff_frame_inspect(PyThreadState* tstate, struct _PyInterpreterFrame* frame, int throwflag, ff_frame_info* out) {
  (void)tstate;
  if (throwflag || PyErr_Occurred()) return 0;
  if (frame->owner != FRAME_OWNED_BY_THREAD) return 0;
  if (frame->frame_obj != NULL || frame->f_locals != NULL) return 0;
#if PY_VERSION_HEX >= 0x030D0000
  if (!PyCode_Check(frame->f_executable)) return 0;
#endif
  PyCodeObject* code = FF_FRAME_CODE(frame);
  if (!(code->co_flags & CO_OPTIMIZED)) return 0;
  if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) return 0;
  // A fresh frame has not passed its first RESUME. A later LASTI means something resumed a started
  // frame; it must run natively.
  if (FF_FRAME_STARTED(frame, code)) return 0;
  PyObject* func = FF_FRAME_FUNC(frame);
  if (func == NULL || !PyFunction_Check(func)) return 0;
  out->code = code;
  out->func = func;
  out->globals = frame->f_globals;
  out->builtins = frame->f_builtins;
  out->closure = ((PyFunctionObject*)func)->func_closure;
  out->localsplus = frame->localsplus;
  out->nlocalsplus = code->co_nlocalsplus;
  return 1;
}

void ff_frame_release(PyThreadState* tstate, struct _PyInterpreterFrame* frame) {
#if PY_VERSION_HEX >= 0x030D0000
  // 3.13 exports what its evaluator does on return: clear (moving a still-referenced frame object's
  // data into it), drop the code, pop.
  _PyEval_FrameClearAndPop(tstate, frame);
#elif PY_VERSION_HEX >= 0x030C0000
  // What the 3.12 evaluator does on return: clear the frame (its own references), drop the code,
  // pop the frame off the data stack. The frame was never linked into the frame chain, so nothing
  // else can see it. ff_frame_inspect refused frames with a frame object, and nothing creates one
  // for an unlinked frame, so there is no frame object to hand the data to.
  PyFrameObject* fobj = frame->frame_obj;
  frame->frame_obj = NULL;
  Py_XDECREF(fobj);
  for (int i = 0; i < frame->stacktop; i++) Py_XDECREF(frame->localsplus[i]);
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  // Pop. The frame is the top of the data stack (everything pushed above it has been popped).
  PyObject** base = (PyObject**)frame;
  _PyStackChunk* chunk = tstate->datastack_chunk;
  if (base == &chunk->data[0]) {
    // The frame was the first of its chunk: free the chunk and go back to the previous one (the
    // root chunk is never freed, as a frame is never the first entry of the root chunk).
    _PyStackChunk* previous = chunk->previous;
    tstate->datastack_top = &previous->data[previous->top];
    tstate->datastack_chunk = previous;
    tstate->datastack_limit = (PyObject**)(((char*)previous) + previous->size);
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    if (arena.free) arena.free(arena.ctx, chunk, chunk->size);
  } else {
    tstate->datastack_top = base;
  }
#else
  (void)tstate;
  (void)frame;
#endif
}

#else  // !FF_FRAMES_SUPPORTED

int ff_frame_inspect(PyThreadState* tstate, struct _PyInterpreterFrame* frame, int throwflag, ff_frame_info* out) {
  (void)tstate;
  (void)frame;
  (void)throwflag;
  (void)out;
  return 0;
}
void ff_frame_release(PyThreadState* tstate, struct _PyInterpreterFrame* frame) {
  (void)tstate;
  (void)frame;
}

#endif
