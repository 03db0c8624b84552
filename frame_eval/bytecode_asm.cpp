// Decoding co_code into a Bytecode, encoding it back, stack depth analysis, code construction.
#include <algorithm>
#include <deque>

#include "frame_eval/bytecode.h"
#include "frame_eval/opcodes.h"
#include "frame_eval/py_util.h"
#include "src/base/errors.h"

namespace ff::bc {

namespace {

std::string bytes_attr(PyObject* code, const char* name) {
  PyRef b = PyRef::steal(PyObject_GetAttrString(code, name));
  FF_CHECK(b.get() && PyBytes_Check(b.get()), std::string("code object has no bytes ") + name);
  return std::string(PyBytes_AS_STRING(b.get()), PyBytes_GET_SIZE(b.get()));
}

int ext_count(int arg) { return arg > 0xFFFFFF ? 3 : arg > 0xFFFF ? 2
                                                 : arg > 0xFF     ? 1
                                                                  : 0; }

std::string op_text(int op) {
  const char* n = opname(op);
  return n ? std::string(n) : "opcode " + std::to_string(op);
}

}  // namespace

Bytecode decode(PyObject* code) {
  FF_CHECK(PyCode_Check(code), "decode expects a code object");
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  std::string raw = bytes_attr(code, "co_code");
  FF_CHECK(raw.size() % 2 == 0, "co_code has an odd length");
  const int units = static_cast<int>(raw.size() / 2);
  std::vector<int> unit_lines = parse_line_table(bytes_attr(code, "co_linetable"), co->co_firstlineno);
  FF_CHECK(static_cast<int>(unit_lines.size()) >= units, "line table covers fewer units than co_code");

  Bytecode bc;
  std::vector<int> index_at(units + 1, -1);  // code unit -> instruction starting there
  std::vector<int> next_unit;
  const int ext_op = extended_arg_opcode();
  int i = 0;
  while (i < units) {
    int start = i, arg = 0, prefixes = 0;
    int op = static_cast<unsigned char>(raw[2 * i]);
    while (op == ext_op) {
      arg = (arg | static_cast<unsigned char>(raw[2 * i + 1])) << 8;
      FF_CHECK(++prefixes <= 3 && ++i < units, "more than three EXTENDED_ARG prefixes or a trailing one");
      op = static_cast<unsigned char>(raw[2 * i]);
    }
    arg |= static_cast<unsigned char>(raw[2 * i + 1]);
    FF_CHECK(opname(op) != nullptr, "unknown " + op_text(op) + " at offset " + std::to_string(2 * i));
    FF_CHECK(op != 0, "CACHE unit where an instruction was expected at offset " + std::to_string(2 * i));
    Instr in;
    in.opcode = op, in.arg = arg, in.offset = start, in.line = unit_lines[i];
    index_at[start] = static_cast<int>(bc.instrs.size());
    int first_half = 0, second_half = 0;
    if (split_pair(op, &first_half, &second_half)) {
      // 3.13's pairs (LOAD_FAST_LOAD_FAST ...) pack two 4-bit slots: decoded as two instructions,
      // so that liveness sees both slots and remapped slots may exceed 15. Both keep the offset;
      // only the first is a jump or resume target.
      Instr second = in;
      in.opcode = first_half, in.arg = arg >> 4;
      second.opcode = second_half, second.arg = arg & 15, second.paired = true;
      bc.instrs.push_back(in);
      bc.instrs.push_back(second);
      next_unit.push_back(i + 1);
    } else {
      bc.instrs.push_back(in);
    }
    i += 1 + cache_count(op);
    FF_CHECK(i <= units, op_text(op) + " at the end of co_code is missing its CACHE units");
    next_unit.push_back(i);
  }
  index_at[units] = static_cast<int>(bc.instrs.size());

  auto instr_at = [&](int unit, const std::string& what) {
    FF_CHECK(unit >= 0 && unit < units && index_at[unit] >= 0,
             what + " points at code unit " + std::to_string(unit) + ", which does not start an instruction");
    return index_at[unit];
  };
  for (size_t k = 0; k < bc.instrs.size(); ++k) {
    Instr& in = bc.instrs[k];
    if (!is_jump(in.opcode)) continue;
    int next = next_unit[k];
    int t = is_backward_jump(in.opcode) ? next - in.arg : next + in.arg;
    in.target = instr_at(t, op_text(in.opcode) + " at offset " + std::to_string(2 * in.offset));
  }
  for (const RawExcEntry& r : parse_exception_table(bytes_attr(code, "co_exceptiontable"))) {
    ExcEntry e;
    e.start = instr_at(r.start, "an exception-table range start");
    int end_unit = r.start + r.length;  // exclusive
    FF_CHECK(end_unit <= units && index_at[end_unit] >= 0,
             "an exception-table range ends at code unit " + std::to_string(end_unit) + ", not an instruction boundary");
    e.end = index_at[end_unit] - 1;
    e.target = instr_at(r.target, "an exception-table handler");
    e.depth = r.depth, e.lasti = r.lasti;
    bc.exc.push_back(e);
  }
  return bc;
}

Encoded encode(const Bytecode& bc, int firstlineno) {
  const size_t n = bc.instrs.size();
  FF_CHECK(n > 0, "encoding an empty instruction list");
  const int ext_op = extended_arg_opcode();
  std::vector<int> args(n), ext(n), size(n), offset(n + 1);
  for (size_t k = 0; k < n; ++k) {
    args[k] = bc.instrs[k].arg;
    ext[k] = is_jump(bc.instrs[k].opcode) ? 0 : ext_count(args[k]);
  }
  // 3.13 pairs decode() split: pair_op[k] is the fused opcode for instructions k-1 and k, or -1.
  std::vector<int> pair_op(n, -1);
  std::vector<bool> boundary(n + 1, false);  // an instruction something jumps to or a range starts at
  for (const Instr& in : bc.instrs)
    if (in.target >= 0) boundary[static_cast<size_t>(in.target)] = true;
  for (const ExcEntry& e : bc.exc) boundary[e.start] = boundary[e.end + 1] = boundary[e.target] = true;
  for (size_t k = 1; k < n; ++k) {
    const Instr &a = bc.instrs[k - 1], &b = bc.instrs[k];
    if (b.paired && !boundary[k] && pair_op[k - 1] < 0 && a.arg < 16 && b.arg < 16)
      pair_op[k] = fused_pair(a.opcode, b.opcode);
  }
  // Jump arguments depend on offsets, which depend on the EXTENDED_ARG prefixes of every jump:
  // iterate to a fixed point. Prefix counts only grow (a leading EXTENDED_ARG 0 is valid), so this
  // cannot oscillate and ends within a few rounds.
  for (int round = 0;; ++round) {
    FF_CHECK(round < 16, "EXTENDED_ARG fix-point did not converge");
    for (size_t k = 0; k < n; ++k) size[k] = pair_op[k] >= 0 ? 0 : ext[k] + 1 + cache_count(bc.instrs[k].opcode);
    offset[0] = 0;
    for (size_t k = 0; k < n; ++k) offset[k + 1] = offset[k] + size[k];
    bool changed = false;
    for (size_t k = 0; k < n; ++k) {
      const Instr& in = bc.instrs[k];
      if (!is_jump(in.opcode)) continue;
      FF_CHECK(in.target >= 0 && static_cast<size_t>(in.target) < n, op_text(in.opcode) + " without a target");
      int next = offset[k + 1], t = offset[in.target];
      int a = is_backward_jump(in.opcode) ? next - t : t - next;
      FF_CHECK(a >= 0, op_text(in.opcode) + " at instruction " + std::to_string(k) + " jumps the wrong way");
      args[k] = a;
      if (ext_count(a) > ext[k]) ext[k] = ext_count(a), changed = true;
    }
    if (!changed) break;
  }
  Encoded out;
  out.code.reserve(2 * offset[n]);
  for (size_t k = 0; k < n; ++k) {
    if (pair_op[k] >= 0) continue;  // written with the instruction before
    int op = bc.instrs[k].opcode, a = args[k];
    if (k + 1 < n && pair_op[k + 1] >= 0) op = pair_op[k + 1], a = (a << 4) | args[k + 1];
    for (int e = ext[k]; e >= 1; --e) out.code.push_back(static_cast<char>(ext_op)), out.code.push_back(static_cast<char>((a >> (8 * e)) & 0xFF));
    out.code.push_back(static_cast<char>(op));
    out.code.push_back(static_cast<char>(a & 0xFF));
    for (int c = 0; c < cache_count(op); ++c) out.code.push_back(0), out.code.push_back(0);
  }
  std::vector<RawExcEntry> raw;
  for (const ExcEntry& e : bc.exc) {
    FF_CHECK(e.start <= e.end && e.end < static_cast<int>(n) && e.target >= 0 && e.target < static_cast<int>(n),
             "exception-table entry outside the code");
    raw.push_back({offset[e.start], offset[e.end + 1] - offset[e.start], offset[e.target], e.depth, e.lasti});
  }
  out.exceptiontable = write_exception_table(raw);
  std::vector<int> lines, units;
  for (size_t k = 0; k < n; ++k)
    if (size[k] > 0) lines.push_back(bc.instrs[k].line), units.push_back(size[k]);
  out.linetable = write_line_table(firstlineno, lines, units);
  out.stacksize = compute_stacksize(bc);
  return out;
}

int compute_stacksize(const Bytecode& bc, std::vector<int>* depths) {
  const int n = static_cast<int>(bc.instrs.size());
  std::vector<int> depth(n, -1);
  std::vector<std::vector<const ExcEntry*>> covering(n);
  for (const ExcEntry& e : bc.exc)
    for (int k = e.start; k <= e.end && k < n; ++k) covering[k].push_back(&e);
  int maxdepth = 0;
  std::deque<int> work;
  auto reach = [&](int from, int k, int d) {
    auto where = [&] {
      return op_text(bc.instrs[from].opcode) + " (instruction " + std::to_string(from) + ", offset " +
             std::to_string(2 * std::max(bc.instrs[from].offset, 0)) + ")";
    };
    FF_CHECK(d >= 0, "stack depth becomes negative after " + where());
    FF_CHECK(k < n, "execution falls off the end of the code after " + where());
    maxdepth = std::max(maxdepth, d);
    if (depth[k] == -1) {
      depth[k] = d;
      work.push_back(k);
    } else {
      FF_CHECK(depth[k] == d, "stack depth " + std::to_string(d) + " from " + where() + " disagrees with depth " +
                                  std::to_string(depth[k]) + " at instruction " + std::to_string(k));
    }
  };
  if (n == 0) return 0;
  depth[0] = 0;
  work.push_back(0);
  while (!work.empty()) {
    int k = work.front();
    work.pop_front();
    const Instr& in = bc.instrs[k];
    int d = depth[k];
    for (const ExcEntry* e : covering[k]) {
      FF_CHECK(e->depth <= d, "exception-table depth " + std::to_string(e->depth) + " exceeds the stack depth " +
                                  std::to_string(d) + " at instruction " + std::to_string(k));
      reach(k, e->target, e->depth + (e->lasti ? 1 : 0) + 1);
    }
    if (is_jump(in.opcode)) reach(k, in.target, d + stack_effect(in.opcode, in.arg, true));
    if (!is_terminator(in.opcode)) reach(k, k + 1, d + stack_effect(in.opcode, in.arg, false));
  }
  if (depths) *depths = std::move(depth);
  return maxdepth;
}

PyObject* assemble(PyObject* base, const Bytecode& bc, const CodeFields& f) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(base);
  int firstlineno = f.firstlineno >= 0 ? f.firstlineno : co->co_firstlineno;
  Encoded enc = encode(bc, firstlineno);
  PyRef kw = PyRef::steal(PyDict_New());
  auto set = [&](const char* key, PyObject* v) {  // steals v
    FF_CHECK(v, std::string("building ") + key);
    PyDict_SetItemString(kw.get(), key, v);
    Py_DECREF(v);
  };
  auto set_borrowed = [&](const char* key, PyObject* v) {
    if (v) PyDict_SetItemString(kw.get(), key, v);
  };
  set("co_code", PyBytes_FromStringAndSize(enc.code.data(), enc.code.size()));
  set("co_linetable", PyBytes_FromStringAndSize(enc.linetable.data(), enc.linetable.size()));
  set("co_exceptiontable", PyBytes_FromStringAndSize(enc.exceptiontable.data(), enc.exceptiontable.size()));
  set("co_stacksize", PyLong_FromLong(enc.stacksize));
  set("co_firstlineno", PyLong_FromLong(firstlineno));
  set_borrowed("co_consts", f.consts);
  set_borrowed("co_names", f.names);
  set_borrowed("co_varnames", f.varnames);
  set_borrowed("co_freevars", f.freevars);
  set_borrowed("co_cellvars", f.cellvars);
  if (f.argcount >= 0) set("co_argcount", PyLong_FromLong(f.argcount));
  if (f.posonlyargcount >= 0) set("co_posonlyargcount", PyLong_FromLong(f.posonlyargcount));
  if (f.kwonlyargcount >= 0) set("co_kwonlyargcount", PyLong_FromLong(f.kwonlyargcount));
  if (f.nlocals >= 0) set("co_nlocals", PyLong_FromLong(f.nlocals));
  if (f.flags >= 0) set("co_flags", PyLong_FromLong(f.flags));
  if (!f.name.empty()) set("co_name", PyUnicode_FromString(f.name.c_str()));
  if (!f.qualname.empty()) set("co_qualname", PyUnicode_FromString(f.qualname.c_str()));
  PyRef replace = PyRef::steal(PyObject_GetAttrString(base, "replace"));
  FF_CHECK(replace.get(), "code.replace missing");
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyObject* out = PyObject_Call(replace.get(), empty.get(), kw.get());
  if (!out) FF_CHECK(false, "code.replace failed: " + fetch_py_error_text());
  try {
    verify_code(out);
  } catch (...) {
    Py_DECREF(out);
    throw;
  }
  return out;
}

}  // namespace ff::bc
