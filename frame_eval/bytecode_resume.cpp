// Resume functions (see bytecode_resume.h and cpython-frames.md §4.2).
#include "frame_eval/bytecode_resume.h"

#include <map>

#include "frame_eval/bytecode.h"
#include "frame_eval/opcodes.h"
#include "frame_eval/py_util.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff::bc {

std::vector<std::string> str_tuple(PyObject* code, const char* attr) {
  PyRef t = PyRef::steal(PyObject_GetAttrString(code, attr));
  FF_CHECK(t.get() && PyTuple_Check(t.get()), std::string("code object without ") + attr);
  std::vector<std::string> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t.get()); ++i) {
    const char* s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t.get(), i));
    FF_CHECK(s, std::string("non-str name in ") + attr);
    out.emplace_back(s);
  }
  return out;
}

PyObject* to_tuple(const std::vector<std::string>& v) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t, i, PyUnicode_FromString(v[i].c_str()));
  return t;
}

int op(const char* name) {
  for (int o = 1; o < 256; ++o)
    if (opname(o) && std::string(opname(o)) == name) return o;
  FF_CHECK(false, std::string("no opcode ") + name + " in this version");
  return -1;
}

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const std::string& x : v)
    if (x == s) return true;
  return false;
}

// Opcodes whose argument indexes localsplus (3.11/3.12).
bool indexes_localsplus(const std::string& n) {
  return n == "LOAD_FAST" || n == "STORE_FAST" || n == "DELETE_FAST" || n == "LOAD_FAST_CHECK" ||
         n == "LOAD_FAST_AND_CLEAR" || n == "LOAD_DEREF" || n == "STORE_DEREF" || n == "DELETE_DEREF" ||
         n == "LOAD_CLOSURE" || n == "MAKE_CELL" || n == "LOAD_CLASSDEREF" || n == "LOAD_FROM_DICT_OR_DEREF";
}

// The code's first local is a plain local that zero-argument super() may read (SelfSlot::Local).
bool keeps_first_local(PyObject* code) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  if (co->co_argcount < 1 || !contains(str_tuple(code, "co_freevars"), "__class__")) return false;
  return !contains(str_tuple(code, "co_cellvars"), str_tuple(code, "co_varnames")[0]);
}

std::string where(PyObject* code) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  const char* file = PyUnicode_AsUTF8(co->co_filename);
  const char* qual = PyUnicode_AsUTF8(co->co_qualname);
  if (!file || !qual) {
    PyErr_Clear();
    return "<code>";
  }
  return std::string(qual) + " (" + file + ":" + std::to_string(co->co_firstlineno) + ")";
}

// Does a function nested in `code` (at any depth) rebind `name`, a cell of `code` it closes over
// (`nonlocal name` then an assignment or del)?
bool nested_rebinds(PyObject* code, const std::string& name) {
  PyObject* consts = reinterpret_cast<PyCodeObject*>(code)->co_consts;
  for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(consts); ++c) {
    PyObject* inner = PyTuple_GET_ITEM(consts, c);
    if (!PyCode_Check(inner)) continue;
    PyCodeObject* ic = reinterpret_cast<PyCodeObject*>(inner);
    int slot = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ic->co_localsplusnames); ++i) {
      const char* n = PyUnicode_AsUTF8(PyTuple_GET_ITEM(ic->co_localsplusnames, i));
      if (n && name == n && (PyBytes_AS_STRING(ic->co_localspluskinds)[i] & 0x80)) slot = static_cast<int>(i);
    }
    if (slot < 0) continue;  // NB: without it as a free variable, nothing nested deeper sees the cell either
    for (const Instr& in : decode(inner).instrs) {
      const std::string n = opname(in.opcode);
      if ((n == "STORE_DEREF" || n == "DELETE_DEREF") && in.arg == slot) return true;
    }
    if (nested_rebinds(inner, name)) return true;
  }
  return false;
}

}  // namespace

