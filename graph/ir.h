// The graph IR: a Graph is a list of Nodes in execution order; each Node produces one result
// (a tensor, a Python scalar, or a tuple of those) and takes Values as operands.
//
// Text form (see printer.h), FX-like:
//
//   def forward(self, x: "f32[4, 8]", w: "f32[16, 8]"):
//       linear: "f32[4, 16]" = torch.nn.functional.linear(x, w)
//       relu: "f32[4, 16]" = torch.relu(linear)
//       return (relu,)
//
// NB: nodes are referred to by index (NodeId) rather than pointer, so a Graph is a plain value:
// passes take `const Graph&` and build a new Graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph/dtype.h"
#include "graph/symint.h"

namespace ff {

using NodeId = int32_t;
using OpId = int32_t;
constexpr OpId kNoOp = -1;

// ---- metadata -------------------------------------------------------------------------------

// NB: sizes and strides may be symbolic (graph/symint.h); reading one as int64_t specialises it.
struct TensorMeta {
  SymShape sizes;
  SymShape strides;  // in elements
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  SymInt numel() const;
  bool is_contiguous() const;  // torch's definition: size-1 dims may have any stride
  // NB: structural: [s0] and [8] differ even where s0 was 8 in the trace. Passes and the verifier
  // compare metas this way, and it records no guards.
  bool operator==(const TensorMeta& o) const;
  bool is_symbolic() const { return sizes.is_symbolic() || strides.is_symbolic(); }

  static SymShape contiguous_strides(const SymShape& sizes);
  static TensorMeta contiguous(SymShape sizes, DType dtype, Device device = {});
};

// What a node produces (or what a placeholder receives).
struct ValueMeta {
  // X(kind, printed form when it is a scalar type)
  // clang-format off
#define FF_VALUE_META_KINDS(X) \
  X(Tensor, "Tensor")          \
  X(Int, "int")                \
  X(Float, "float")            \
  X(Bool, "bool")              \
  X(None, "None")              \
  X(Tuple, "tuple")
  // clang-format on
  enum class Kind : uint8_t {
#define FF_VM_ENUM(k, s) k,
    FF_VALUE_META_KINDS(FF_VM_ENUM)
#undef FF_VM_ENUM
  };

  Kind kind = Kind::None;
  TensorMeta tensor;            // Kind::Tensor
  std::vector<ValueMeta> items;  // Kind::Tuple
  // Kind::Int: a Python int that varies between calls (a placeholder bound to a size symbol, graph/
  // symint.h): its expression, and its value in the traced call. 0: an int of any value.
  SymExprId sym = 0;
  int64_t hint = 0;

  static ValueMeta of_tensor(TensorMeta t) {
    ValueMeta m;
    m.kind = Kind::Tensor;
    m.tensor = std::move(t);
    return m;
  }
  static ValueMeta of(Kind k) {
    ValueMeta m;
    m.kind = k;
    return m;
  }
  static ValueMeta of_symint(const SymInt& v) {
    ValueMeta m = of(Kind::Int);
    m.sym = v.expr();
    m.hint = v.hint();
    return m;
  }
  SymInt as_symint() const { return SymInt::of_expr(sym, hint); }
  static ValueMeta tuple(std::vector<ValueMeta> items) {
    ValueMeta m;
    m.kind = Kind::Tuple;
    m.items = std::move(items);
    return m;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  bool operator==(const ValueMeta&) const = default;
  // The tensor, or any item of a tuple, requires grad; clear_requires_grad makes none require it.
  bool requires_grad() const;
  void clear_requires_grad();
};

// ---- operands -------------------------------------------------------------------------------

// An operand of a node: a constant or a reference to another node's result.
struct Value {
  // X(kind, what it holds)
  // clang-format off
#define FF_VALUE_KINDS(X)                                        \
  X(None, "Python None")                                         \
  X(Bool, "b")                                                   \
  X(Int, "i; a symbolic size (graph/symint.h) where sym != 0, i its hint")  \
  X(Float, "f (prints with enough digits to round-trip)")        \
  X(Str, "s")                                                    \
  X(DType, "dtype: torch.float32 ...")                           \
  X(Device, "device: torch.device('cpu')")                       \
  X(MemoryFormat, "s: contiguous_format / channels_last ...")    \
  X(Layout, "s: strided")                                        \
  X(Ellipsis, "Python ...")                                      \
  X(Slice, "items[0..2]: start, stop, step (each None or Int or Node)") \
  X(List, "items")                                               \
  X(Tuple, "items")                                              \
  X(Node, "node: the result of another node")
  // clang-format on
  enum class Kind : uint8_t {
#define FF_VALUE_ENUM(k, doc) k,
    FF_VALUE_KINDS(FF_VALUE_ENUM)
#undef FF_VALUE_ENUM
  };

  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  DType dtype = DType::Float32;
  Device device;
  NodeId node = -1;
  std::vector<Value> items;
  // Int: the expression of a size that varies between calls. NB: only the ops that read it as a
  // SymInt (as_symint) receive one (the frontend specialises it for the others): `i` alone is the
  // traced value.
  SymExprId sym = 0;

