#include "frame_eval/opcodes.h"

namespace ff {

const char* handler_name(Handler h) {
  static const char* names[] = {
#define FF_HANDLER_NAME(h) #h,
      FF_HANDLERS(FF_HANDLER_NAME)
#undef FF_HANDLER_NAME
  };
  return names[static_cast<size_t>(h)];
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
