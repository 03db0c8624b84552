// Internals shared by lower.cpp (the lowering driver and the tensor algebra) and lower_ops.cpp
// (the per-op rule table). Not a public interface.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/op_registry.h"
#include "inductor/loop_ir.h"
#include "inductor/lower.h"

namespace ff::inductor {

using loop::Expr;
using Idx = std::vector<Expr>;

// A lowered tensor: its value at any index as a loop IR expression (in the compute type of
// `dtype`), and, when it lives in memory, the view of the buffer that holds it.
struct LT {
  SymShape sizes;  // NB: see loop::Stmt::extent: reading a symbolic size as an int specialises it
  DType dtype = DType::Float32;
  std::function<Expr(const Idx&)> at;
  std::optional<loop::TensorRef> ref;
  int cost = 0;  // loop IR nodes per element when inlined, counting each operand once (the fusion heuristics' cost)
  // Loop IR nodes per element when inlined, counting an operand each time a rule reads it (set by
  // map; 0: as `cost`). Bounds the expression's real size.
  int64_t tree = 0;
  int64_t size() const { return std::max<int64_t>(cost, tree); }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  SymInt numel() const;
};

// Thrown by an op lowering that cannot handle its operands: the node becomes an extern call.
struct NoLowering : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Lowerer;
using OpLowering = LT (*)(Lowerer& L, const Node& n);
// Op -> lowering, null where an op has none (lower_ops.cpp, lower_ops_extra.cpp). Open ops have none.
using OpRules = OpTable<OpLowering>;
const OpRules& op_lowerings();
void add_extra_rules(OpRules& rules);  // lower_ops_extra.cpp
void add_math_rules(OpRules& rules);   // lower_ops_math.cpp
void add_pointwise_rules(OpRules& rules);  // lower_ops_pointwise.cpp (after the others: it reuses sign's)

class Lowerer {
 public:
  Lowerer(const Graph& g, std::vector<std::string>* notes, EagerDevice like = EagerDevice::CPU) : g_(g), notes_(notes), like_(like) {}
  loop::Program run();
  EagerDevice like() const { return like_; }

  // ---- operands of the node being lowered ----
  const Value& arg(const Node& n, const char* name) const;
  bool has_arg(const Node& n, const char* name) const;
  LT tensor(const Value& v);          // a node's LT or a Python scalar as a 0-d LT; NoLowering else
  LT tensor_arg(const Node& n, const char* name) { return tensor(arg(n, name)); }
  const TensorMeta& out_meta(const Node& n) const;

  // ---- the algebra ----
  static LT scalar(double v, DType dt);
  static LT scalar_int(int64_t v);  // an exact int64 constant
  static LT symbolic_int(const SymInt& v);  // a Python int that varies: int64 read from the sizes

  static LT cast(const LT& x, DType dt);
  static LT broadcast(const LT& x, const SymShape& sizes);
  // Elementwise over broadcast operands, each first converted to dtype `compute` (as eager converts
  // operands to the common dtype: a Python scalar in an f16 op rounds to f16, in an int8 op wraps);
  // fn computes in compute's loop type and the result, of dtype `out`, is narrowed to it.
  // Ops that take a scalar at opmath precision pass float_compute_dtype(out) as `compute`.
  static LT map(const std::vector<LT>& xs, DType compute, DType out,
                const std::function<Expr(const std::vector<Expr>&)>& fn);
  static LT unary(loop::UnaryOp op, const LT& x, DType dt);
  static LT binary(loop::BinaryOp op, const LT& a, const LT& b, DType dt);
  static LT permute(const LT& x, const std::vector<int64_t>& perm);
  LT reshape(const LT& x, const SymShape& sizes);
  // Reduces `dims` of x (empty: all) with `op`, accumulating in `acc` (realizes a kernel).
  LT reduce(const LT& x, std::vector<int64_t> dims, bool keepdim, loop::ReduceOp op, DType acc);
  // Stores x into a new buffer with `strides` (a kernel), returns its view.
  LT realize(const LT& x, const SymShape& strides, loop::BufferRole role, NodeId node,
             const std::string& why);
  LT realize_contiguous(const LT& x, const std::string& why);
  // x stored once where it calls vector math and several loops of a decomposition read it (softmax's
  // max, sum and output): recomputed, its vector and scalar copies could disagree by an ulp, and
  // x - max(x) would not be 0 at the max (nor x == max(x) for argmax).
  LT consistent(const LT& x);
  // Eager raises RuntimeError(message) where an element of `bad` (bool, the op's broadcast shape)
  // is true: the program counts them and the runtime raises after its kernels (loop::Check).
  // NoLowering where the graph may not raise late: it writes an input, draws random numbers, or
  // (found when the program is done: lower_graph then lowers it again without checks) calls torch.
  void check_none(const LT& bad, const std::string& message);
  bool checks_allowed() const { return checks_allowed_; }
  void disallow_checks() { checks_allowed_ = false; }
  // Runs node n (or `op` with `args`) through torch; tensors in args are realized first.
  LT extern_call(const Node& n, NodeId id, OpId op, std::vector<Value> args, const std::string& reason);

