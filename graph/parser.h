// Reads graph code (graph/printer.h) back into a Graph: print -> parse -> print is the identity.
//
// Calls are looked up by their printed form: a dotted function name as the op with that target,
// `x.name(...)` as the op whose target is `torch.Tensor.name`, `a + b` / `-a` / `a[i]` through the
// Infix / Prefix / Subscript ops of the registry. Where several ops share a target or symbol
// (overloads), the first in registry order whose schema binds the arguments is taken. `name = base[i]` with `base` producing a tuple and
// `i` an int literal is a GetItem node. Arguments are rebound with bind_call; each node's metadata
// is read from its annotation, never recomputed (the verifier compares it with the meta rule).
//
// Besides what the printer writes, the parser accepts blank lines and `#` comments, so golden
// files can be written by hand.
#pragma once

#include <string>
#include <string_view>

#include "graph/ir.h"
#include "src/base/errors.h"

namespace ff {

// Bad graph code. what() is
//   line 3, column 33: name 'y' is not defined
//       relu: "f32[4]" = torch.relu(y)
//                                   ^
class ParseError : public UserError {
 public:
  ParseError(int line, int column, const std::string& message, std::string_view source_line);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  int line_;
  int column_;
  std::string message_;
};

// Throws ParseError.
Graph parse_graph(std::string_view text);

// One annotation without its quotes ("f32[4, 8][1, 4]cuda:0 rg", "(f32[2], int)"). Throws
// ParseError (line 1, column within `text`).
ValueMeta parse_meta(std::string_view text);

}  // namespace ff
