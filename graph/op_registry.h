// The op registry: every torch-level op the graph IR knows, listed once in graph/ops.def.
//
// An op has
//  - a canonical name (`add`, `relu`, `view`) used for node names and lookups;
//  - a target: the dotted path of the torch (or operator) callable that implements it eagerly
//    (`torch.add`, `torch.Tensor.view`, `operator.add`). Other callables can be aliases of the
//    same op (graph/python/op_callables.cpp maps PyObject* -> OpId);
//  - a print style: how graph code shows a call (function call, method call, infix operator);
//  - a schema (op_schema.h) used to bind call arguments;
//  - a meta rule computing the result's metadata from the operands' (graph/meta_rules.h). Where the
//    rule returns nothing, the Python layer runs the torch op on meta tensors instead;
//  - traits used by passes and the code generator.
//
// The registry is open (DESIGN.md 5b). The ops of graph/ops.def are the hand-written fast path and
// get the first ids; an op they do not list is resolved when a call of it is first seen (by
// graph/python/open_ops.cpp, from torch's own schemas) and registered here at run time with the
// next free id. Ids are stable for the life of the process and an OpDef never moves, so `op_def(id)`
// references stay valid while more ops are registered.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "graph/op_schema.h"

namespace ff {

enum class PrintStyle : uint8_t {
  Function,  // torch.add(x, y)
  Method,    // x.view([2, 3])   (target is torch.Tensor.<name>)
  Infix,     // x + y            (target is operator.<name>; `symbol` holds the operator)
  Prefix,    // -x, ~x
  Subscript, // x[0, 1:3]        (operator.getitem)
};

// Traits (bit flags).
enum OpTrait : uint32_t {
  kPointwise = 1u << 0,   // elementwise with broadcasting
  kReduction = 1u << 1,   // reduces over dims
  kView = 1u << 2,        // result aliases its first input
  kInplace = 1u << 3,     // mutates its first input and returns it
  kRandom = 1u << 4,      // draws from torch's RNG (never CSE'd or constant-folded)
  kCreation = 1u << 5,    // makes a new tensor from sizes only (zeros, arange ...)
  kExtern = 1u << 6,      // matmul / conv: always an extern call in codegen
  kComposite = 1u << 7,   // softmax, norms ...: decomposed by inductor
  kNondeterministicOutput = 1u << 8,  // e.g. empty: contents unspecified (never CSE'd / folded)
  kIndexing = 1u << 9,    // gather / index / embedding
  kInplaceFlag = 1u << 10,  // mutates its first input when its `inplace` argument is True (F.relu)
};

struct OpDef;
struct MetaContext;

// A meta rule returns the result metadata, or nullopt when it does not handle these operands
// (the meta-tensor fallback is used then). It throws MetaError when the call is invalid in eager
// too (shape mismatch ...).
using MetaRule = std::optional<ValueMeta> (*)(const MetaContext& ctx);

struct OpDef {
  OpId id = kNoOp;
  std::string name;    // canonical name
  std::string target;  // dotted path of the eager callable
  PrintStyle style = PrintStyle::Function;
  std::string symbol;  // Infix/Prefix: the operator text
  OpSchema schema;
  MetaRule meta = nullptr;
  uint32_t traits = 0;
  // Ops registered at run time: the ATen operator they were resolved to (`aten::sort.stable`).
  // Empty for the ops of graph/ops.def.
  std::string aten;
  // Ops registered at run time are replayed with exactly as many positional arguments as the call
  // had: torch picks the overload again from what it is given, and with fewer (trailing defaults
  // left out) or more another overload may match (torch.stft with and without `center`, which
  // defaults to True; Tensor.to's keyword-only memory_format). -1: the overload itself, which calls
  // bind to; a call's node holds its variant for its count (op_with_positional).
  int positional = -1;
  OpId overload = kNoOp;  // a variant's overload (positional == -1)

  bool has(OpTrait t) const { return (traits & t) != 0; }
  bool is_open() const { return !aten.empty(); }
};

// The call being typed: its op, bound arguments and the graph that holds the operands.
struct MetaContext {
  const OpDef& op;
  const std::vector<Value>& args;  // bound: one per schema parameter
  const Graph& graph;

  const Value& arg(std::string_view name) const;
  ValueMeta meta(const Value& v) const { return graph.meta_of(v); }
  // The tensor metadata of parameter `name`; throws MetaError if it is not a tensor.
  const TensorMeta& tensor(std::string_view name) const;
};

class MetaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The hand-written ops of graph/ops.def, in id order (ids 0 .. all_ops().size() - 1).
const std::vector<OpDef>& all_ops();
// Every op id in use: the hand-written ones, then those registered at run time.
size_t op_count();
bool is_op(OpId id);
const OpDef& op_def(OpId id);
// Lookups over all ops, hand-written ones first.
std::optional<OpId> op_by_name(std::string_view name);
std::optional<OpId> op_by_target(std::string_view target);
// Every op whose target is `target`, in id order (overloads share a target); empty if none.
std::vector<OpId> ops_with_target(std::string_view target);

// Registers an op at run time; returns its id. `def.name` must be new (InternalError otherwise)
// and `def.id` is ignored. Thread-safe. Throws Unsupported when the registry is full
// (kMaxOpenOps run-time ops).
constexpr size_t kMaxOpenOps = 1 << 15;
OpId register_op(OpDef def);

// The variant of open op `op` (positional == -1) that replays `count` positional arguments,
// registered on first use.
OpId op_with_positional(OpId op, int count);

// Resolves a target that no registered op has (`torch.linalg.svd` read back from graph code) into
// ops, registering them. Installed by the layer that knows torch (graph/python); without one, or
// when it finds nothing, the result is empty.
using OpResolver = std::vector<OpId> (*)(std::string_view target);
void set_op_resolver(OpResolver resolver);
// ops_with_target(target), else what the resolver makes of it.
std::vector<OpId> resolve_target(std::string_view target);

// Binds call arguments to `op`'s schema. On success returns one Value per parameter with defaults
// filled in; on failure returns nullopt and sets *error to a sentence naming the problem.
std::optional<std::vector<Value>> bind_call(const OpDef& op, const std::vector<Value>& positional,
                                            const std::vector<std::pair<std::string, Value>>& keywords,
                                            const Graph& graph, std::string* error);

// How a bound call is passed to the eager callable: leading positional arguments up to the first
// parameter left at its default, then the remaining non-default parameters by keyword. (Variants
// of ops resolved from torch's schemas: their count of positional arguments, see OpDef::positional.)
struct CallArgs {
  std::vector<const Value*> positional;
  std::vector<std::pair<std::string, const Value*>> keywords;
};
CallArgs call_args(const OpDef& op, const std::vector<Value>& bound);

// Runs the op's meta rule. nullopt: no rule for these operands (use the meta-tensor fallback).
std::optional<ValueMeta> infer_meta(const OpDef& op, const std::vector<Value>& bound, const Graph& graph);

}  // namespace ff