  NodeId current() const { return current_; }
  const Graph& graph() const { return g_; }
  void note(const std::string& s) {
    if (notes_) notes_->push_back(s);
  }

 private:
  std::optional<LT> lower_node(NodeId id);
  std::string write_input(NodeId id);
  void store_kernel(const LT& x, int b, const SymShape& strides);  // x into buffer b
  loop::TensorRef ensure_ref(NodeId id, const std::string& why);
  int new_buffer(DType dt, SymShape sizes, SymShape strides, loop::BufferRole role, NodeId node);
  LT from_ref(const loop::TensorRef& r, DType dt) const;
  // Storage sharing of outputs as in eager (lower_alias.cpp).
  void plan_aliases();
  void alias_outputs();
  NodeId storage_root(NodeId id) const;  // eager: the node that owns the memory id's result is in
  int buffer_storage(int buf) const;      // the buffer whose memory buf is (extern views followed)

  const Graph& g_;
  std::vector<std::string>* notes_;
  EagerDevice like_;
  loop::Program prog_;
  std::vector<std::optional<LT>> values_;
  std::vector<int> users_;
  std::vector<NodeId> input_root_;  // a tensor placeholder, or an in-place write of one: that placeholder; -1
  std::vector<NodeId> write_feeds_;  // computed on the first write of an input: see writes_fed (lower.cpp)
  std::unordered_map<NodeId, std::vector<LT>> tuple_items_;  // lowered items of a tuple call (max(x, dim))
  // Operands of extern calls in layouts torch's kernels take as they are (lower_extern_operands.cpp):
  // SDPA's attn_mask on CUDA with a unit-stride last dim, batched products' operands as BLAS operands.
  static NodeId attention_mask_node(OpId op, const std::vector<Value>& args);  // -1: none
  loop::TensorRef attention_mask_operand(NodeId mask, NodeId call);
  void blas_operand_layouts(loop::ExternCall& e, size_t num_operands);
  std::unordered_map<NodeId, loop::TensorRef> unit_stride_masks_;  // per mask node, the unit-stride ref SDPA reads
  // Tuple calls lowered as their items (lower_tuples.cpp), where the graph reads only the items:
  // torch.max / min (x, dim) as amax and argmax, frexp's mantissa and exponent.
  bool lower_tuple_items(NodeId id);
  bool lower_max_min_with_dim(NodeId id);
  bool lower_frexp(NodeId id);
  bool only_items_read(NodeId id) const;
  std::vector<NodeId> alias_parent_;  // eager: the operand whose memory a node's result is in, or -1
  std::vector<bool> shares_storage_;  // stored when lowered: its memory is seen through several outputs
  NodeId current_ = -1;
  bool checks_allowed_ = true;
};

DType float_compute_dtype(DType dt);  // f16/bf16 -> f32; others unchanged
std::string node_desc(const Graph& g, NodeId id);  // "name (target)", for notes and errors
bool supported_dtype(DType dt);  // dtypes kernels compute in

class Lowerer;
// a // b with eager's rounding (floor_divide, div(rounding_mode="floor")), and int a / b truncated
// (div(rounding_mode="trunc")); lower_ops_math.cpp. NoLowering where eager may raise.
LT floor_divide(Lowerer& L, const Node& n, const Value& a, const Value& b);
LT trunc_divide_int(Lowerer& L, const Node& n, const Value& a, const Value& b);

// Short forms the rule files write their formulas in: a literal of `like`'s type, binary and unary
// math, selection.
namespace formula {
inline Expr c(double v, const Expr& like) { return loop::const_of(v, like->type); }
inline Expr bin(loop::BinaryOp op, const Expr& a, const Expr& b) { return loop::binary(op, a, b); }
inline Expr un(loop::UnaryOp op, const Expr& a) { return loop::unary(op, a); }
inline Expr sel(const Expr& cond, const Expr& a, const Expr& b) { return loop::select(cond, a, b); }
}  // namespace formula

// The dims of a reduction's `dim` argument (an int or a list; empty for None); lower_ops.cpp.
std::vector<int64_t> dims_of(const Value& v);
// `v` as eager converts a Python int to the integer dtype `dt` (two's complement wrap); lower_ops_math.cpp.
int64_t wrap_to(int64_t v, DType dt);
// Helpers of the rule files (lower_ops_extra.cpp).
// NaN-preserving clamp of x to [lo, hi] (either may be absent).
Expr clamp_expr(const Expr& x, const Expr* lo, const Expr* hi);
// NoLowering where the call's `inplace` argument is True.
void no_inplace(Lowerer& L, const Node& n);
// The number argument `name` (NoLowering where it is not a constant).
double number(Lowerer& L, const Node& n, const char* name);
// fn elementwise over the node's first operand in the float compute type of the result
// (NoLowering for an integer result; int operands are converted first, as eager's float ops do).
LT float_map(Lowerer& L, const Node& n, const std::function<Expr(const Expr&)>& fn);
// fn elementwise over the node's first operand in the compute type of the result (not bool).
LT any_map(Lowerer& L, const Node& n, const std::function<Expr(const Expr&)>& fn);

// Whether the graph is lowered for CUDA, whose eager kernels compute some ops by other formulas
// than CPU's (the ATen CUDA kernel each rule follows is named there).
inline bool on_cuda(const Lowerer& L) { return L.like() == EagerDevice::CUDA; }

// Rounds a value to the dtype `dt` (f16/bf16, 8/16-bit ints; others are computed in their own type):
// each step of eager's composites, whose steps are separate ops writing tensors of the dtype.
inline std::function<Expr(Expr)> rounding_to(DType dt) {
  if (!loop::needs_narrowing(dt)) return [](Expr e) { return e; };
  return [dt](Expr e) { return loop::narrow(std::move(e), dt); };
}

// a * b + c (floats) as eager's kernel for `c + b * a` rounds it: once (a fused multiply-add) on a CPU
// whose eager kernels fuse it (eager_cpu_fma), else the product first. NB: eager CUDA's kernels are
// contracted by nvcc, and NVRTC contracts a * b + c within one op's formula alike (loop_ir.h).
inline Expr mul_add(const Lowerer& L, Expr a, Expr b, Expr c) {
  if (!on_cuda(L) && eager_cpu_fma() && loop::is_float(a->type))
    return loop::fma(std::move(a), std::move(b), std::move(c));
  return loop::binary(loop::BinaryOp::Add, loop::binary(loop::BinaryOp::Mul, std::move(a), std::move(b)), std::move(c));
}

// torch's strides for a view of (sizes, strides) as `shape`; nullopt where reshape copies.
std::optional<SymShape> view_strides(const SymShape& oldshape, const SymShape& oldstride, const SymShape& shape);

}  // namespace ff::inductor
