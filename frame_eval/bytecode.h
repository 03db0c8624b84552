// The bytecode assembler: CPython 3.11/3.12 code objects as editable instruction lists and back.
//
// Decoding folds EXTENDED_ARG prefixes and inline CACHE units into one Instr each, turns relative
// jumps and exception-table ranges into instruction indices, and records each instruction's line.
// Encoding recomputes jump arguments and EXTENDED_ARG prefixes to a fixed point, writes CACHE units
// (counts from frame_eval/opcodes_31x.cpp, the interpreter's table), the exception table, a line table
// of code-13 entries covering every code unit, and co_stacksize from a worklist over every edge.
// Every code object built here passes verify_code() before it is returned: a generated code object
// that CPython would run into undefined behaviour is an InternalError, never executed.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

namespace ff::bc {

struct Instr {
  int opcode = 0;
  int arg = 0;         // for jumps: recomputed from `target` on encode
  int target = -1;     // jumps: index of the target instruction in Bytecode::instrs
  int line = -1;       // source line, -1 = no location
  int offset = -1;     // code-unit offset of the first prefix when decoded (informational)
  // The second half of a 3.13 pair instruction (LOAD_FAST_LOAD_FAST ...), which decode() splits in
  // two: encode() fuses it with the instruction before again where both slots still fit in 4 bits
  // and nothing jumps between them (so a round trip reproduces co_code).
  bool paired = false;
};

// One exception-table range over instructions [start, end] (indices, inclusive).
struct ExcEntry {
  int start = 0;
  int end = 0;
  int target = 0;
  int depth = 0;
  bool lasti = false;
};

struct Bytecode {
  std::vector<Instr> instrs;
  std::vector<ExcEntry> exc;
};

// Per-version opcode facts (from the interpreter's opcode table plus SEND, which it does not run).
const char* opname(int op);  // "<N>" style name for unknown opcodes is returned as nullptr
int cache_count(int op);
bool is_jump(int op);
bool is_backward_jump(int op);
bool is_unconditional_jump(int op);
bool is_terminator(int op);  // no fallthrough: returns, raises, unconditional jumps
int stack_effect(int op, int arg, bool jump);

// Raw byte-level helpers (units are 2-byte code units).
struct RawExcEntry {
  int start, length, target, depth;
  bool lasti;
};
std::vector<RawExcEntry> parse_exception_table(const std::string& bytes);
std::string write_exception_table(const std::vector<RawExcEntry>& entries);
// Line table of code-13 (or code-15 for line -1) entries; `units[i]` code units carry `lines[i]`.
std::string write_line_table(int firstlineno, const std::vector<int>& lines, const std::vector<int>& units);
// The line of every code unit from a line table (-1: no location); throws on a malformed table.
std::vector<int> parse_line_table(const std::string& table, int firstlineno);

// Decode `code` (a PyCodeObject) from co_code. Throws InternalError on anything malformed
// (jump into caches or prefixes, unknown opcode, exception range not on instruction boundaries).
Bytecode decode(PyObject* code);

struct Encoded {
  std::string code;
  std::string exceptiontable;
  std::string linetable;
  int stacksize = 0;
};
// `firstlineno` is the line the line table is relative to.
Encoded encode(const Bytecode& bc, int firstlineno);

// Max stack depth over all paths (jumps, fallthrough, exception edges). Throws InternalError with
// the instruction on a negative depth, inconsistent depths at a merge point, or falling off the end.
// `depths` (optional) receives the depth before each instruction, -1 where unreachable.
int compute_stacksize(const Bytecode& bc, std::vector<int>* depths = nullptr);

// Replacement fields for constructing a code object from `base` (code.replace). Empty optional
// fields keep the base's value.
struct CodeFields {
  PyObject* consts = nullptr;      // borrowed; nullptr keeps base
  PyObject* names = nullptr;
  PyObject* varnames = nullptr;
  PyObject* freevars = nullptr;
  PyObject* cellvars = nullptr;
  int argcount = -1, posonlyargcount = -1, kwonlyargcount = -1, nlocals = -1, flags = -1;
  int firstlineno = -1;
  std::string name, qualname;      // empty keeps base
};
// A new code object (new reference) from `bc`, derived from `base`, verified before it is returned.
PyObject* assemble(PyObject* base, const Bytecode& bc, const CodeFields& fields = {});

// Checks a code object before it runs; throws InternalError naming the code, offset and rule.
void verify_code(PyObject* code);

// `dis`-like text of a code object (offsets in bytes, jump targets, exception table).
std::string disassemble(PyObject* code);

}  // namespace ff::bc
