// The interpreter's decoding of a code object (interpreter_impl.h DecodedCode), kept in the code's
// ExtraState. 3.13's pair instructions become two instructions, as in bc::decode. And the
// instructions' trace (FRAMEFUSE_LOGS=+frontend).
#include <Python.h>

#include "frame_eval/bytecode.h"
#include "frame_eval/cache.h"
#include "frame_eval/interpreter_impl.h"
#include "graph/printer.h"
#include "src/base/logging.h"
#include "src/base/errors.h"

namespace ff {

const DecodedCode& decode_code(PyCodeObject* code) {
  // NB: kept in the code's own state (cache.h), which dies with the code.
  ExtraState* state = ensure_extra_state(code);
  if (state->decoded) return *state->decoded;
  auto dc = std::make_shared<DecodedCode>();
  PyRef bytes = PyRef::steal(PyCode_GetCode(code));
  FF_CHECK(bytes, "PyCode_GetCode failed");
  const auto* units = reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.get()));
  int n = static_cast<int>(PyBytes_GET_SIZE(bytes.get()) / 2);
  const OpcodeInfo* table = opcode_table();
  const int ext_op = extended_arg_opcode();
  std::vector<int> index_at_offset(static_cast<size_t>(n) + 2, -1);  // code unit -> instruction
  std::vector<int> next_offset;
  int ext = 0, start = -1;
  for (int u = 0; u < n;) {
    int op = units[2 * u], arg = units[2 * u + 1];
    if (start < 0) start = u;
    if (op == ext_op) {
      ext = (ext | arg) << 8;
      ++u;
      continue;
    }
    const OpcodeInfo& info = table[op];
    int first_half = 0, second_half = 0;
    if (split_pair(op, &first_half, &second_half)) {
      // NB: as bc::decode does, so that instruction indices agree with the assembler's.
      for (int k = start; k <= u; ++k) index_at_offset[static_cast<size_t>(k)] = static_cast<int>(dc->instrs.size());
      for (int half = 0; half < 2; ++half) {
        int hop = half ? second_half : first_half;
        Instr h;
        h.opcode = static_cast<uint8_t>(hop), h.handler = table[hop].handler, h.flags = table[hop].flags;
        h.arg = half ? ((ext | arg) & 15) : ((ext | arg) >> 4);
        h.offset = u;
        dc->instrs.push_back(h);
        next_offset.push_back(u + 1);
      }
      u += 1;
      ext = 0;
      start = -1;
      continue;
    }
    Instr ins;
    ins.opcode = static_cast<uint8_t>(op);
    ins.handler = info.name ? info.handler : Handler::Unsupported;
    ins.flags = info.flags;
    ins.arg = ext | arg;
    ins.offset = u;
    int index = static_cast<int>(dc->instrs.size());
    for (int k = start; k <= u; ++k) index_at_offset[static_cast<size_t>(k)] = index;
    dc->instrs.push_back(ins);
    next_offset.push_back(u + 1 + info.caches);
    u += 1 + info.caches;
    ext = 0;
    start = -1;
  }
  for (size_t i = 0; i < dc->instrs.size(); ++i) {
    Instr& ins = dc->instrs[i];
    if (ins.flags & (kJumpForward | kJumpBackward)) {
      int target = (ins.flags & kJumpForward) ? next_offset[i] + ins.arg : next_offset[i] - ins.arg;
      FF_CHECK(target >= 0 && target < n, "jump target out of range");
      ins.jump = index_at_offset[static_cast<size_t>(target)];
    }
  }
  dc->nlocalsplus = static_cast<int>(PyTuple_GET_SIZE(code->co_localsplusnames));
  PyObject* exc_table = code->co_exceptiontable;
  if (exc_table && PyBytes_Check(exc_table))
    for (const bc::RawExcEntry& e : bc::parse_exception_table(std::string(PyBytes_AS_STRING(exc_table), PyBytes_GET_SIZE(exc_table))))
      dc->handled.emplace_back(e.start, e.start + e.length);
  state->decoded = dc;
  return *dc;
}

// `TRACE LOAD_ATTR 3  file.py:12 in fn  [Tensor f32[8, 8], torch]`: as Dynamo's +dynamo trace, the
// stack's top (at most four values) before the instruction; an inlined frame is indented.
void SymbolicTracer::log_instruction(const Frame& f, const Instr& ins) {
  std::string line(2 * static_cast<size_t>(f.depth), ' ');
  const char* name = opcode_table()[ins.opcode].name;
  line += std::string("TRACE ") + (name ? name : "?") + " " + std::to_string(ins.arg) + "  ";
  line += PyUnicode_AsUTF8(f.code->co_filename) + std::string(":") + std::to_string(PyCode_Addr2Line(f.code, ins.offset)) +
          " in " + PyUnicode_AsUTF8(f.code->co_name) + "  [";
  size_t first = f.stack.size() > 4 ? f.stack.size() - 4 : 0;
  if (first > 0) line += "..., ";
  for (size_t i = first; i < f.stack.size(); ++i) {
    const Sym& v = f.stack[i];
    std::string d = !v ? "NULL"
                    : v->is(SymKind::Tensor) && v->node >= 0
                        ? "tensor " + out_.graph.node(v->node).name + ": " + meta_str(out_.graph.node(v->node).meta)
                        : describe_sym(v);
    line += (i > first ? ", " : "") + (d.size() > 60 ? d.substr(0, 57) + "..." : d);
  }
  log_emit(LogComponent::frontend, LogLevel::Debug, line + "]");
}

}  // namespace ff
