// Opcode facts for the assembler and the byte formats of the exception and line tables.
#include <cstring>

#include "frame_eval/bytecode.h"
#include "frame_eval/opcodes.h"
#include "src/base/errors.h"

namespace ff::bc {

namespace {
bool name_is(int op, const char* name) {
  const char* n = opname(op);
  return n && std::strcmp(n, name) == 0;
}
}  // namespace

const char* opname(int op) {
  if (op < 0 || op > 255) return nullptr;
  return opcode_table()[op].name;
}

// NB: CACHE counts come from the interpreter's table (checked against dis._inline_cache_entries
// by its tests) so that the two never disagree; a wrong count crashes 3.12 (cpython-frames §3.6.1).
int cache_count(int op) { return opcode_table()[op].caches; }

bool is_jump(int op) {
  // SEND is a forward jump the interpreter does not run, so its table entry carries no jump flag.
  return (opcode_table()[op].flags & (kJumpForward | kJumpBackward)) != 0 || name_is(op, "SEND");
}

bool is_backward_jump(int op) { return (opcode_table()[op].flags & kJumpBackward) != 0; }

bool is_unconditional_jump(int op) {
  return name_is(op, "JUMP_FORWARD") || name_is(op, "JUMP_BACKWARD") || name_is(op, "JUMP_BACKWARD_NO_INTERRUPT");
}

bool is_terminator(int op) {
  return is_unconditional_jump(op) || name_is(op, "RETURN_VALUE") || name_is(op, "RETURN_CONST") ||
         name_is(op, "RAISE_VARARGS") || name_is(op, "RERAISE");
}

int stack_effect(int op, int arg, bool jump) {
  // The compiler computes depths before it prepends RETURN_GENERATOR; POP_TOP; at run time the
  // resumed frame finds the sent value on the stack, which that POP_TOP discards.
  if (name_is(op, "RETURN_GENERATOR")) return 1;
  int e = PyCompile_OpcodeStackEffectWithJump(op, arg, jump ? 1 : 0);
  if (e == PY_INVALID_STACK_EFFECT) {
    PyErr_Clear();
    FF_CHECK(false, std::string("no stack effect for opcode ") + (opname(op) ? opname(op) : std::to_string(op)));
  }
  return e;
}

// ---- exception table: 6-bit chunks, most significant first, 0x40 = more, 0x80 = entry start ----

namespace {
void put_varint_msb(std::string& out, unsigned v, bool first) {
  int shift = 0;
  while ((v >> shift) >= 64) shift += 6;
  bool mark = first;
  for (; shift >= 0; shift -= 6) {
    unsigned char b = (v >> shift) & 63;
    if (shift) b |= 0x40;
    if (mark) b |= 0x80, mark = false;
    out.push_back(static_cast<char>(b));
  }
}

unsigned get_varint_msb(const std::string& s, size_t& i) {
  FF_CHECK(i < s.size(), "exception table ends inside an entry");
  unsigned char b = s[i++];
  unsigned v = b & 63;
  while (b & 0x40) {
    FF_CHECK(i < s.size(), "exception table ends inside a varint");
    b = s[i++];
    FF_CHECK(!(b & 0x80), "exception table: entry marker inside a varint");
    v = (v << 6) | (b & 63);
  }
  return v;
}
}  // namespace

std::vector<RawExcEntry> parse_exception_table(const std::string& bytes) {
  std::vector<RawExcEntry> out;
  size_t i = 0;
  while (i < bytes.size()) {
    FF_CHECK(static_cast<unsigned char>(bytes[i]) & 0x80, "exception table: entry without the 0x80 start marker");
    RawExcEntry e{};
    e.start = static_cast<int>(get_varint_msb(bytes, i));
    e.length = static_cast<int>(get_varint_msb(bytes, i));
    e.target = static_cast<int>(get_varint_msb(bytes, i));
    unsigned dl = get_varint_msb(bytes, i);
    e.depth = static_cast<int>(dl >> 1);
    e.lasti = dl & 1;
    out.push_back(e);
  }
  return out;
}

std::string write_exception_table(const std::vector<RawExcEntry>& entries) {
  std::string out;
  for (const RawExcEntry& e : entries) {
    FF_CHECK(e.length >= 1 && e.start >= 0 && e.target >= 0 && e.depth >= 0, "bad exception table entry");
    put_varint_msb(out, e.start, true);
    put_varint_msb(out, e.length, false);
    put_varint_msb(out, e.target, false);
    put_varint_msb(out, (static_cast<unsigned>(e.depth) << 1) | (e.lasti ? 1u : 0u), false);
  }
  return out;
}

// ---- line table (PEP 626/657): varints least significant chunk first ----

namespace {
void put_varint_lsb(std::string& out, unsigned v) {
  while (v >= 64) {
    out.push_back(static_cast<char>((v & 63) | 0x40));
    v >>= 6;
  }
  out.push_back(static_cast<char>(v));
}
void put_svarint(std::string& out, int v) {
  put_varint_lsb(out, v < 0 ? ((static_cast<unsigned>(-v) << 1) | 1u) : (static_cast<unsigned>(v) << 1));
}
unsigned get_varint_lsb(const std::string& s, size_t& i) {
  unsigned v = 0;
  int shift = 0;
  while (true) {
    FF_CHECK(i < s.size(), "line table ends inside a varint");
    unsigned char b = s[i++];
    v |= static_cast<unsigned>(b & 63) << shift;
    shift += 6;
    if (!(b & 0x40)) return v;
  }
}
int get_svarint(const std::string& s, size_t& i) {
  unsigned u = get_varint_lsb(s, i);
  return (u & 1) ? -static_cast<int>(u >> 1) : static_cast<int>(u >> 1);
}
}  // namespace

std::string write_line_table(int firstlineno, const std::vector<int>& lines, const std::vector<int>& units) {
  FF_CHECK(lines.size() == units.size(), "line table: one line per instruction");
  std::string out;
  int prev = firstlineno;
  for (size_t k = 0; k < lines.size(); ++k) {
    int left = units[k];
    FF_CHECK(left >= 1, "line table: an instruction has at least one code unit");
    while (left > 0) {
      int n = left > 8 ? 8 : left;
      left -= n;
      if (lines[k] < 0) {
        out.push_back(static_cast<char>(0x80 | (15 << 3) | (n - 1)));
      } else {
        out.push_back(static_cast<char>(0x80 | (13 << 3) | (n - 1)));
        put_svarint(out, lines[k] - prev);
        prev = lines[k];
      }
    }
  }
  return out;
}

std::vector<int> parse_line_table(const std::string& t, int firstlineno) {
  std::vector<int> out;
  int line = firstlineno;
  size_t i = 0;
  while (i < t.size()) {
    unsigned char first = t[i++];
    FF_CHECK(first & 0x80, "line table: entry without its start bit");
    int code = (first >> 3) & 15, n = (first & 7) + 1;
    int entry_line = line;
    bool none = false;
    if (code == 15) {
      none = true;
    } else if (code == 14) {
      line += get_svarint(t, i);
      entry_line = line;
      get_varint_lsb(t, i), get_varint_lsb(t, i), get_varint_lsb(t, i);
    } else if (code == 13) {
      line += get_svarint(t, i);
      entry_line = line;
    } else if (code >= 10) {
      line += code - 10;
      entry_line = line;
      FF_CHECK(i + 2 <= t.size(), "line table: truncated one-line entry");
      i += 2;
    } else {
      FF_CHECK(i + 1 <= t.size(), "line table: truncated short entry");
      i += 1;
    }
    for (int k = 0; k < n; ++k) out.push_back(none ? -1 : entry_line);
  }
  return out;
}

}  // namespace ff::bc
