// The frame loop of the symbolic interpreter: decoding, the per-instruction handlers, and turning
// the traced frame into a CaptureResult. Values, calls and builtins live in interpreter_*.cpp.
#include <Python.h>

#include <algorithm>

#include <functional>
#include <memory>
#include <unordered_map>

#include "frame_eval/bytecode.h"
#include "frame_eval/cache.h"
#include "frame_eval/guards.h"
#include "frame_eval/interpreter_impl.h"
#include "frame_eval/torch_refs.h"
#include "graph/op.h"
#include "graph/passes/specialize_shapes.h"
#include "graph/python/graph_calls.h"
#include "src/base/logging.h"
#include "src/base/gil_once.h"

namespace ff {

GraphBreak::GraphBreak(BreakInfo info)
    : Unsupported(info.reason + (info.filename.empty() ? "" : " (" + info.filename + ":" + std::to_string(info.lineno) + ")")),
      info_(std::move(info)) {}

// ---- the tracer ---------------------------------------------------------------------------------

SymbolicTracer::SymbolicTracer(const FrameView& view, const TraceOptions& options) : view_(view), options_(options) {}

void SymbolicTracer::brk(BreakKind kind, const std::string& detail) { throw GraphBreak(break_info(kind, detail)); }

void SymbolicTracer::raise_attribute_error(const Sym& obj, const std::string& name) {
  raise_in_trace(PyExc_AttributeError, "AttributeError: " + describe_sym(obj) + " has no attribute '" + name + "'");
}

void SymbolicTracer::raise_in_trace(PyObject* exc_class, const std::string& detail) {
  throw RaisedInTrace(break_info(BreakKind::RaisesInTrace, detail), exc_class);
}

BreakInfo SymbolicTracer::break_info(BreakKind kind, const std::string& detail) {
  BreakInfo info = make_break_info(kind, detail);
  for (const Frame* f : frames_) {
    const Instr& ins = f->dc->instrs[static_cast<size_t>(f->ip)];
    int line = PyCode_Addr2Line(f->code, ins.offset * 2);
    std::string file = PyUnicode_AsUTF8(f->code->co_filename);
    std::string func = PyUnicode_AsUTF8(f->code->co_name);
    info.user_stack.push_back(file + ":" + std::to_string(line) + " in " + func);
    info.filename = file;
    info.lineno = line;
  }
  if (!frames_.empty() && frames_[0]->depth == 0 && !root_visits_.empty()) {
    // NB: a call breaks at the first instruction of its group: KW_NAMES sets a register the
    // native code must see again.
    const Frame& r = *frames_[0];
    int idx = r.ip;
    auto name_at = [&](int i) { const char* n = opcode_table()[r.dc->instrs[static_cast<size_t>(i)].opcode].name; return std::string(n ? n : ""); };
    if (name_at(idx) == "CALL" && idx > 0 && name_at(idx - 1) == "PRECALL") --idx;
    if ((name_at(idx) == "CALL" || name_at(idx) == "PRECALL") && idx > 0 && name_at(idx - 1) == "KW_NAMES") --idx;
    info.root_index = idx;
    info.root_visit = root_visits_[static_cast<size_t>(idx)];
  }
  return info;
}

namespace {

struct StopHere {};  // the partial trace reached its stop instruction

struct FramePush {
  std::vector<Frame*>& frames;
  FramePush(std::vector<Frame*>& fs, Frame* f) : frames(fs) { frames.push_back(f); }
  ~FramePush() { frames.pop_back(); }
};

PyObject* co_const(const Frame& f, int i) { return PyTuple_GET_ITEM(f.code->co_consts, i); }
PyObject* co_name(const Frame& f, int i) { return PyTuple_GET_ITEM(f.code->co_names, i); }
std::string str_of(PyObject* s) { return PyUnicode_AsUTF8(s); }

// A loaded value with the NULL a call needs beside it (LOAD_GLOBAL's, LOAD_ATTR's and
// LOAD_SUPER_ATTR's low bit): below it on 3.11/3.12, above it on 3.13.
void push_with_null(std::vector<Sym>& st, Sym v, bool with_null) {
  if (with_null && !null_after_callable()) st.push_back(make_null());
  st.push_back(std::move(v));
  if (with_null && null_after_callable()) st.push_back(make_null());
}

}  // namespace

Sym SymbolicTracer::format_value(const Sym& v, int conv, const Sym& spec, bool format) {
  PyRef value = PyRef::steal(sym_to_const(v));
  if (!value || (spec && !spec->is(SymKind::Const)))
    brk(BreakKind::UnsupportedOperand, "formatting " + describe_sym(v) + " into a string");
  if (conv == 1) value = PyRef::steal(PyObject_Str(value.get()));
  else if (conv == 2) value = PyRef::steal(PyObject_Repr(value.get()));
  else if (conv == 3) value = PyRef::steal(PyObject_ASCII(value.get()));
  if (!value) {
    PyErr_Clear();
    brk(BreakKind::RaisesInTrace, "string conversion failed");
  }
  // NB: FORMAT_SIMPLE leaves an exact str as it is, which is what format(s, None) returns too.
  if (!format) return make_const(value.get());
  PyObject* r = PyObject_Format(value.get(), spec ? spec->obj.get() : nullptr);
  if (!r) {
    PyErr_Clear();
    brk(BreakKind::RaisesInTrace, "format() failed");
  }
  return make_const_steal(r);
}

Sym SymbolicTracer::run_frame(Frame& f) {
  FramePush push(frames_, &f);
  ++out_.stats.frames;
  const std::vector<Instr>& instrs = f.dc->instrs;
  if (trace_instructions_)
    log_emit(LogComponent::frontend, LogLevel::Debug,
             std::string(2 * static_cast<size_t>(f.depth), ' ') + (f.depth == 0 ? "tracing " : "inlining ") +
                 PyUnicode_AsUTF8(f.code->co_qualname) + " (" + PyUnicode_AsUTF8(f.code->co_filename) + ":" +
                 std::to_string(f.code->co_firstlineno) + ")" + (f.ip > 0 ? " from instruction " + std::to_string(f.ip) : ""));
  for (;;) {
    FF_CHECK(f.ip >= 0 && static_cast<size_t>(f.ip) < instrs.size(), "instruction pointer out of range");
    const Instr& ins = instrs[static_cast<size_t>(f.ip)];
    if (f.depth == 0 && frames_.size() == 1) {
      int visit = ++root_visits_[static_cast<size_t>(f.ip)];
      if (f.ip == options_.stop_index && visit == options_.stop_visit) throw StopHere{};
    }
    ++out_.stats.instructions;
    if (trace_instructions_) log_instruction(f, ins);
    if (ins.handler == Handler::ReturnValue) {
      FF_CHECK(!f.stack.empty(), "RETURN_VALUE on an empty stack");
      return f.stack.back();
    }
    if (ins.handler == Handler::ReturnConst) return make_const(co_const(f, ins.arg));
    size_t depth_before = f.stack.size();
    int ip_before = f.ip;
    try {
      step(f, ins);
    } catch (const UnbackedDecision& e) {
      // A data-dependent output's size (config capture_dynamic_output_shape_ops) decided in a
      // way only the run can: the graph ends before this instruction.
      brk(BreakKind::DataDependentShape, e.what());
    }
    if (f.suspended) return nullptr;  // a generator yielded: resumed by the next next()
    bool jumped = f.ip != ip_before + 1;
    bool check = !(ins.flags & kNoStackCheck) && ins.handler != Handler::ReturnGenerator &&
                 !(ins.handler == Handler::ForIter && jumped);
    if (check) {
      int expected = PyCompile_OpcodeStackEffectWithJump(ins.opcode, ins.arg, jumped ? 1 : 0);
      int actual = static_cast<int>(f.stack.size()) - static_cast<int>(depth_before);
      FF_CHECK(expected == actual, std::string("stack effect of ") + opcode_table()[ins.opcode].name + " is " +
                                       std::to_string(actual) + ", CPython says " + std::to_string(expected));
    }
  }
}

void SymbolicTracer::step(Frame& f, const Instr& ins) {
  std::vector<Sym>& st = f.stack;
  auto pop = [&]() {
    FF_CHECK(!st.empty(), "pop from an empty stack");
    Sym v = std::move(st.back());
    st.pop_back();
    return v;
  };
  auto push = [&](Sym v) { st.push_back(std::move(v)); };
  auto peek = [&](int n) -> Sym& {
    FF_CHECK(static_cast<int>(st.size()) >= n, "stack underflow");
    return st[st.size() - static_cast<size_t>(n)];
  };
  int next = f.ip + 1;
  const int arg = ins.arg;
  if (symints_made_ > 0) {
    // Symbolic ints stay symbolic only through what models them; any other opcode sees the traced
    // values (guarded).
    if (ins.handler == Handler::LoadAttr || ins.handler == Handler::LoadMethod || ins.handler == Handler::LoadAttrMethodBit) {
      if (!st.empty()) specialize_ints(st.back());
    } else if (!keeps_symints(ins.handler)) {
      specialize_stack(f);
    }
  }

  switch (ins.handler) {
    case Handler::Nop:
    case Handler::Precall:
      break;
    case Handler::Unsupported:
      brk(BreakKind::UnsupportedOpcode, std::string(opcode_table()[ins.opcode].name ? opcode_table()[ins.opcode].name : "unknown opcode"));
    case Handler::PopTop: pop(); break;
    case Handler::PushNull: push(make_null()); break;
    case Handler::Copy: push(peek(arg)); break;
    case Handler::Swap: std::swap(peek(1), peek(arg)); break;
    case Handler::LoadConst: push(make_const(co_const(f, arg))); break;
    case Handler::LoadFast: {
      const Sym& v = f.locals[static_cast<size_t>(arg)];
      if (!v) brk(BreakKind::RaisesInTrace, "local variable '" + str_of(PyTuple_GET_ITEM(f.code->co_localsplusnames, arg)) + "' is unbound");
      push(v);
      break;
    }
    case Handler::SplitPair: FF_CHECK(false, "a pair instruction is decoded as two"); break;
    case Handler::LoadFastAndClear: {
      Sym& slot = f.locals[static_cast<size_t>(arg)];
      push(slot ? slot : make_null());
      slot = nullptr;
      break;
    }
    case Handler::StoreFast: {
      Sym v = pop();
      f.locals[static_cast<size_t>(arg)] = v->is(SymKind::Null) ? nullptr : std::move(v);
      break;
    }
    case Handler::DeleteFast: f.locals[static_cast<size_t>(arg)] = nullptr; break;
    case Handler::LoadGlobal: {
      Sym v = load_global(f, co_name(f, arg >> 1));
      push_with_null(st, std::move(v), arg & 1);
      break;
    }
    case Handler::StoreGlobal: store_global(f, co_name(f, arg), pop()); break;
    case Handler::LoadAttr: push(load_attr(pop(), str_of(co_name(f, arg)))); break;
    case Handler::LoadMethod: {
      Sym obj = pop();
      Sym attr = load_attr(obj, str_of(co_name(f, ins.arg)));
      push(make_null());
      push(std::move(attr));
      break;
    }
    case Handler::LoadAttrMethodBit: {
      Sym obj = pop();
      Sym attr = load_attr(obj, str_of(co_name(f, arg >> 1)));
      push_with_null(st, std::move(attr), arg & 1);
      break;
    }
    case Handler::StoreAttr: {
      Sym obj = pop();
      Sym value = pop();
      store_attr(obj, str_of(co_name(f, arg)), std::move(value));
      break;
    }
    case Handler::DeleteAttr: delete_attr(pop(), str_of(co_name(f, arg))); break;
    case Handler::LoadSuperAttr: {
      Sym self = pop();
      Sym cls = pop();
      Sym super_fn = pop();
      if (!super_fn->is(SymKind::Const) || super_fn->obj.get() != reinterpret_cast<PyObject*>(&PySuper_Type) ||
          !cls->is(SymKind::Const) || !PyType_Check(cls->obj.get()))
        brk(BreakKind::UnsupportedCall, "super() with a shadowed super or a non-class first argument");
      Sym sup = make_sym(SymKind::Super);
      sup->obj = cls->obj;
      sup->items = {self};
      Sym attr = load_attr(sup, str_of(co_name(f, arg >> 2)));
      push_with_null(st, std::move(attr), arg & 1);
      break;
    }
    case Handler::LoadDeref: push(cell_contents(f.locals[static_cast<size_t>(arg)])); break;
    case Handler::StoreDeref: {
      Sym v = pop();
      const Sym& cell = f.locals[static_cast<size_t>(arg)];
      FF_CHECK(cell && cell->is(SymKind::Cell), "STORE_DEREF on a slot without a cell");
      if (cell->obj) brk(BreakKind::ClosureWrite, "nonlocal " + str_of(PyTuple_GET_ITEM(f.code->co_localsplusnames, arg)));
      cell->items = {std::move(v)};
      break;
    }
    case Handler::LoadClosure: {
      const Sym& cell = f.locals[static_cast<size_t>(arg)];
      FF_CHECK(cell && cell->is(SymKind::Cell), "LOAD_CLOSURE of a slot without a cell");
      push(cell);
      break;
    }
    case Handler::MakeCell: {
      Sym cell = make_sym(SymKind::Cell);
      Sym& slot = f.locals[static_cast<size_t>(arg)];
      if (slot) cell->items = {slot};
      slot = std::move(cell);
      break;
    }
    case Handler::CopyFreeVars: {
      FF_CHECK(f.closure && static_cast<int>(f.closure->items.size()) == arg, "closure size mismatch");
      for (int i = 0; i < arg; ++i)
        f.locals[static_cast<size_t>(f.dc->nlocalsplus - arg + i)] = f.closure->items[static_cast<size_t>(i)];
      break;
    }
    case Handler::BinaryOp: {
      Sym b = pop();
      Sym a = pop();
      push(binary_op(arg, a, b));
      break;
    }
    case Handler::UnaryNegative: push(unary_op("neg", pop())); break;
    case Handler::UnaryPositive: push(unary_op("pos", pop())); break;
    case Handler::UnaryInvert: push(unary_op("invert", pop())); break;
    case Handler::UnaryNot: push(make_const(truth(pop()) ? Py_False : Py_True)); break;
    case Handler::ToBool: push(make_const(truth(pop()) ? Py_True : Py_False)); break;
    case Handler::CompareOp: {
      Sym b = pop();
      Sym a = pop();
      Sym r = compare_op(compare_op_index(arg), a, b);
      if (compare_op_to_bool(arg)) r = make_const(truth(r) ? Py_True : Py_False);
      push(std::move(r));
      break;
    }
    case Handler::IsOp: {
      Sym b = pop();
      Sym a = pop();
      Sym r = is_same(a, b);
      if (arg) r = make_const(r->obj.get() == Py_True ? Py_False : Py_True);
      push(std::move(r));
      break;
    }
    case Handler::ContainsOp: {
      Sym container = pop();
      Sym item = pop();
      // NB: `k in d` reads d's keys only (a kwargs dict may hold symbolic sizes as values).
      specialize_ints(item);
      if (!container->is(SymKind::Dict)) specialize_ints(container);
      Sym r = contains(container, item);
      if (arg) r = make_const(truth(r) ? Py_False : Py_True);
      push(std::move(r));
      break;
    }
    case Handler::BinarySubscr: {
      Sym index = pop();
      Sym container = pop();
      push(subscript(container, index));
      break;
    }
    case Handler::StoreSubscr: {
      Sym key = pop();
      Sym container = pop();
      Sym value = pop();
      store_subscript(container, key, std::move(value));
      break;
    }
    case Handler::DeleteSubscr: {
      Sym key = pop();
      Sym container = pop();
      delete_subscript(container, key);
      break;
    }
    case Handler::BinarySlice: {
      Sym stop = pop();
      Sym start = pop();
      Sym container = pop();
      Sym slice = make_sym(SymKind::Slice);
      slice->items = {start, stop, make_const(Py_None)};
      push(subscript(container, slice));
      break;
    }
    case Handler::StoreSlice: {
      Sym stop = pop();
      Sym start = pop();
      Sym container = pop();
      Sym value = pop();
      Sym slice = make_sym(SymKind::Slice);
      slice->items = {start, stop, make_const(Py_None)};
      store_subscript(container, slice, std::move(value));
      break;
    }
    case Handler::BuildTuple:
    case Handler::BuildList:
    case Handler::BuildSet: {
      std::vector<Sym> items(st.end() - arg, st.end());
      st.resize(st.size() - static_cast<size_t>(arg));
      if (ins.handler == Handler::BuildTuple) push(make_tuple(std::move(items)));
      else if (ins.handler == Handler::BuildList) push(make_list(std::move(items)));
      else {
        Sym set = new_set(PySet_New(nullptr));
        for (Sym& i : items) set_add(set, i);
        push(std::move(set));
      }
      break;
    }
    case Handler::BuildMap: {
      Sym d = make_sym(SymKind::Dict);
      std::vector<Sym> kv(st.end() - 2 * arg, st.end());
      st.resize(st.size() - 2 * static_cast<size_t>(arg));
      // NB: keys are hashed (specialised); values are only held, so sizes among them stay symbolic.
      for (int i = 0; i < arg; ++i) specialize_ints(kv[2 * static_cast<size_t>(i)]);
      for (int i = 0; i < arg; ++i) store_subscript(d, kv[2 * static_cast<size_t>(i)], kv[2 * static_cast<size_t>(i) + 1]);
      push(std::move(d));
      break;
    }
    case Handler::BuildConstKeyMap: {
      Sym keys = pop();
      std::vector<Sym> values(st.end() - arg, st.end());
      st.resize(st.size() - static_cast<size_t>(arg));
      Sym d = make_sym(SymKind::Dict);
      specialize_ints(keys);
      std::vector<Sym> key_syms = iterate(keys);
      for (int i = 0; i < arg; ++i) store_subscript(d, key_syms[static_cast<size_t>(i)], values[static_cast<size_t>(i)]);
      push(std::move(d));
      break;
    }
    case Handler::BuildString: {
      std::vector<Sym> parts(st.end() - arg, st.end());
      st.resize(st.size() - static_cast<size_t>(arg));
      PyRef joined = PyRef::steal(PyUnicode_FromString(""));
      for (const Sym& p : parts) {
        if (!p->is(SymKind::Const) || !PyUnicode_Check(p->obj.get()))
          brk(BreakKind::UnsupportedOperand, "string building from a non-constant value");
        joined = PyRef::steal(PyUnicode_Concat(joined.get(), p->obj.get()));
      }
      push(make_const(joined.get()));
      break;
    }
    case Handler::BuildSlice: {
      Sym step_v = arg == 3 ? pop() : make_const(Py_None);
      Sym stop = pop();
      Sym start = pop();
      Sym slice = make_sym(SymKind::Slice);
      slice->items = {start, stop, step_v};
      push(std::move(slice));
      break;
    }
    case Handler::ListAppend: {
      Sym v = pop();
      Sym& list = peek(arg);
      if (list->is(SymKind::Appendable)) {  // a list passed in that the trace only appends to
        list->items.push_back(std::move(v));
        note_appended(list);
        break;
      }
      FF_CHECK(list->is(SymKind::List), "LIST_APPEND to a non-list");
      list->items.push_back(std::move(v));
      note_list_mutation(list);
      break;
    }
    case Handler::SetAdd: {
      Sym v = pop();
      set_add(peek(arg), v);
      break;
    }
    case Handler::MapAdd: {
      Sym value = pop();
      Sym key = pop();
      specialize_ints(key);
      store_subscript(peek(arg), key, std::move(value));
      break;
    }
    case Handler::ListExtend: {
      Sym seq = pop();
      Sym& list = peek(arg);
      FF_CHECK(list->is(SymKind::List), "LIST_EXTEND to a non-list");
      for (Sym& i : iterate(seq)) list->items.push_back(std::move(i));
      note_list_mutation(list);
      break;
    }
    case Handler::SetUpdate: {
      Sym seq = pop();
      Sym& set = peek(arg);
      FF_CHECK(set->is(SymKind::Set), "SET_UPDATE to a non-set");
      // NB: set.update with the same kind of operand eager passes (a set's table is merged whole).
      PyRef operand = PyRef::steal(set_operand(seq));
      PyRef r = PyRef::steal(PyObject_CallMethod(set->obj.get(), "update", "(O)", operand.get()));
      if (!r) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "set update raises");
      }
      break;
    }
    case Handler::DictUpdate:
    case Handler::DictMerge: {
      Sym other = pop();
      Sym& d = peek(arg);
      if (other->is(SymKind::Const) && PyDict_Check(other->obj.get())) other = wrap(other->obj.get(), nullptr);
      if (!other->is(SymKind::Dict)) brk(BreakKind::UnsupportedValue, "** of a value that is not a dict");
      for (size_t i = 0; i < other->keys.size(); ++i) store_subscript(d, other->keys[i], other->items[i]);
      break;
    }
    case Handler::ListToTuple: {
      Sym list = pop();
      push(make_tuple(iterate(list)));
      break;
    }
    case Handler::CallIntrinsic1: {
      if (arg == 5) push(unary_op("pos", pop()));
      else if (arg == 6) push(make_tuple(iterate(pop())));
      else brk(BreakKind::UnsupportedOpcode, "CALL_INTRINSIC_1 " + std::to_string(arg));
      break;
    }
    case Handler::UnpackSequence: {
      Sym seq = pop();
      std::vector<Sym> items = iterate(seq);
      if (static_cast<int>(items.size()) != arg)
        brk(BreakKind::RaisesInTrace, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(arg));
      for (auto it = items.rbegin(); it != items.rend(); ++it) push(*it);
      break;
    }
    case Handler::UnpackEx: {
      int before = arg & 0xFF, after = arg >> 8;
      std::vector<Sym> items = iterate(pop());
      if (static_cast<int>(items.size()) < before + after) brk(BreakKind::RaisesInTrace, "not enough values to unpack");
      std::vector<Sym> rest(items.begin() + before, items.end() - after);
      for (int i = static_cast<int>(items.size()) - 1; i >= static_cast<int>(items.size()) - after; --i) push(items[static_cast<size_t>(i)]);
      push(make_list(std::move(rest)));
      for (int i = before - 1; i >= 0; --i) push(items[static_cast<size_t>(i)]);
      break;
    }
    case Handler::GetIter: push(get_iter(pop())); break;
    case Handler::ForIter: {
      Sym v = iter_next(peek(1));
      if (v) {
        push(std::move(v));
      } else {
        pop();
        next = ins.jump + for_iter_exhausted_skip();  // END_FOR (3.13: and POP_TOP) skipped
      }
      break;
    }
    case Handler::EndFor:
      pop();
      pop();
      break;
    case Handler::JumpForward:
    case Handler::JumpBackward:
      next = ins.jump;
      break;
    case Handler::PopJumpIfFalse:
      if (!truth(pop())) next = ins.jump;
      break;
    case Handler::PopJumpIfTrue:
      if (truth(pop())) next = ins.jump;
      break;
    case Handler::PopJumpIfNone:
    case Handler::PopJumpIfNotNone: {
      Sym v = pop();
      bool is_none = v->is(SymKind::Const) && v->obj.get() == Py_None;
      if (is_none == (ins.handler == Handler::PopJumpIfNone)) next = ins.jump;
      break;
    }
    case Handler::JumpIfFalseOrPop:
      if (!truth(peek(1))) next = ins.jump;
      else pop();
      break;
    case Handler::JumpIfTrueOrPop:
      if (truth(peek(1))) next = ins.jump;
      else pop();
      break;
    case Handler::KwNames: f.kw_names = PyRef::borrow(co_const(f, arg)); break;
    case Handler::Call:
    case Handler::CallKw: {
      PyRef kw_names = std::move(f.kw_names);  // 3.11/3.12: KW_NAMES before the CALL
      if (ins.handler == Handler::CallKw) {    // 3.13: the names tuple is on the stack
        Sym names = pop();
        FF_CHECK(names->is(SymKind::Const) && PyTuple_Check(names->obj.get()), "CALL_KW without a names tuple");
        kw_names = names->obj;
      }
      std::vector<Sym> args(st.end() - arg, st.end());
      st.resize(st.size() - static_cast<size_t>(arg));
      Sym second = pop();
      Sym first = pop();
      // [NULL, callable] or [method, self] on 3.11/3.12; [callable, NULL] or [method, self] on 3.13.
      Sym fn = std::move(first), self_arg = std::move(second);
      if (!null_after_callable() && fn->is(SymKind::Null)) std::swap(fn, self_arg);
      if (!self_arg->is(SymKind::Null)) args.insert(args.begin(), std::move(self_arg));
      KwArgs kwargs;
      if (kw_names) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kw_names.get());
        size_t first_kw = args.size() - static_cast<size_t>(nkw);
        for (Py_ssize_t i = 0; i < nkw; ++i)
          kwargs.emplace_back(str_of(PyTuple_GET_ITEM(kw_names.get(), i)), args[first_kw + static_cast<size_t>(i)]);
        args.resize(first_kw);
      }
      push(call(fn, std::move(args), std::move(kwargs)));
      break;
    }
    case Handler::CallFunctionEx: {
      Sym kw = (arg & 1) ? pop() : nullptr;
      Sym args = pop();
      Sym fn = pop();
      Sym null = pop();
      if (null_after_callable()) std::swap(fn, null);  // 3.13: [callable, NULL, args, kwargs?]
      FF_CHECK(null->is(SymKind::Null), "CALL_FUNCTION_EX without a NULL beside the callable");
      KwArgs kwargs;
      if (kw) {
        if (kw->is(SymKind::Const) && PyDict_Check(kw->obj.get())) kw = wrap(kw->obj.get(), nullptr);
        if (!kw->is(SymKind::Dict)) brk(BreakKind::UnsupportedValue, "** of a value that is not a dict");
        for (size_t i = 0; i < kw->keys.size(); ++i) {
          PyObject* k = kw->keys[i]->obj.get();
          if (!PyUnicode_Check(k)) brk(BreakKind::WrongArguments, "keywords must be strings");
          kwargs.emplace_back(str_of(k), kw->items[i]);
        }
      }
      push(call(fn, iterate(args), std::move(kwargs)));
      break;
    }
    case Handler::MakeFunction: {
      Sym code = pop();
      Sym fn = make_sym(SymKind::Function);
      fn->obj = code->obj;
      fn->globals = PyRef::borrow(f.globals);
      fn->source = f.globals_source;
      fn->flag = f.guard_globals;
      fn->items = {nullptr, nullptr, nullptr};
      if (arg & 8) fn->items[2] = pop();
      if (arg & 4) pop();
      if (arg & 2) fn->items[1] = pop();
      if (arg & 1) fn->items[0] = pop();
      push(std::move(fn));
      break;
    }
    case Handler::SetFunctionAttribute: {  // 3.13: (value, function -- function), one flag of MAKE_FUNCTION's
      Sym fn = pop();
      Sym v = pop();
      FF_CHECK(fn->is(SymKind::Function), "SET_FUNCTION_ATTRIBUTE on a value that is not a new function");
      if (arg == 8) fn->items[2] = std::move(v);
      else if (arg == 2) fn->items[1] = std::move(v);
      else if (arg == 1) fn->items[0] = std::move(v);
      push(std::move(fn));  // 4: annotations, which the trace does not read
      break;
    }
    case Handler::BeforeWith: {
      Sym mgr = pop();
      // NB: a real torch.autocast object (made outside, or a @torch.autocast decorator's) is entered
      // as one the trace made with its settings.
      if ((mgr->is(SymKind::Object) || mgr->is(SymKind::Const)) && mgr->obj &&
          is_autocast_type(reinterpret_cast<PyObject*>(Py_TYPE(mgr->obj.get()))))
        mgr = autocast_ctx(mgr->obj.get());
      if (mgr->is(SymKind::GradCtx) || mgr->is(SymKind::AutocastCtx) || (mgr->is(SymKind::NoopCtx) && PyObject_HasAttrString(mgr->obj.get(), "__enter__"))) {
        Sym exit = make_sym(SymKind::Method);
        exit->name = "__exit__";
        exit->items = {mgr};
        mgr->flag = mgr->flag;  // grad mode inside the block
        Sym enter = make_sym(SymKind::Method);
        enter->name = "__enter__";
        enter->items = {mgr};
        std::vector<Sym> no_args;
        KwArgs no_kw;
        Sym entered = call_method(enter, no_args, no_kw);
        push(std::move(exit));
        push(std::move(entered));
        break;
      }
      if (Sym gen = generator_cm_gen(mgr)) {
        // NB: a @contextlib.contextmanager object made in the trace: __enter__ is next(gen) and a
        // normal __exit__ runs the generator to its end (contextlib's own code catches the
        // StopIteration that ends it, which the trace cannot). The rest of contextlib's
        // __enter__ and __exit__ (`del self.args`, the exception paths) changes nothing the
        // block can see.
        Sym entered = iter_next(gen);
        if (!entered) brk(BreakKind::UnsupportedContextManager, "a @contextmanager generator that did not yield");
        Sym exit = make_sym(SymKind::Method);
        exit->name = "__exit__";
        exit->items = {mgr};
        push(std::move(exit));
        push(std::move(entered));
        break;
      }
      if (mgr->is(SymKind::Object) || mgr->is(SymKind::NewObject)) {
        Sym enter = try_load_attr(mgr, "__enter__");
        Sym exit = try_load_attr(mgr, "__exit__");
        // NB: context managers written in Python; a C one (a lock, a file) is FF0017 below
        auto python_method = [](const Sym& m) {
          return m && m->is(SymKind::BoundMethod) &&
                 (m->items[1]->is(SymKind::Function) || (m->items[1]->is(SymKind::Const) && PyFunction_Check(m->items[1]->obj.get())));
        };
        if (python_method(enter) && python_method(exit)) {
          Sym entered = call(enter, {}, {});
          push(std::move(exit));
          push(std::move(entered));
          break;
        }
      }
      brk(BreakKind::UnsupportedContextManager, describe_sym(mgr));
    }
    case Handler::FormatValue: {  // 3.11/3.12: conversion (arg & 3) and spec (arg & 4) in one
      Sym spec = (arg & 4) ? pop() : nullptr;
      Sym v = pop();
      push(format_value(v, arg & 3, spec, true));
      break;
    }
    case Handler::ConvertValue: push(format_value(pop(), arg, nullptr, false)); break;  // 3.13
    case Handler::FormatSimple: push(format_value(pop(), 0, nullptr, true)); break;
    case Handler::FormatWithSpec: {
      Sym spec = pop();
      Sym v = pop();
      push(format_value(v, 0, spec, true));
      break;
    }
    case Handler::ReturnGenerator:
      if (!f.generator) brk(BreakKind::GeneratorFrame, "generator frame");
      push(make_const(Py_None));
      break;
    case Handler::YieldValue:
      if (!f.generator) brk(BreakKind::GeneratorFrame, "yield");
      f.yielded = pop();
      push(make_const(Py_None));  // what next() sends in when the frame resumes
      f.suspended = true;
      break;
    case Handler::LoadAssertionError: push(make_const(PyExc_AssertionError)); break;
    case Handler::LoadBuildClass: push(make_const(known().build_class)); break;
    case Handler::RaiseVarargs: {
      // `raise E(...)`: propagates to a builtin that catches it (RaisedInTrace), else a break.
      const Sym& e = f.stack[f.stack.size() - static_cast<size_t>(arg)];
      PyObject* o = arg >= 1 && (e->is(SymKind::Const) || e->is(SymKind::Object)) ? e->obj.get() : nullptr;
      PyObject* cls = !o ? nullptr : PyExceptionInstance_Check(o) ? reinterpret_cast<PyObject*>(Py_TYPE(o))
                                 : PyExceptionClass_Check(o)      ? o
                                                                  : nullptr;
      if (cls) raise_in_trace(cls, std::string("raise ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name);
      brk(BreakKind::RaisesInTrace, "raise statement reached (" + (arg >= 1 ? describe_sym(e) : std::string("re-raise")) + ")");
    }
    case Handler::ImportName: {
      Sym fromlist = pop();
      Sym level = pop();
      std::string why;
      PyObject* m = level->is(SymKind::Const) && fromlist->is(SymKind::Const)
                        ? import_loaded(f.globals, co_name(f, arg), fromlist->obj.get(), PyLong_AsLong(level->obj.get()), why)
                        : nullptr;
      if (!m) brk(BreakKind::UnsupportedCall, why.empty() ? "import with arguments not known" : why);
      push(make_const_steal(m));
      break;
    }
    case Handler::ImportFrom: push(load_attr(peek(1), str_of(co_name(f, arg)))); break;
    case Handler::GetLen: push(len_of(peek(1))); break;
    case Handler::ReturnValue:
    case Handler::ReturnConst:
      FF_CHECK(false, "returns are handled by run_frame");
  }
  f.ip = next;
}

