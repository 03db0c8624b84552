// torch's own operator schemas, as the open registry reads them (DESIGN.md 5b).
//
// An op graph/ops.def does not list is resolved, when a call of it is first seen, to the ATen
// operator of the same name: `torch.linalg.svd` is `aten::linalg_svd`, `torch.Tensor.sort_` is
// `aten::sort_`. Its overloads come as schema text,
//
//   aten::sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)
//   aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)
//
// and each one a Python call can mean becomes an OpDef: parameters with torch's names, types and
// defaults (the Python spelling: `self` of a function is `input`; the `Tensor(a!)` out arguments
// of an out= overload are one `out` keyword), and traits from the alias annotations (a result
// that aliases an operand is a view; `Tensor(a!) self` returned is in place). No Python here: the
// layer that knows torch (graph/python/open_ops.cpp) fetches the text and registers the result.
// A library's operators (torch.library: `torch.ops.mylib.scale_add`, a custom_op) are read the
// same way from their schemas, `mylib::scale_add(Tensor x, float alpha) -> Tensor`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/op_registry.h"

namespace ff {

// One argument or return of an ATen schema, as written.
struct AtenArg {
  std::string type;     // without alias annotations: "Tensor", "int[1]?", "Tensor?[]", "Scalar"
  std::string alias;    // the alias set, "a" of Tensor(a) / Tensor(a!) / Tensor(a -> *)[]; "" if none
  bool write = false;   // `!`: the op writes this argument
  std::string name;     // "" for unnamed returns
  bool has_default = false;
  std::string default_text;  // as written: "-1", "[]", "None", "\"none\"", "contiguous_format"
  bool kwarg_only = false;
};

struct AtenSchema {
  std::string ns = "aten";  // the operator's namespace: "aten", or a library's ("mylib::scale_add")
  std::string name;      // "sort" (without the namespace)
  std::string overload;  // "stable"; "" for the default overload
  std::vector<AtenArg> args;
  std::vector<AtenArg> returns;

  // Out arguments: keyword-only and written (`*, Tensor(a!) values, Tensor(b!) indices`).
  bool is_out_overload() const;
};

// Parses "ns::name.overload(args) -> returns": ATen's operators and those libraries define through
// torch.library (custom ops). Returns false (and *error) on text it does not understand.
bool parse_aten_schema(std::string_view text, AtenSchema* out, std::string* error);

// What the open registry makes of one callable's overloads.
struct OpenOpSpec {
  std::string target;   // dotted path of the callable: "torch.linalg.svd", "torch.Tensor.sort"
  PrintStyle style = PrintStyle::Function;  // Method for torch.Tensor.* (self is the tensor)
  // torch.ops.aten.* callables take the schema's own names (`self`, out arguments by name);
  // torch's Python bindings call `self` of a function `input` and gather out arguments in `out`.
  bool schema_names = false;
  std::vector<AtenSchema> overloads;
  // Overloads torch tags as drawing from its RNG (Tag.nondeterministic_seeded), where the
  // installed torch has tags; a Generator argument or a known name also marks an op random.
  std::vector<std::string> random_overloads;
};

// The OpDefs (unregistered: id unset, names `<target>` or `<target>.<overload>`) a Python call of
// `spec.target` can mean, most specific first: the order binding tries them. Overloads it cannot
// express are left out (Dimname arguments, TorchScript list ops, results that are not tensors,
// writes to an operand the result is not) and *skipped says why, one line each.
std::vector<OpDef> open_op_defs(const OpenOpSpec& spec, std::vector<std::string>* skipped);

}  // namespace ff
