// The verifier run on every generated code object, and the disassembler behind the `bytecode` log.
#include <sstream>

#include "frame_eval/bytecode.h"
#include "frame_eval/opcodes.h"
#include "src/base/errors.h"

namespace ff::bc {

namespace {

std::string code_name(PyObject* code) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  const char* name = PyUnicode_AsUTF8(co->co_qualname);
  const char* file = PyUnicode_AsUTF8(co->co_filename);
  if (!name || !file) PyErr_Clear();
  return std::string(name ? name : "?") + " (" + (file ? file : "?") + ":" + std::to_string(co->co_firstlineno) + ")";
}

Py_ssize_t tuple_len(PyObject* code, const char* attr) {
  PyObject* t = PyObject_GetAttrString(code, attr);
  if (!t) {
    PyErr_Clear();
    return 0;
  }
  Py_ssize_t n = PyTuple_Check(t) ? PyTuple_GET_SIZE(t) : 0;
  Py_DECREF(t);
  return n;
}

bool op_is(int op, const char* name) {
  const char* n = opname(op);
  return n && std::string(n) == name;
}

}  // namespace

void verify_code(PyObject* code) {
  FF_CHECK(PyCode_Check(code), "verify_code expects a code object");
  const std::string who = "bytecode verification failed for " + code_name(code) + ": ";
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  Bytecode bc;
  try {
    bc = decode(code);  // rejects jumps into caches/prefixes, ranges off instruction boundaries
  } catch (const InternalError& e) {
    throw InternalError(who + e.what());
  }
  FF_CHECK(!bc.instrs.empty(), who + "empty code");

  // Line table: exactly one location per code unit.
  PyObject* lt = PyObject_GetAttrString(code, "co_linetable");
  PyObject* cc = PyObject_GetAttrString(code, "co_code");
  FF_CHECK(lt && cc, who + "no co_linetable/co_code");
  std::string ltab(PyBytes_AS_STRING(lt), PyBytes_GET_SIZE(lt));
  Py_ssize_t units = PyBytes_GET_SIZE(cc) / 2;
  Py_DECREF(lt), Py_DECREF(cc);
  size_t covered = parse_line_table(ltab, co->co_firstlineno).size();
  if (static_cast<Py_ssize_t>(covered) != units)
    throw InternalError(who + "the line table covers " + std::to_string(covered) + " code units, co_code has " +
                        std::to_string(units));

  // Exception table: sorted, non-overlapping ranges.
  for (size_t k = 1; k < bc.exc.size(); ++k)
    if (bc.exc[k].start <= bc.exc[k - 1].end)
      throw InternalError(who + "exception-table entries " + std::to_string(k - 1) + " and " + std::to_string(k) +
                          " overlap or are out of order");

  // Prologue: MAKE_CELL for every cell, COPY_FREE_VARS for the free variables, then RESUME.
  Py_ssize_t ncells = tuple_len(code, "co_cellvars"), nfrees = tuple_len(code, "co_freevars");
  Py_ssize_t made = 0;
  bool copied = nfrees == 0, resumed = false;
  for (const Instr& in : bc.instrs) {
    if (op_is(in.opcode, "MAKE_CELL")) ++made;
    else if (op_is(in.opcode, "COPY_FREE_VARS")) copied = copied || in.arg == nfrees;
    else if (op_is(in.opcode, "RESUME")) {
      resumed = true;
      break;
    }
  }
  if (!resumed) throw InternalError(who + "no RESUME instruction in the prologue");
  if (made != ncells)
    throw InternalError(who + std::to_string(ncells) + " cell variables but " + std::to_string(made) +
                        " MAKE_CELL instructions before RESUME");
  if (!copied)
    throw InternalError(who + std::to_string(nfrees) + " free variables but no COPY_FREE_VARS " +
                        std::to_string(nfrees) + " before RESUME");

  // Stack depth on every path, never negative, and within co_stacksize.
  int need;
  try {
    need = compute_stacksize(bc);
  } catch (const InternalError& e) {
    throw InternalError(who + e.what());
  }
  if (need > co->co_stacksize)
    throw InternalError(who + "the stack reaches depth " + std::to_string(need) + " but co_stacksize is " +
                        std::to_string(co->co_stacksize));
}

