// Graph-break stubs: the code object that runs one unsupported instruction natively.
//
// make_break_stub(code, unit, ...) is a resume function of `code` entered at `unit` (the first
// instruction of the break group: KW_NAMES?/PRECALL?/CALL, or a single instruction) whose break
// instruction's successor edges (fallthrough, and the jump target of a conditional jump) lead to
// appended tails instead of the rest of the body. A tail returns
//     (marker, successor_id, stack values non-NULL bottom first..., live locals at the successor...)
// (for a code with a __class__ free variable, super()'s self first: the successor's arguments in
// the order of its resume function, see SelfSlot in bytecode_resume.h)
// so the hook continues with the resume function of that successor without nesting Python frames.
// NULL stack entries are consumed without touching them (a call of `tuple` uses the NULL as its
// callable's NULL). The rest of the original body stays in place: an exception raised by the break
// instruction reaches the user's handler, and from there the code runs natively to its end (a flag
// set on that path makes the tails fall back to the original successors).
#pragma once

#include <Python.h>

#include <string>
#include <vector>

namespace ff::bc {

struct StubSuccessor {
  int unit = 0;                     // code unit of the successor in the original code
  int depth = 0;                    // stack depth there
  std::vector<int> null_slots;      // stack positions that hold NULL
  std::vector<std::string> live;    // live locals passed (subset of the stub's)
};

struct BreakStub {
  PyObject* code = nullptr;         // new reference
  std::vector<StubSuccessor> successors;  // index = successor_id in the tail's tuple
};

// `marker`: the private object the tails return first (borrowed; kept in co_consts).
// Throws Unsupported when the break instruction's successor layout cannot be known statically
// (it may push a NULL, or it does not fall through nor jump), InternalError on a bug.
BreakStub make_break_stub(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live,
                          const std::vector<int>& null_slots, PyObject* marker);

}  // namespace ff::bc