SelfSlot self_slot(PyObject* code) {
  FF_CHECK(PyCode_Check(code), "self_slot expects a code object");
  if (!contains(str_tuple(code, "co_freevars"), "__class__")) return SelfSlot::None;
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  if (co->co_argcount < 1)
    throw Unsupported("zero-argument super() in " + where(code) +
                      " has no positional argument to use as self: the frame is not split at graph breaks");
  const std::string first = str_tuple(code, "co_varnames")[0];
  const bool cell = contains(str_tuple(code, "co_cellvars"), first);
  // NB: an argument that is also a cell keeps its argument's slot: both forms are localsplus slot 0.
  for (const Instr& in : decode(code).instrs) {
    if (in.arg != 0) continue;
    const std::string n = opname(in.opcode);
    if (!cell && n == "DELETE_FAST")
      throw Unsupported("zero-argument super() in " + where(code) + ": its first argument '" + first +
                        "' is deleted, so the frame is not split at graph breaks");
    if (cell && (n == "STORE_DEREF" || n == "DELETE_DEREF"))
      throw Unsupported("zero-argument super() in " + where(code) + ": its first argument '" + first +
                        "' is a closure cell that is reassigned, so the frame is not split at graph breaks");
  }
  if (cell && nested_rebinds(code, first))
    throw Unsupported("zero-argument super() in " + where(code) + ": a nested function rebinds its first argument '" +
                      first + "' (nonlocal), so the frame is not split at graph breaks");
  return cell ? SelfSlot::Cell : SelfSlot::Local;
}

