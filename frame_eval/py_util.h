// Small helpers for raw CPython code in frame_eval/: an owning handle and cold-path printing.
#pragma once

#include <Python.h>

#include <string>

#include "frame_eval/capture.h"

namespace ff {

// PyRef (an owning handle) lives in frame_eval/capture.h.

// repr(o), shortened to `max_len` characters; never raises (errors print as <repr failed>).
std::string py_short_repr(PyObject* o, size_t max_len = 80);
// "torch.Tensor", "builtins.int": the qualified name of a type (or of type(o) if o is not a type).
std::string py_type_name(PyObject* o);
// The current Python exception as "TypeName: message", cleared. Empty if none is set.
std::string fetch_py_error_text();

}  // namespace ff