// ---- the root frame and the result --------------------------------------------------------------

namespace {

std::string placeholder_name(const Source& s) {
  std::string text = s.str();
  std::string out;
  for (char c : text) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::isalnum(static_cast<unsigned char>(l))) out += l;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "input" : out;
}

// NB: the working graph holds placeholders where they were discovered (parameters are found
// mid-trace); the result graph is rebuilt with every placeholder first, as the IR requires.
Graph placeholders_first(const Graph& g, std::vector<NodeId>* remap) {
  Graph out;
  remap->assign(g.size(), -1);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.kind == NodeKind::Placeholder) (*remap)[i] = out.add_placeholder(n.name, n.meta);
  }
  std::function<Value(const Value&)> fix = [&](const Value& v) {
    Value r = v;
    if (r.kind == Value::Kind::Node) r.node = (*remap)[static_cast<size_t>(v.node)];
    for (Value& item : r.items) item = fix(item);
    return r;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.kind == NodeKind::Call) {
      std::vector<Value> args;
      args.reserve(n.args.size());
      for (const Value& a : n.args) args.push_back(fix(a));
      (*remap)[i] = out.add_call(n.op, std::move(args), n.meta, n.name);
      out.mutable_node((*remap)[i]).checkpointed = n.checkpointed;
    } else if (n.kind == NodeKind::GetItem) {
      (*remap)[i] = out.add_getitem((*remap)[static_cast<size_t>(n.args[0].node)], n.args[1].i);
      out.mutable_node((*remap)[i]).checkpointed = n.checkpointed;
    }
  }
  return out;
}

}  // namespace

