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

namespace {
const char* const kPairs[][3] = {{"LOAD_FAST_LOAD_FAST", "LOAD_FAST", "LOAD_FAST"},
                                 {"STORE_FAST_LOAD_FAST", "STORE_FAST", "LOAD_FAST"},
                                 {"STORE_FAST_STORE_FAST", "STORE_FAST", "STORE_FAST"}};
}  // namespace

int opcode_number(const char* name) {
  const OpcodeInfo* table = opcode_table();
  for (int o = 0; o < 256; ++o)
    if (table[o].name && std::strcmp(table[o].name, name) == 0) return o;
  return -1;
}

bool load_attr_method_bit() { return opcode_table()[opcode_number("LOAD_ATTR")].handler == Handler::LoadAttrMethodBit; }

int fused_pair(int first, int second) {
  for (int op = 0; op < 256; ++op) {
    int a = 0, b = 0;
    if (split_pair(op, &a, &b) && a == first && b == second) return op;
  }
  return -1;
}

bool split_pair(int op, int* first, int* second) {
  const OpcodeInfo* table = opcode_table();
  if (op < 0 || op > 255 || !table[op].name || table[op].handler != Handler::SplitPair) return false;
  for (const auto& p : kPairs) {
    if (std::strcmp(table[op].name, p[0]) != 0) continue;
    *first = opcode_number(p[1]), *second = opcode_number(p[2]);
    return *first >= 0 && *second >= 0;
  }
  return false;
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