ResumeBuild build_resume(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live,
                         const std::vector<int>& null_slots, const std::vector<std::string>& extra_vars) {
  FF_CHECK(PyCode_Check(code), "make_resume expects a code object");
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  FF_CHECK(!(co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)),
           "resume functions of generators and coroutines are not supported");
  FF_CHECK(stack_depth >= 0, "negative stack depth");
  ResumeBuild rb;
  rb.orig = decode(code);
  const Bytecode& orig = rb.orig;
  int at = -1;
  // NB: the first match: the halves of a split 3.13 pair share an offset.
  for (size_t k = 0; k < orig.instrs.size() && at < 0; ++k)
    if (orig.instrs[k].offset == unit) at = static_cast<int>(k);
  FF_CHECK(at >= 0, "resume offset " + std::to_string(2 * unit) + " is not an instruction boundary");
  rb.at = at;
  std::vector<int>& depths = rb.depths;
  compute_stacksize(orig, &depths);
  FF_CHECK(depths[at] == stack_depth, "the stack holds " + std::to_string(depths[at]) + " values at offset " +
                                          std::to_string(2 * unit) + ", not " + std::to_string(stack_depth));

  // Old localsplus layout: varnames, cells that are not arguments, frees.
  std::vector<std::string> varnames = str_tuple(code, "co_varnames"), cellvars = str_tuple(code, "co_cellvars"),
                           freevars = str_tuple(code, "co_freevars");
  std::vector<std::string> old_plus = varnames;
  for (const std::string& c : cellvars)
    if (!contains(varnames, c)) old_plus.push_back(c);
  for (const std::string& f : freevars) old_plus.push_back(f);

  // New layout: __stack*, live locals, the other plain locals; then every cell and free as a free.
  std::vector<std::string>& new_frees = rb.new_frees;
  new_frees = cellvars;
  new_frees.insert(new_frees.end(), freevars.begin(), freevars.end());
  std::vector<std::string>& new_vars = rb.new_vars;
  std::vector<bool> is_null(stack_depth, false);
  for (int slot : null_slots) {
    FF_CHECK(slot >= 0 && slot < stack_depth, "NULL slot " + std::to_string(slot) + " outside the stack");
    is_null[slot] = true;
  }
  // super()'s self first (see SelfSlot), then the stack values, then the other live locals.
  rb.self = self_slot(code);
  if (rb.self != SelfSlot::None) {
    rb.first_local = varnames[0];
    FF_CHECK(!contains(varnames, kSelfCopy), std::string("a local named ") + kSelfCopy);
    if (rb.self == SelfSlot::Local) {
      FF_CHECK(contains(live, rb.first_local), "the first local '" + rb.first_local + "' is not passed; super() reads it");
      new_vars.push_back(rb.first_local);
    } else {
      new_vars.push_back(kSelfCopy);
    }
  }
  std::vector<int> stack_arg(stack_depth, -1);
  for (int i = 0; i < stack_depth; ++i)
    if (!is_null[i]) stack_arg[i] = static_cast<int>(new_vars.size()), new_vars.push_back("__stack" + std::to_string(i));
  for (const std::string& l : live) {
    if (rb.self == SelfSlot::Local && l == rb.first_local) continue;
    FF_CHECK(contains(varnames, l), "live local '" + l + "' is not a local of the code");
    FF_CHECK(!contains(new_frees, l), "live local '" + l + "' is a cell; cells are passed in the closure");
    FF_CHECK(!contains(new_vars, l), "live local '" + l + "' given twice");
    new_vars.push_back(l);
  }
  const int argcount = static_cast<int>(new_vars.size());
  rb.argcount = argcount;
  for (const std::string& v : varnames)
    if (!contains(new_vars, v) && !contains(new_frees, v)) new_vars.push_back(v);
  for (const std::string& v : extra_vars) new_vars.push_back(v);
  std::map<std::string, int> new_index;
  for (size_t i = 0; i < new_vars.size(); ++i) new_index[new_vars[i]] = static_cast<int>(i);
  for (size_t i = 0; i < new_frees.size(); ++i) new_index[new_frees[i]] = static_cast<int>(new_vars.size() + i);
  rb.index_of = new_index;

  Bytecode& out = rb.out;
  const int line = orig.instrs[at].line;
  rb.line = line;
  auto emit = [&](const char* name, int arg, int target = -1) {
    Instr in;
    in.opcode = op(name), in.arg = arg, in.target = target, in.line = line;
    out.instrs.push_back(in);
  };
  if (!new_frees.empty()) emit("COPY_FREE_VARS", static_cast<int>(new_frees.size()));
  emit("RESUME", 0);
  for (int i = 0; i < stack_depth; ++i) {
    if (is_null[i]) emit("PUSH_NULL", 0);
    else emit("LOAD_FAST", stack_arg[i]);
  }
  const int shift = static_cast<int>(out.instrs.size()) + 1;  // + the JUMP_FORWARD
  rb.shift = shift;
  emit("JUMP_FORWARD", 0, at + shift);
  for (const Instr& src : orig.instrs) {
    Instr in = src;
    const std::string n = opname(in.opcode);
    if (n == "MAKE_CELL" || n == "COPY_FREE_VARS" || n == "RESUME") {
      // The original prologue: cells arrive made (in the closure), and RESUME is ours.
      in.opcode = op("NOP"), in.arg = 0;
    } else if (indexes_localsplus(n)) {
      FF_CHECK(in.arg < static_cast<int>(old_plus.size()), n + " argument outside localsplus");
      in.arg = new_index.at(old_plus[in.arg]);
      // 3.12+'s LOAD_FAST trusts the slot to be bound (NULL crashes), LOAD_FAST_CHECK raises (3.11's
      // LOAD_FAST checks itself): a local that is not an argument here may be unbound if the
      // caller's liveness was wrong: raise, never crash.
      if (n == "LOAD_FAST" && in.arg >= argcount && in.arg < static_cast<int>(new_vars.size()) &&
          opcode_number("LOAD_FAST_CHECK") >= 0)
        in.opcode = op("LOAD_FAST_CHECK");
    }
    if (in.target >= 0) in.target += shift;
    out.instrs.push_back(in);
  }
  for (ExcEntry e : orig.exc) {
    e.start += shift, e.end += shift, e.target += shift;
    out.exc.push_back(e);
  }
  return rb;
}