  static Value none() { return {}; }
  static Value of_bool(bool v) {
    Value x;
    x.kind = Kind::Bool;
    x.b = v;
    return x;
  }
  static Value of_int(int64_t v) {
    Value x;
    x.kind = Kind::Int;
    x.i = v;
    return x;
  }
  static Value of_symint(const SymInt& v) {
    Value x = of_int(v.hint());
    x.sym = v.expr();
    return x;
  }
  SymInt as_symint() const { return SymInt::of_expr(sym, i); }
  static Value of_float(double v) {
    Value x;
    x.kind = Kind::Float;
    x.f = v;
    return x;
  }
  static Value of_str(std::string v) {
    Value x;
    x.kind = Kind::Str;
    x.s = std::move(v);
    return x;
  }
  static Value of_dtype(DType t) {
    Value x;
    x.kind = Kind::DType;
    x.dtype = t;
    return x;
  }
  static Value of_device(Device d) {
    Value x;
    x.kind = Kind::Device;
    x.device = d;
    return x;
  }
  static Value of_memory_format(std::string v) {
    Value x;
    x.kind = Kind::MemoryFormat;
    x.s = std::move(v);
    return x;
  }
  static Value of_layout(std::string v) {
    Value x;
    x.kind = Kind::Layout;
    x.s = std::move(v);
    return x;
  }
  static Value ellipsis() {
    Value x;
    x.kind = Kind::Ellipsis;
    return x;
  }
  static Value slice(Value start, Value stop, Value step) {
    Value x;
    x.kind = Kind::Slice;
    x.items = {std::move(start), std::move(stop), std::move(step)};
    return x;
  }
  static Value list(std::vector<Value> v) {
    Value x;
    x.kind = Kind::List;
    x.items = std::move(v);
    return x;
  }
  static Value tuple(std::vector<Value> v) {
    Value x;
    x.kind = Kind::Tuple;
    x.items = std::move(v);
    return x;
  }
  static Value of_node(NodeId n) {
    Value x;
    x.kind = Kind::Node;
    x.node = n;
    return x;
  }

  bool is_none() const { return kind == Kind::None; }
  bool is_node() const { return kind == Kind::Node; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : kind == Kind::Int ? double(i)
                                                                                : double(b); }
  bool operator==(const Value&) const = default;

  // Calls fn(NodeId) for every node this value refers to, nested ones included.
  template <class Fn>
  void for_each_node(Fn&& fn) const {
    if (kind == Kind::Node) fn(node);
    for (const Value& v : items) v.for_each_node(fn);
  }
};

// ---- nodes and graphs -----------------------------------------------------------------------

// X(kind, semantics)
// clang-format off
#define FF_NODE_KINDS(X)                                                                     \
  X(Placeholder, "a graph input; `target` is its name; meta describes what callers pass")     \
  X(Call, "calls op `op` (an entry of the op registry) with `args`/`kwargs`")                 \
  X(Output, "the graph result: args[0] is a Value (usually a Tuple) built from node results") \
  X(GetItem, "args[0] is a node producing a tuple; args[1] an Int index: that element")
// clang-format on

enum class NodeKind : uint8_t {
#define FF_NODE_ENUM(k, doc) k,
  FF_NODE_KINDS(FF_NODE_ENUM)
#undef FF_NODE_ENUM
};
const char* node_kind_name(NodeKind k);

struct Node {
  NodeKind kind = NodeKind::Call;
  std::string name;  // unique within the graph; printed as the result variable
  OpId op = kNoOp;   // Call only
  // Call: bound to the op schema, exactly one Value per schema parameter (defaults filled in).
  // GetItem: {tuple node, index}. Output: {result}.
  std::vector<Value> args;
  ValueMeta meta;
  // Made inside torch.utils.checkpoint: AOT autograd's backward computes it again instead of the
  // forward saving it (graph/autograd/autograd.h). Copies of the node keep it.
  bool checkpointed = false;
};

class Graph {
 public:
  // Checked factories. Each validates its arguments and throws ff::InternalError on misuse.
  NodeId add_placeholder(const std::string& name, ValueMeta meta);
  // `args` must already be bound to the op's schema (see op_registry.h bind_call).
  NodeId add_call(OpId op, std::vector<Value> args, ValueMeta meta, const std::string& name_hint = "");
  NodeId add_getitem(NodeId tuple_node, int64_t index, const std::string& name_hint = "getitem");
  NodeId set_output(Value result);
  // While on, calls and getitems added are marked `checkpointed` (the interpreter inside
  // torch.utils.checkpoint).
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutable_node(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

  std::vector<NodeId> placeholders() const;
  std::optional<NodeId> output() const;  // the Output node, if set
  const Value& output_value() const;     // args[0] of the Output node

  // Metadata of a value: a node's meta, or the meta a constant has.
  ValueMeta meta_of(const Value& v) const;

  // A fresh unique name derived from `hint` (`add`, `add_1`, ...). Python keywords and the
  // builtins and modules printed graph code refers to (`sum`, `torch`, `float` ...) are never
  // handed out, so graph code stays valid Python and parses back unambiguously.
  std::string unique_name(const std::string& hint);
  static bool is_reserved_name(const std::string& name);

 private:
  std::vector<Node> nodes_;
  bool checkpointing_ = false;
  std::unordered_set<std::string> used_names_;
  std::unordered_map<std::string, int> next_suffix_;
  friend class GraphBuilderAccess;
};

}  // namespace ff
