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
//
// Zero-argument super() (CPython's super_init_without_args) takes `self` from the running frame's
// localsplus slot 0 (dereferenced when that slot is a cell, which the frame's code says by the
// slot's kind) and needs co_argcount >= 1. For a code with a __class__ free variable the first
// argument of the generated code is that value, in front of the stack values (see SelfSlot);
// __class__ stays a free variable bound to the frame's own cell.
#pragma once

#include <Python.h>

#include <map>
#include <string>
#include <vector>

#include "frame_eval/bytecode.h"

namespace ff::bc {

// How generated code for `code` keeps the value zero-argument super() reads in slot 0.
//   None:  no __class__ free variable; the layout above.
//   Local: the first local is a plain local: it comes first (before the stack values) under its
//          own name and is always passed (live_locals_at reports it live everywhere), since
//          super() reads it without any LOAD_FAST for the liveness analysis to see.
//   Cell:  the first local is a cell (an inner function captures `self`): the cell stays in the
//          closure, and its contents come first in a plain argument named kSelfCopy.
enum class SelfSlot { None,
                      Local,
                      Cell };
constexpr const char* kSelfCopy = "__ff_self";
// Throws Unsupported when slot 0 cannot be kept equal to what the original frame would hold:
// no positional argument (super() raises there), the first local deleted, or (Cell) the cell
// written after the frame made it (by this code or by a nested function's nonlocal).
SelfSlot self_slot(PyObject* code);

// `null_slots`: stack positions (0 = bottom) that hold NULL (LOAD_GLOBAL/LOAD_ATTR's NULL, PUSH_NULL):
// NULL cannot be an argument, so those positions get no __stack argument and the prologue pushes
// NULL there.
// `body_shift` (optional) receives the number of prologue instructions: instruction i of `code` is
// instruction i + body_shift of the result.
PyObject* make_resume(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live_locals,
                      const std::vector<int>& null_slots = {}, int* body_shift = nullptr);

// The plain locals (not cells or frees) that may be read before being written on some path from
// code unit `unit` (exception edges included): what a resume function at `unit` must receive.
// In co_varnames order. With SelfSlot::Local the first local is always included.
std::vector<std::string> live_locals_at(PyObject* code, int unit);

// ---- shared with the graph-break stubs (bytecode_stub.cpp) ----

// A resume function before assembly: the prologue (`shift` instructions) then the original body.
struct ResumeBuild {
  Bytecode orig;                  // the original code, decoded
  std::vector<int> depths;        // stack depth before each original instruction (-1: unreachable)
  Bytecode out;
  std::vector<std::string> new_vars, new_frees;
  std::map<std::string, int> index_of;  // localsplus index in the result
  int argcount = 0, shift = 0, at = 0, line = -1;
  SelfSlot self = SelfSlot::None;
  std::string first_local;        // the code's first local (co_varnames[0]) when self != None
};
// `extra_vars`: plain locals appended after the code's own (scratch slots of generated code).
ResumeBuild build_resume(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live,
                         const std::vector<int>& null_slots, const std::vector<std::string>& extra_vars);
// `consts`: replacement co_consts (borrowed) or null. Named `<prefix><name>_at_<line>`, or as
// `code` when `prefix` is empty.
PyObject* assemble_resume(PyObject* code, const ResumeBuild& rb, const std::string& prefix, PyObject* consts);
std::vector<std::string> str_tuple(PyObject* code, const char* attr);
PyObject* to_tuple(const std::vector<std::string>& v);
int op(const char* name);  // this version's opcode number; InternalError if it has none

}  // namespace ff::bc
