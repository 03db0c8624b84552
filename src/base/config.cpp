#include "src/base/config.h"

namespace ff {

Config& config() {
  static Config c;
  return c;
}

}  // namespace ff
