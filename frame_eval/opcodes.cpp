#include "frame_eval/opcodes.h"

#include <cstring>

namespace ff {

const char* handler_name(Handler h) {
  static const char* names[] = {
#define FF_HANDLER_NAME(h) #h,
      FF_HANDLERS(FF_HANDLER_NAME)
#undef FF_HANDLER_NAME
  };
  return names[static_cast<size_t>(h)];
}

int opcode_number(const char* name) {
  const OpcodeInfo* table = opcode_table();
  for (int o = 0; o < 256; ++o)
    if (table[o].name && std::strcmp(table[o].name, name) == 0) return o;
  return -1;
}

bool load_attr_method_bit() {
  static const bool bit = opcode_table()[opcode_number("LOAD_ATTR")].handler == Handler::LoadAttrMethodBit;
  return bit;
}

namespace {
// halves[op]: the two opcodes a pair instruction stands for, {-1, -1} for other opcodes.
struct PairTable {
  int halves[256][2];
  PairTable() {
    static const char* const kPairs[][3] = {{"LOAD_FAST_LOAD_FAST", "LOAD_FAST", "LOAD_FAST"},
                                            {"STORE_FAST_LOAD_FAST", "STORE_FAST", "LOAD_FAST"},
                                            {"STORE_FAST_STORE_FAST", "STORE_FAST", "STORE_FAST"}};
    for (auto& h : halves) h[0] = h[1] = -1;
    for (const auto& p : kPairs) {
      int op = opcode_number(p[0]);
      if (op >= 0 && opcode_table()[op].handler == Handler::SplitPair)
        halves[op][0] = opcode_number(p[1]), halves[op][1] = opcode_number(p[2]);
    }
  }
};
const PairTable& pairs() {
  static const PairTable table;
  return table;
}
}  // namespace

bool split_pair(int op, int* first, int* second) {
  if (op < 0 || op > 255 || pairs().halves[op][0] < 0) return false;
  *first = pairs().halves[op][0], *second = pairs().halves[op][1];
  return true;
}

int fused_pair(int first, int second) {
  for (int op = 0; op < 256; ++op)
    if (pairs().halves[op][0] == first && pairs().halves[op][1] == second && first >= 0) return op;
  return -1;
}

std::vector<std::string> unsupported_opcodes_report() {
  std::vector<std::string> out;
  const OpcodeInfo* table = opcode_table();
  for (int op = 0; op < 256; ++op) {
    if (table[op].name && table[op].handler == Handler::Unsupported)
      out.push_back(std::string(table[op].name) + " (" + std::to_string(op) + ")");
  }
  return out;
}

}  // namespace ff
