// Small helpers for raw CPython code in frame_eval/: an owning handle and cold-path printing.
#pragma once

#include <Python.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "frame_eval/capture.h"

namespace ff {

// PyRef (an owning handle) lives in frame_eval/capture.h.

// repr(o), shortened to `max_len` characters; never raises (errors print as <repr failed>).
std::string py_short_repr(PyObject* o, size_t max_len = 80);
// "torch.Tensor", "builtins.int": the qualified name of a type (or of type(o) if o is not a type).
std::string py_type_name(PyObject* o);
// The current Python exception as "TypeName: message", cleared. Empty if none is set.
std::string fetch_py_error_text();

// What a builtin iterator (of a list, tuple, range, dict or set, or a reversed list) would still
// yield, as a new tuple, read through its __reduce__ without consuming it. Null (no error set) for
// any other object.
PyObject* iterator_rest(PyObject* it);

// fn.__qualname__ (else __name__, else its type's name), for messages.
std::string qualname(PyObject* fn);
// fn.__module__ ("" if none; a builtin's module is the module object it is bound to).
std::string module_of(PyObject* fn);

// Whether Python function `fn`'s qualified name is one of `names` and its module one of `modules`.
bool function_named(PyObject* fn, std::initializer_list<std::string_view> names, std::initializer_list<std::string_view> modules);

// Whether `fn` is a wrapper torch.compiler.disable / torch._dynamo.disable made (it carries
// `_torchdynamo_disable`): the function runs natively, and so does everything it calls.
bool torch_disable_marked(PyObject* fn);
// The code of the function a torch.compiler.disable(fn, recursive=False) wrapper calls (borrowed,
// the wrapper holds the function), or null when `fn` is no such wrapper.
PyObject* torch_nonrecursive_disable_code(PyObject* fn);
// Whether `fn` is the wrapper torch.compile made around a function (it carries
// `_torchdynamo_orig_callable`, and is not a disable wrapper): torch compiles its calls.
bool torch_compile_wrapper(PyObject* fn);

// Whether torch.compiler.assume_constant_result / framefuse.compiler.assume_constant_result marked
// `fn` (it carries `_dynamo_marked_constant`): its result is taken as a constant while tracing.
bool marked_constant_result(PyObject* fn);

// Whether framefuse.disable(fn, recursive=False) marked `fn` (`_framefuse_disable_frame`): its own
// frame runs natively (a call from compiled code breaks the graph), the frames it calls compile.
bool framefuse_frame_disabled(PyObject* fn);

// substitute_in_graph's table (framefuse.compiler.substitute_in_graph fills it through
// `_C._polyfills()`): a dict from id(original) to (original, traceable, can_constant_fold_through).
// Borrowed; made on first use.
PyObject* polyfill_table();
// What replaces a call of `fn` while tracing: the traceable function registered for it with
// framefuse.compiler.substitute_in_graph (borrowed; *fold says whether a call with constant
// arguments may run the original now), or null.
PyObject* framefuse_polyfill(PyObject* fn, bool* fold);
// The traceable function the user registered for `fn` with torch.compiler.substitute_in_graph, or
// null (torch's own polyfills are not used); new reference. Read only once torch._dynamo is imported
// (this never imports it).
PyObject* torch_polyfill(PyObject* fn);

}  // namespace ff
