// framefuse.config: typed, documented knobs, each listed once in src/base/config.def.
// The Python module framefuse.config reads and writes these through the bindings and adds
// `framefuse.config.patch(...)` for `with` blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ff {

struct Config {
#define FF_CONFIG_BOOL(name, default_value, doc) bool name = default_value;
#define FF_CONFIG_INT(name, default_value, doc) int64_t name = default_value;
#define FF_CONFIG_STR(name, default_value, doc) std::string name = default_value;
#include "src/base/config.def"
#undef FF_CONFIG_BOOL
#undef FF_CONFIG_INT
#undef FF_CONFIG_STR
};

// The process-wide configuration.
Config& config();

}  // namespace ff