std::string disassemble(PyObject* code) {
  Bytecode bc = decode(code);
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  // Byte offsets of each instruction's opcode unit and of its first prefix (jump targets).
  std::vector<bool> is_target(bc.instrs.size(), false);
  for (const Instr& in : bc.instrs)
    if (in.target >= 0) is_target[in.target] = true;
  for (const ExcEntry& e : bc.exc) is_target[e.target] = true;
  auto argrepr = [&](const Instr& in) -> std::string {
    const char* n = opname(in.opcode);
    std::string name = n ? n : "";
    PyObject* tup = nullptr;
    int idx = in.arg;
    if (name == "LOAD_CONST" || name == "RETURN_CONST" || name == "KW_NAMES") tup = co->co_consts;
    else if (name == "LOAD_GLOBAL") tup = co->co_names, idx = in.arg >> 1;
    else if (name == "LOAD_ATTR" && load_attr_method_bit()) tup = co->co_names, idx = in.arg >> 1;
    else if (name == "LOAD_SUPER_ATTR") tup = co->co_names, idx = in.arg >> 2;
    else if (name == "LOAD_ATTR" || name == "LOAD_METHOD") tup = co->co_names;
    else if (name == "STORE_ATTR" || name == "IMPORT_NAME" || name == "IMPORT_FROM" || name == "STORE_GLOBAL" ||
             name == "LOAD_NAME" || name == "STORE_NAME" || name == "DELETE_ATTR")
      tup = co->co_names;
    if (in.target >= 0) return "to " + std::to_string(2 * bc.instrs[in.target].offset);
    if (name.rfind("LOAD_FAST", 0) == 0 || name == "STORE_FAST" || name == "DELETE_FAST" || name == "LOAD_DEREF" ||
        name == "STORE_DEREF" || name == "MAKE_CELL" || name == "LOAD_CLOSURE" || name == "DELETE_DEREF") {
      PyObject* names = PyObject_GetAttrString(code, "co_varnames");
      PyObject* cells = PyObject_GetAttrString(code, "co_cellvars");
      PyObject* frees = PyObject_GetAttrString(code, "co_freevars");
      std::string out;
      if (names && cells && frees) {
        // localsplus order: varnames, cells that are not arguments, frees.
        PyObject* all = PySequence_List(names);
        for (Py_ssize_t k = 0; all && k < PyTuple_GET_SIZE(cells); ++k)
          if (!PySequence_Contains(names, PyTuple_GET_ITEM(cells, k))) PyList_Append(all, PyTuple_GET_ITEM(cells, k));
        for (Py_ssize_t k = 0; all && k < PyTuple_GET_SIZE(frees); ++k) PyList_Append(all, PyTuple_GET_ITEM(frees, k));
        if (all && idx < PyList_GET_SIZE(all)) {
          const char* s = PyUnicode_AsUTF8(PyList_GET_ITEM(all, idx));
          if (s) out = s;
        }
        Py_XDECREF(all);
      }
      Py_XDECREF(names), Py_XDECREF(cells), Py_XDECREF(frees);
      PyErr_Clear();
      return out;
    }
    if (tup && idx < PyTuple_GET_SIZE(tup)) {
      PyObject* r = PyObject_Repr(PyTuple_GET_ITEM(tup, idx));
      std::string s = r && PyUnicode_AsUTF8(r) ? PyUnicode_AsUTF8(r) : "?";
      Py_XDECREF(r);
      PyErr_Clear();
      if (s.size() > 60) s = s.substr(0, 57) + "...";
      return s;
    }
    return "";
  };
  std::ostringstream os;
  os << "Disassembly of " << code_name(code) << ", stacksize " << co->co_stacksize << ":\n";
  int prev_line = -2;
  for (size_t k = 0; k < bc.instrs.size(); ++k) {
    const Instr& in = bc.instrs[k];
    std::string line = in.line != prev_line && in.line >= 0 ? std::to_string(in.line) : "";
    prev_line = in.line;
    std::string off = std::to_string(2 * in.offset);
    os << (line.empty() ? std::string(6, ' ') : line + std::string(line.size() < 6 ? 6 - line.size() : 1, ' '))
       << (is_target[k] ? ">>" : "  ") << std::string(off.size() < 6 ? 6 - off.size() : 1, ' ') << off << ' ';
    std::string name = opname(in.opcode) ? opname(in.opcode) : "<" + std::to_string(in.opcode) + ">";
    os << name;
    bool has_arg = in.opcode >= have_argument();
    if (has_arg) {
      os << std::string(name.size() < 28 ? 28 - name.size() : 1, ' ') << in.arg;
      std::string r = argrepr(in);
      if (!r.empty()) os << " (" << r << ")";
    }
    os << '\n';
  }
  if (!bc.exc.empty()) {
    PyObject* cc = PyObject_GetAttrString(code, "co_code");
    int total_bytes = cc ? static_cast<int>(PyBytes_GET_SIZE(cc)) : 0;
    Py_XDECREF(cc);
    os << "ExceptionTable:\n";
    for (const ExcEntry& e : bc.exc) {
      int end_off = e.end + 1 < static_cast<int>(bc.instrs.size()) ? 2 * bc.instrs[e.end + 1].offset
                                                                   : total_bytes;
      // Like dis: the range's last code unit, inclusive.
      os << "  " << 2 * bc.instrs[e.start].offset << " to " << end_off - 2 << " -> " << 2 * bc.instrs[e.target].offset
         << " [" << e.depth << "]" << (e.lasti ? " lasti" : "") << '\n';
    }
  }
  return os.str();
}

}  // namespace ff::bc