PyObject* assemble_resume(PyObject* code, const ResumeBuild& rb, const std::string& prefix, PyObject* consts) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  PyRef vars = PyRef::steal(to_tuple(rb.new_vars)), frees = PyRef::steal(to_tuple(rb.new_frees)),
        cells = PyRef::steal(PyTuple_New(0));
  CodeFields f;
  f.varnames = vars.get(), f.freevars = frees.get(), f.cellvars = cells.get(), f.consts = consts;
  f.argcount = rb.argcount, f.posonlyargcount = 0, f.kwonlyargcount = 0;
  f.nlocals = static_cast<int>(rb.new_vars.size());
  int flags = co->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  flags |= CO_OPTIMIZED | CO_NEWLOCALS;
  if (!rb.new_frees.empty()) flags |= CO_NESTED;
  f.flags = flags;
  f.firstlineno = rb.line >= 0 ? rb.line : co->co_firstlineno;
  const char* name = PyUnicode_AsUTF8(co->co_name);
  FF_CHECK(name, "code without a name");
  if (prefix.empty()) {  // keeps the user's names (what tracebacks and sys._getframe show)
    f.name = name;
    const char* qual = PyUnicode_AsUTF8(co->co_qualname);
    FF_CHECK(qual, "code without a qualname");
    f.qualname = qual;
  } else {
    f.name = prefix + std::string(name) + "_at_" + std::to_string(rb.line);
    f.qualname = f.name;
  }
  return assemble(code, rb.out, f);
}

PyObject* make_resume(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live,
                      const std::vector<int>& null_slots, int* body_shift) {
  ResumeBuild rb = build_resume(code, unit, stack_depth, live, null_slots, {});
  if (body_shift) *body_shift = rb.shift;
  PyObject* result = assemble_resume(code, rb, "__resume_", nullptr);
  if (log_enabled(LogArtifact::bytecode)) {
    try {
      log_emit(LogArtifact::bytecode, "ORIGINAL BYTECODE\n" + disassemble(code) + "RESUME FUNCTION at offset " +
                                          std::to_string(2 * unit) + "\n" + disassemble(result));
    } catch (...) {
      Py_DECREF(result);
      throw;
    }
  }
  return result;
}

std::vector<std::string> live_locals_at(PyObject* code, int unit) {
  FF_CHECK(PyCode_Check(code), "live_locals_at expects a code object");
  Bytecode bc = decode(code);
  std::vector<std::string> varnames = str_tuple(code, "co_varnames");
  const int nv = static_cast<int>(varnames.size()), n = static_cast<int>(bc.instrs.size());
  int at = -1;
  for (int k = 0; k < n && at < 0; ++k)  // the first match (split pairs share an offset)
    if (bc.instrs[k].offset == unit) at = k;
  FF_CHECK(at >= 0, "offset " + std::to_string(2 * unit) + " is not an instruction boundary");
  std::vector<std::vector<int>> succ(n);
  for (int k = 0; k < n; ++k) {
    const Instr& in = bc.instrs[k];
    if (in.target >= 0) succ[k].push_back(in.target);
    if (!is_terminator(in.opcode) && k + 1 < n) succ[k].push_back(k + 1);
  }
  for (const ExcEntry& e : bc.exc)
    for (int k = e.start; k <= e.end; ++k) succ[k].push_back(e.target);
  // Backward dataflow to a fixed point: live_in = use | (live_out - def).
  std::vector<std::vector<bool>> live(n, std::vector<bool>(nv, false));
  for (bool changed = true; changed;) {
    changed = false;
    for (int k = n - 1; k >= 0; --k) {
      std::vector<bool> out(nv, false);
      for (int s : succ[k])
        for (int v = 0; v < nv; ++v) out[v] = out[v] || live[s][v];
      const std::string name = opname(bc.instrs[k].opcode);
      int a = bc.instrs[k].arg;
      if (a < nv) {
        // NB: DELETE_FAST reads the slot (an unbound one raises UnboundLocalError): a use.
        if (name == "STORE_FAST") out[a] = false;
        else if (name == "LOAD_FAST" || name == "LOAD_FAST_CHECK" || name == "LOAD_FAST_AND_CLEAR" || name == "DELETE_FAST")
          out[a] = true;
      }
      if (out != live[k]) live[k] = std::move(out), changed = true;
    }
  }
  std::vector<std::string> cellvars = str_tuple(code, "co_cellvars");
  std::vector<std::string> result;
  // NB: super() reads slot 0 with no LOAD_FAST the dataflow above could see.
  if (keeps_first_local(code)) live[at][0] = true;
  for (int v = 0; v < nv; ++v)
    if (live[at][v] && !contains(cellvars, varnames[v])) result.push_back(varnames[v]);
  return result;
}

}  // namespace ff::bc
