// Op schemas: the parameter list of a torch-level op, parsed from a compact text form
//
//   "sum(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)"
//
// Types: Tensor, Tensor?, Tensor[], Tensor... (varargs of tensors, or one list), Scalar, Scalar?, int, int?, int[], int[]?, int... (varargs:
// the rest of the positional arguments, or one list), float, float?, bool, bool?, str, str?,
// ScalarType?, Device?, Layout?, MemoryFormat?, Any (anything, checked by the meta rule).
// Parameter names are torch's own, so non-default arguments can be passed by keyword.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace ff {

enum class ParamType : uint8_t { Tensor,
                                 TensorList,
                                 TensorVarargs,
                                 Scalar,
                                 Int,
                                 IntList,
                                 IntVarargs,
                                 Float,
                                 Bool,
                                 Str,
                                 ScalarType,
                                 Device,
                                 Layout,
                                 MemoryFormat,
                                 Any };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::Any;
  bool optional = false;     // `?`: None is accepted
  bool has_default = false;
  Value default_value;
  bool kwarg_only = false;   // after `*`
};

struct OpSchema {
  std::string name;
  std::vector<ParamSpec> params;

  int index_of(std::string_view param) const;  // -1 if absent
  std::string str() const;
};

// Throws InternalError on a malformed schema (they are compiled-in strings).
OpSchema parse_schema(std::string_view text);

// `s` without leading and trailing white space.
std::string_view trim(std::string_view s);
// The comma-separated parts of `s` at bracket depth 0 and outside quotes, each trimmed (a last
// empty part dropped): the argument lists of schemas and graph code.
std::vector<std::string_view> split_top(std::string_view s);

// Parses one constant as it appears in a schema default or in printed graph code
// (None, True, 1, -2.5, 'str', [1, 2], torch.float32, ...). Sets *ok=false on failure.
Value parse_constant(std::string_view text, bool* ok);

}  // namespace ff