Sym SymbolicTracer::scalar_sym(NodeId node) {
  Sym s = make_sym(SymKind::Scalar);
  s->node = node;
  bool is_int = out_.graph.node(node).meta.kind == ValueMeta::Kind::Int;
  s->obj = PyRef::borrow(reinterpret_cast<PyObject*>(is_int ? &PyLong_Type : &PyFloat_Type));
  return s;
}

Sym SymbolicTracer::tensor_sym(NodeId node) {
  const ValueMeta& m = out_.graph.node(node).meta;
  if (m.kind == ValueMeta::Kind::Tensor) {
    Sym s = make_sym(SymKind::Tensor);
    s->node = node;
    s->meta = m.tensor;
    s->obj = PyRef::borrow(known().tensor_type);
    return s;
  }
  if (m.kind == ValueMeta::Kind::Tuple) {
    // NB: add_getitem grows the graph's node list, which `m` points into: the count is read first.
    const size_t count = m.items.size();
    std::vector<Sym> items;
    for (size_t i = 0; i < count; ++i) items.push_back(tensor_sym(out_.graph.add_getitem(node, static_cast<int64_t>(i))));
    return make_tuple(std::move(items));
  }
  if (m.kind == ValueMeta::Kind::None) return make_const(Py_None);
  if ((m.kind == ValueMeta::Kind::Float || m.kind == ValueMeta::Kind::Int) && op_kind(out_.graph.node(node)) == Op::tensor_item)
    return scalar_sym(node);
  brk(BreakKind::DataDependentShape, "op returns a Python scalar computed from tensor data");
}

