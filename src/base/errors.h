// Error types. Two channels (STYLE.md):
//  - UserError and its subclasses name the user's objects and say what to do. Their text is a
//    contract and is tested verbatim.
//  - InternalError carries our file:line (and usually an IR printout). During tracing or compiling
//    it becomes an eager fallback with a log line, never a crash.
#pragma once

#include <stdexcept>
#include <string>

namespace ff {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A construct framefuse cannot capture (graph break reason). `fullgraph=True` surfaces it.
class Unsupported : public UserError {
 public:
  using UserError::UserError;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void throw_internal(const char* file, int line, const std::string& msg);

}  // namespace ff

// FF_CHECK(cond, msg): an internal invariant. Failing it throws InternalError with our file:line.
// clang-format off
#define FF_CHECK(cond, msg)                                              \
  do {                                                                   \
    if (!(cond)) ::ff::throw_internal(__FILE__, __LINE__, std::string("check failed: " #cond ": ") + (msg)); \
  } while (0)
// clang-format on
