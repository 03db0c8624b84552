// Resume functions: the code object that continues a frame after a graph break.
//
// make_resume(code, unit, stack_depth, live_locals) returns a code object whose arguments are the
// non-NULL values of the `stack_depth` on the stack at code unit `unit` (bottom first, named
// __stack<position>) followed
// by the live locals (in the given order). Every cell and free variable of `code` becomes a free
// variable of the resume function, in the order co_cellvars + co_freevars, so the caller passes the
// frame's cells by identity as the closure. The body is the original code; the prologue
// (COPY_FREE_VARS, RESUME, LOAD_FAST of each stack argument, JUMP_FORWARD) enters it at `unit`.
// The result is verified; generators and coroutines are refused (InternalError).
#pragma once

#include <Python.h>

#include <string>
#include <vector>

namespace ff::bc {

// `null_slots`: stack positions (0 = bottom) that hold NULL (LOAD_GLOBAL/LOAD_ATTR's NULL, PUSH_NULL):
// NULL cannot be an argument, so those positions get no __stack argument and the prologue pushes
// NULL there.
PyObject* make_resume(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live_locals,
                      const std::vector<int>& null_slots = {});

// The plain locals (not cells or frees) that may be read before being written on some path from
// code unit `unit` (exception edges included): what a resume function at `unit` must receive.
// In co_varnames order.
std::vector<std::string> live_locals_at(PyObject* code, int unit);

}  // namespace ff::bc