namespace {

// autocast_state_now()'s tuple (cpu on, cpu dtype, cuda on, cuda dtype) as an AutocastState.
AutocastState autocast_from_state(PyObject* state) {
  AutocastState s;
  s.cpu = PyTuple_GET_ITEM(state, 0) == Py_True;
  s.cuda = PyTuple_GET_ITEM(state, 2) == Py_True;
  if (!dtype_from_object(PyTuple_GET_ITEM(state, 1), &s.cpu_dtype) || !dtype_from_object(PyTuple_GET_ITEM(state, 3), &s.cuda_dtype))
    throw Unsupported("torch.autocast with a dtype framefuse does not know");
  return s;
}

}  // namespace

CaptureResult SymbolicTracer::trace() {
  // NB: active for the whole trace: meta rules and size reads decide comparisons on symbolic sizes.
  ShapeEnvScope shape_scope(shape_env_.get());
  const Known& k = known();
  if (k.torch) {
    init_op_callables();
    grad_enabled_ = PyObject_IsTrue(PyRef::steal(PyObject_CallMethod(known().torch, "is_grad_enabled", nullptr)).get());
  }
  if (k.torch) {
    Guard g = current_global_state_guard();
    g.grad_enabled = grad_enabled_;
    if (g.expected) autocast_ = autocast_from_state(g.expected);
    out_.guards.push_back(std::move(g));
  }
  AutocastScope autocast_scope(&autocast_);
  Frame root;
  root.code = view_.code;
  root.dc = &decode_code(view_.code);
  root.globals = view_.globals;
  root.builtins = view_.builtins;
  root.depth = 0;
  int n = root.dc->nlocalsplus;
  root.locals.resize(static_cast<size_t>(n));
  PyObject* names = view_.code->co_localsplusnames;
  for (int i = 0; i < n && static_cast<size_t>(i) < view_.localsplus.size(); ++i) {
    PyObject* v = view_.localsplus[static_cast<size_t>(i)];
    if (!v) continue;
    auto src = std::make_shared<Source>();
    src->kind = Source::Kind::Local;
    src->index = i;
    src->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
    root.locals[static_cast<size_t>(i)] = wrap(v, src);
  }
  if (view_.closure) {
    Py_ssize_t nfree = PyTuple_GET_SIZE(view_.closure);
    std::vector<Sym> cells;
    for (Py_ssize_t i = 0; i < nfree; ++i) {
      Sym cell = make_sym(SymKind::Cell);
      cell->obj = PyRef::borrow(PyTuple_GET_ITEM(view_.closure, i));
      auto src = std::make_shared<Source>();
      src->kind = Source::Kind::Closure;
      src->index = static_cast<int>(i);
      src->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, n - nfree + i));
      cell->source = src;
      cells.push_back(cell);
    }
    root.closure = make_tuple(std::move(cells));
  }
  root_visits_.assign(root.dc->instrs.size(), 0);
  Sym result;
  bool stopped = false;
  try {
    result = run_frame(root);
  } catch (const StopHere&) {
    stopped = true;
  }

  {
    // Mutable values read from frame state as separate objects must stay separate: the trace
    // keeps one model per object (a change through one is not seen through the other).
    Guard g;
    g.kind = Guard::Kind::Distinct;
    for (const auto& [obj, s] : by_identity_) {
      bool mutable_kind = s->is(SymKind::List) || s->is(SymKind::Dict) || s->is(SymKind::Set) ||
                          s->is(SymKind::Appendable) || (s->is(SymKind::Iterator) && s->iter == IterKind::Native) ||
                          s->is(SymKind::Object);
      if (mutable_kind && s->source) g.others.push_back(s->source);
    }
    // NB: by_identity_ iterates in no stable order; sources sort by their text for stable guards.
    std::sort(g.others.begin(), g.others.end(), [](const SourcePtr& a, const SourcePtr& b) { return a->str() < b->str(); });
    if (g.others.size() >= 2) out_.guards.push_back(std::move(g));
  }
  for (const Sym& g : generators_) {
    // NB: a generator left suspended in a try/finally or with-block runs that cleanup when
    // CPython collects it as the frame returns; the trace cannot run it then.
    const Frame* gf = g->frame.get();
    if (!gf || g->exhausted || gf->ip == 0) continue;
    for (const Instr& ins : gf->dc->instrs) {
      const char* name = opcode_table()[ins.opcode].name;
      if (name && (std::string_view(name) == "PUSH_EXC_INFO" || std::string_view(name) == "BEFORE_WITH"))
        brk(BreakKind::GeneratorFrame, "a generator left suspended inside try/finally or a with-block");
    }
  }
  OutputBuilder ob{*this, {}, {}};
  OutputPlan output;
  if (stopped) {
    ob.break_state = true;
    output = plan_break_state(root, ob);
  } else {
    output = ob.plan(result);
  }
  std::vector<SideEffect> effects;
  // NB: iterators passed in are advanced first, on their containers as they were: replayed after
  // the container's changes, a dict's iterator would raise (changed size) where eager's did not.
  for (const Sym& c : mutated_containers_) {
    if (!c->is(SymKind::Iterator) || c->iter != IterKind::Native || c->pos == 0) continue;
    SideEffect s;
    s.target = c->source;
    s.kind = SideEffect::Kind::Advance;
    s.key = PyLong_FromLongLong(c->pos);
    effects.push_back(std::move(s));
  }
  for (PendingEffect& e : effects_) {
    SideEffect s;
    s.kind = e.kind;
    s.target = e.target;
    s.name = e.name;
    s.key = e.key.release();
    s.value = ob.plan(e.value);
    effects.push_back(std::move(s));
  }
  for (const Sym& c : mutated_containers_) {
    if (c->is(SymKind::Iterator)) continue;  // advanced above
    if (c->is(SymKind::Appendable)) {  // never read: what the trace appended / added
      SideEffect s;
      s.target = c->source;
      s.kind = SideEffect::Kind::CallMethod;
      s.name = PyList_CheckExact(c->obj.get()) ? "extend" : "update";
      s.value.kind = OutputPlan::Kind::Tuple;
      s.value.items.push_back(ob.plan(make_tuple(c->items)));
      effects.push_back(std::move(s));
      continue;
    }
    if (c->is(SymKind::List)) {
      SideEffect s;
      s.kind = SideEffect::Kind::ReplaceList;
      s.target = c->source;
      s.value.kind = OutputPlan::Kind::List;
      for (const Sym& i : c->items) s.value.items.push_back(ob.plan(i));
      effects.push_back(std::move(s));
      continue;
    }
    // A set passed in: the trace's calls again, in order, on the set itself.
    FF_CHECK(c->is(SymKind::Set) && c->source, "a mutated container that is neither a list nor a set passed in");
    for (const SetCall& call : set_calls_) {
      if (call.set != c) continue;
      SideEffect s;
      s.kind = SideEffect::Kind::CallMethod;
      s.target = c->source;
      s.name = call.method;
      s.value.kind = OutputPlan::Kind::Tuple;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(call.args.get()); ++i)
        s.value.items.push_back(ob.plan(make_const(PyTuple_GET_ITEM(call.args.get(), i))));
      effects.push_back(std::move(s));
    }
  }
  std::vector<NodeId> remap;
  Graph g = placeholders_first(out_.graph, &remap);
  std::vector<Value> outs;
  for (const Value& v : ob.outputs) outs.push_back(Value::of_node(remap[static_cast<size_t>(v.node)]));
  g.set_output(Value::tuple(std::move(outs)));
  out_.graph = std::move(g);
  out_.output = std::move(output);
  output = OutputPlan{};
  out_.side_effects = std::move(effects);
  out_.num_memos = static_cast<int>(ob.memo_of.size());
  if (shape_env_->num_symbols() > shape_env_->num_unbacked()) {
    // The int operands the kernels compute must fit in int64 on every call the entry serves (NB:
    // those of data-dependent sizes are computed by the run, which has their values).
    std::function<void(const Value&)> note_ints = [&](const Value& v) {
      if (v.sym && !sym_has_unbacked(v.sym)) shape_env_->add_evaluated(v.sym);
      for (const Value& item : v.items) note_ints(item);
    };
    for (const Node& n : out_.graph.nodes())
      for (const Value& a : n.args) note_ints(a);
    Guard g;
    g.kind = Guard::Kind::ShapeRelations;
    g.shape_env = shape_env_;
    out_.guards.push_back(std::move(g));
    out_.shape_env = shape_env_;
    // NB: a symbol guarded equal to a constant (broadcast against a static size) is that constant
    // in the graph: backends would otherwise meet `s1 == 4` undecided.
    // Symbols guarded equal to each other become one (the smallest id), for the same reason.
    std::vector<std::pair<SymbolId, SymInt>> fixed;
    std::vector<SymbolId> same(shape_env_->num_symbols());
    for (size_t s = 0; s < same.size(); ++s) same[s] = static_cast<SymbolId>(s);
    auto root = [&](SymbolId s) {
      while (same[static_cast<size_t>(s)] != s) s = same[static_cast<size_t>(s)];
      return s;
    };
    for (auto [a, b] : shape_env_->equal_symbols()) {
      SymbolId ra = root(a), rb = root(b);
      if (ra != rb) same[static_cast<size_t>(std::max(ra, rb))] = std::min(ra, rb);
    }
    std::vector<SymbolId> specialized = shape_env_->specialized_symbols();
    std::vector<bool> constant_class(same.size(), false);  // by root: some member is guarded to its value
    for (SymbolId s : specialized) constant_class[static_cast<size_t>(root(s))] = true;
    for (size_t s = 0; s < same.size(); ++s) {
      auto id = static_cast<SymbolId>(s);
      SymbolId r = root(id);
      if (constant_class[static_cast<size_t>(r)]) fixed.push_back({id, SymInt(shape_env_->hint(id))});
      else if (r != id) fixed.push_back({id, SymInt::symbol(r, shape_env_->hint(r))});
    }
    for (SymbolId s : specialized)
      if (log_enabled(LogArtifact::dynamic))
        log_emit(LogArtifact::dynamic, shape_env_->origin(s) + " was specialised by the trace (it is guarded to its value)");
    if (!fixed.empty()) out_.graph = substitute_symbols(out_.graph, fixed);
  }
  return std::move(out_);
}

CaptureResult trace_frame(const FrameView& frame, const TraceOptions& options) {
  SymbolicTracer t(frame, options);
  return t.trace();
}

std::string placeholder_name_for(const Source& s) { return placeholder_name(s); }

}  // namespace ff
