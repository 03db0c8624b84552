// Graph-break stubs (see bytecode_stub.h).
#include "frame_eval/bytecode_stub.h"

#include <algorithm>

#include "frame_eval/bytecode.h"
#include "frame_eval/opcodes.h"
#include "frame_eval/py_util.h"
#include "frame_eval/bytecode_resume.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff::bc {

namespace {

std::string name_of(const Instr& in) { return opname(in.opcode) ? opname(in.opcode) : "?"; }

// NB: only these can leave a NULL on the stack that the tail could not tell from a value.
bool may_push_null(const Instr& in) {
  std::string n = name_of(in);
  if (n == "LOAD_METHOD" || n == "PUSH_NULL" || n == "LOAD_FAST_AND_CLEAR") return true;
  if (load_attr_method_bit() && (n == "LOAD_ATTR" || n == "LOAD_SUPER_ATTR")) return (in.arg & 1) != 0;
  return false;
}

}  // namespace

BreakStub make_break_stub(PyObject* code, int unit, int stack_depth, const std::vector<std::string>& live,
                          const std::vector<int>& null_slots, PyObject* marker) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  std::vector<std::string> extra = {"__ff_native"};
  for (int i = 0; i < co->co_stacksize; ++i) extra.push_back("__ff_t" + std::to_string(i));
  ResumeBuild rb = build_resume(code, unit, stack_depth, live, null_slots, extra);
  const Bytecode& orig = rb.orig;
  const int n = static_cast<int>(orig.instrs.size());

  // The break group: KW_NAMES? PRECALL? CALL, or one instruction.
  int b = rb.at;
  while (b + 1 < n && (name_of(orig.instrs[b]) == "KW_NAMES" || name_of(orig.instrs[b]) == "PRECALL")) ++b;
  const Instr& brk = orig.instrs[b];
  const std::string bname = name_of(brk);
  if (may_push_null(brk)) throw Unsupported("a graph break at " + bname + " (it may push NULL) cannot be resumed");
  const bool falls = !is_terminator(brk.opcode) && b + 1 < n;
  const bool jumps = is_jump(brk.opcode) && !is_unconditional_jump(brk.opcode) && bname != "SEND";
  if (!falls && !jumps) throw Unsupported("a graph break at " + bname + " cannot be resumed");
  const bool is_call = bname == "CALL" || bname == "CALL_KW" || bname == "CALL_FUNCTION_EX";

  BreakStub stub;
  std::vector<int> succ_index;  // original instruction index of each successor
  auto add_successor = [&](int idx) {
    FF_CHECK(idx >= 0 && idx < n && rb.depths[idx] >= 0, "break successor without a stack depth");
    StubSuccessor s;
    s.unit = orig.instrs[idx].offset;
    s.depth = rb.depths[idx];
    std::vector<int> nulls = null_slots;
    // LOAD_GLOBAL's NULL: below the global on 3.11/3.12, above it on 3.13.
    if (bname == "LOAD_GLOBAL" && (brk.arg & 1)) nulls.push_back(null_after_callable() ? stack_depth + 1 : stack_depth);
    for (int i : nulls) {
      // A call consumes the NULLs of its own callable; everything below survives.
      if (is_call && i >= s.depth - 1) continue;
      if (i >= s.depth) throw Unsupported("stack NULLs at a graph break do not survive the break instruction");
      s.null_slots.push_back(i);
    }
    std::vector<std::string> succ_live = live_locals_at(code, s.unit);
    for (const std::string& l : succ_live)
      if (std::find(live.begin(), live.end(), l) != live.end()) s.live.push_back(l);
    stub.successors.push_back(s);
    succ_index.push_back(idx);
  };
  if (falls) add_successor(b + 1);
  int jump_target = -1;
  if (jumps) {
    jump_target = brk.target;
    // 3.12: an exhausted FOR_ITER jumps over the END_FOR at its target (3.13: and the POP_TOP after it).
    add_successor(bname == "FOR_ITER" ? jump_target + for_iter_exhausted_skip() : jump_target);
  }

  // Constants the tails need, appended to the original co_consts.
  PyRef consts = PyRef::steal(PySequence_List(co->co_consts));
  FF_CHECK(consts.get(), "co_consts");
  const int c_false = static_cast<int>(PyList_GET_SIZE(consts.get()));
  PyList_Append(consts.get(), Py_False);
  PyList_Append(consts.get(), Py_True);
  PyList_Append(consts.get(), marker);
  PyList_Append(consts.get(), reinterpret_cast<PyObject*>(&PyTuple_Type));
  const int c_true = c_false + 1, c_marker = c_false + 2, c_tuple = c_false + 3, c_ids = c_false + 4;
  for (size_t s = 0; s < stub.successors.size(); ++s) {
    PyRef id = PyRef::steal(PyLong_FromSize_t(s));
    PyList_Append(consts.get(), id.get());
  }
  PyRef consts_tuple = PyRef::steal(PyList_AsTuple(consts.get()));

  const int native = rb.index_of.at("__ff_native");
  const int line = brk.line;
  const int shift = rb.shift, kb = rb.at + shift, bb = b + shift;
  auto remap = [&](int j) { return j < shift - 1 ? j : j + 2 + (falls && j > bb ? 1 : 0); };

  Bytecode out;
  auto emit = [&](const char* name, int arg, int target = -1) {
    Instr in;
    in.opcode = op(name), in.arg = arg, in.target = target, in.line = line;
    out.instrs.push_back(in);
    return static_cast<int>(out.instrs.size()) - 1;
  };
  std::vector<std::pair<int, int>> fixups;  // (instruction, successor id): jump to that tail
  for (int j = 0; j < static_cast<int>(rb.out.instrs.size()); ++j) {
    if (j == shift - 1) {  // before the prologue's jump into the body: the native flag starts false
      emit("LOAD_CONST", c_false);
      emit("STORE_FAST", native);
    }
    Instr in = rb.out.instrs[j];
    if (in.target >= 0) in.target = remap(in.target);
    if (j == bb && jumps) {
      if (is_backward_jump(in.opcode)) {  // 3.11: the tail is after the body, so a backward conditional jump turns forward
        std::string nm = bname;
        size_t pos = nm.find("BACKWARD");
        if (pos != std::string::npos) in.opcode = op(nm.replace(pos, 8, "FORWARD").c_str());
      }
      fixups.emplace_back(static_cast<int>(out.instrs.size()), falls ? 1 : 0);
    }
    out.instrs.push_back(in);
    if (j == bb && falls) fixups.emplace_back(emit("JUMP_FORWARD", 0), 0);
  }

  // The tails.
  std::vector<int> tail_start;
  for (size_t s = 0; s < stub.successors.size(); ++s) {
    const StubSuccessor& succ = stub.successors[s];
    const bool is_jump_edge = jumps && static_cast<int>(s) == (falls ? 1 : 0);
    if (is_jump_edge && bname == "FOR_ITER" && for_iter_exhausted_skip() > 0) {
      // The jump's target, skipped by the exhausted FOR_ITER: END_FOR (3.13: END_FOR, POP_TOP).
      tail_start.push_back(emit("END_FOR", 0));
      for (int k = 1; k < for_iter_exhausted_skip(); ++k) emit("POP_TOP", 0);
    } else {
      tail_start.push_back(static_cast<int>(out.instrs.size()));
    }
    emit("LOAD_FAST", native);
    int skip = emit(opcode_number("POP_JUMP_IF_FALSE") >= 0 ? "POP_JUMP_IF_FALSE" : "POP_JUMP_FORWARD_IF_FALSE", 0);
    emit("JUMP_BACKWARD", 0, remap(succ_index[s] + shift));
    out.instrs[static_cast<size_t>(skip)].target = static_cast<int>(out.instrs.size());
    std::vector<bool> is_null(static_cast<size_t>(succ.depth), false);
    for (int i : succ.null_slots) is_null[static_cast<size_t>(i)] = true;
    for (int i = succ.depth - 1; i >= 0; --i) {
      if (is_null[static_cast<size_t>(i)]) {
        // NB: a NULL must never be stored, popped or put in a tuple: call tuple() on it (on 3.13 the
        // NULL goes above the callable).
        emit("LOAD_CONST", c_tuple);
        if (null_after_callable()) emit("SWAP", 2);
        if (opcode_number("PRECALL") >= 0) emit("PRECALL", 0);  // 3.11
        emit("CALL", 0);
        emit("POP_TOP", 0);
      } else {
        emit("STORE_FAST", rb.index_of.at("__ff_t" + std::to_string(i)));
      }
    }
    int count = 2;
    emit("LOAD_CONST", c_marker);
    emit("LOAD_CONST", c_ids + static_cast<int>(s));
    if (rb.self == SelfSlot::Local) {
      FF_CHECK(std::find(succ.live.begin(), succ.live.end(), rb.first_local) != succ.live.end(),
               "super()'s self is not passed to a resume function");
      emit("LOAD_FAST", rb.index_of.at(rb.first_local)), ++count;
    } else if (rb.self == SelfSlot::Cell) {
      emit("LOAD_DEREF", rb.index_of.at(rb.first_local)), ++count;  // the cell's contents, in the closure
    }
    for (int i = 0; i < succ.depth; ++i)
      if (!is_null[static_cast<size_t>(i)]) emit("LOAD_FAST", rb.index_of.at("__ff_t" + std::to_string(i))), ++count;
    for (const std::string& l : succ.live)
      if (rb.self != SelfSlot::Local || l != rb.first_local) emit("LOAD_FAST", rb.index_of.at(l)), ++count;
    emit("BUILD_TUPLE", count);
    emit("RETURN_VALUE", 0);
  }
  for (auto [at, s] : fixups) out.instrs[static_cast<size_t>(at)].target = tail_start[static_cast<size_t>(s)];

  // Exception ranges: the break group's part goes through a trampoline that sets the native flag,
  // so that once the user's handler ran, the tails hand control back to the original successors.
  for (const ExcEntry& e : rb.out.exc) {
    auto add = [&](int s, int t, int target) {
      if (s > t) return;
      ExcEntry x = e;
      x.start = remap(s), x.end = remap(t), x.target = target;
      out.exc.push_back(x);
    };
    if (e.end < kb || e.start > bb) {
      add(e.start, e.end, remap(e.target));
      continue;
    }
    add(e.start, kb - 1, remap(e.target));
    int h = emit("LOAD_CONST", c_true);
    emit("STORE_FAST", native);
    emit("JUMP_BACKWARD", 0, remap(e.target));
    ExcEntry mid = e;
    mid.start = remap(std::max(e.start, kb)), mid.end = remap(std::min(e.end, bb)), mid.target = h;
    out.exc.push_back(mid);
    add(bb + 1, e.end, remap(e.target));
  }
  std::sort(out.exc.begin(), out.exc.end(), [](const ExcEntry& a, const ExcEntry& c) { return a.start < c.start; });

  rb.out = std::move(out);
  stub.code = assemble_resume(code, rb, "", consts_tuple.get());
  if (log_enabled(LogArtifact::bytecode)) {
    try {
      log_emit(LogArtifact::bytecode, "ORIGINAL BYTECODE\n" + disassemble(code) + "GRAPH BREAK STUB at offset " +
                                          std::to_string(2 * unit) + "\n" + disassemble(stub.code));
    } catch (...) {
      Py_DECREF(stub.code);
      throw;
    }
  }
  return stub;
}

}  // namespace ff::bc
