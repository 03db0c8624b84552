#include "src/base/errors.h"

namespace ff {

void throw_internal(const char* file, int line, const std::string& msg) {
  std::string f = file;
  // Report the path from the project root, not the machine's.
  for (const char* root : {"/graph/", "/frame_eval/", "/inductor/", "/src/"}) {
    auto pos = f.rfind(root);
    if (pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  }
  throw InternalError("framefuse internal error at " + f + ":" + std::to_string(line) + ": " + msg);
}

}  // namespace ff
