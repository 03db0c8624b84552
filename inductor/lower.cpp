// The lowering driver and the tensor algebra the op rules (lower_ops.cpp) are written in.
#include "inductor/lower.h"

#include <algorithm>
#include <numeric>

#include "graph/meta_rules.h"
#include "graph/meta_rules_util.h"
#include "graph/passes/effects.h"
#include "graph/passes/functionalize.h"
#include "graph/passes/specialize_shapes.h"
#include "inductor/loop_visitor.h"
#include "inductor/lower_internal.h"
#include "src/base/errors.h"

namespace ff::inductor {

using loop::BufferRole;
using loop::ScalarType;
using loop::Stmt;

namespace {

// NB: a value with several users is recomputed in each of them while it is cheap; past this
// cost it is stored once. Bounds the expression blow-up of diamond-shaped graphs.
constexpr int kInlineCostLimit = 40;
constexpr int kInlineLoadLimit = 3;
// NB: a lowering rule may read its operand's expression more than once (leaky_relu: z > 0 ? z : z * a),
// so a chain of single-user values can still grow exponentially with its length; past this cost a
// value is stored whatever its users (otherwise 8 levels of leaky_relu(y.square()) took seconds to
// compile and 15 never finished).
constexpr int kExpressionCostLimit = 400;

int loads_per_element(const LT& x) {
  Idx idx;
  for (int64_t d = 0; d < x.dim(); ++d) idx.push_back(loop::var(static_cast<int>(d)));
  int n = 0;
  loop::for_each_expr(x.at(idx), [&](const Expr& e) { n += e->kind == loop::ExprKind::Load; });
  return n;
}

// Ops whose rules take symbolic int arguments as such: the view family reads the result's
// (symbolic) sizes from the graph, indexing reads its bounds as SymInts (lower_ops_extra.cpp).
bool reads_symbolic_args(Op op) {
  return op_in(op, {Op::view, Op::reshape, Op::flatten, Op::unsqueeze, Op::squeeze, Op::expand, Op::tensor_reshape,
                    Op::view_as, Op::reshape_as, Op::op_getitem});
}

// Ops whose rules read their two operands through Lowerer::tensor, which reads a symbolic Python int
// (one that varies between calls) from the kernel's size arguments: any other argument symbolic,
// the op is not lowered.
bool reads_symbolic_operands(const Node& n) {
  if (!op_in(op_kind(n.op), {Op::add, Op::sub, Op::mul, Op::op_add, Op::op_sub, Op::op_mul, Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge,
                             Op::op_eq, Op::op_ne, Op::op_lt, Op::op_le, Op::op_gt, Op::op_ge}))
    return false;
  return std::none_of(n.args.begin() + std::min<ptrdiff_t>(2, static_cast<ptrdiff_t>(n.args.size())), n.args.end(), value_symbolic);
}

}  // namespace

bool supported_dtype(DType dt) {
  return dt == DType::Bool || dt == DType::UInt8 || dt == DType::Int8 || dt == DType::Int16 || dt == DType::Int32 ||
         dt == DType::Int64 || dt == DType::Float16 || dt == DType::BFloat16 || dt == DType::Float32 ||
         dt == DType::Float64;
}

std::string node_desc(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.kind == NodeKind::Call) return n.name + " (" + op_def(n.op).target + ")";
  return n.name;
}

SymInt LT::numel() const {
  SymInt n = 1;
  for (const SymInt& s : sizes) n *= s;
  return n;
}

DType float_compute_dtype(DType dt) {
  return (dt == DType::Float16 || dt == DType::BFloat16) ? DType::Float32 : dt;
}

// ---- operands ---------------------------------------------------------------------------------

const Value& Lowerer::arg(const Node& n, const char* name) const {
  int i = op_def(n.op).schema.index_of(name);
  if (i < 0) throw NoLowering(std::string("op ") + op_def(n.op).name + " has no parameter " + name);
  return n.args[static_cast<size_t>(i)];
}
bool Lowerer::has_arg(const Node& n, const char* name) const { return op_def(n.op).schema.index_of(name) >= 0; }

const TensorMeta& Lowerer::out_meta(const Node& n) const {
  if (!n.meta.is_tensor()) throw NoLowering("the result is not a tensor");
  return n.meta.tensor;
}

LT Lowerer::tensor(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Node: {
      const auto& lt = values_.at(static_cast<size_t>(v.node));
      if (!lt) throw NoLowering("operand " + g_.node(v.node).name + " is not a tensor the code generator holds");
      return *lt;
    }
    // NB: Python numbers keep their exact value (an int as int64, a float as double) until the
    // op converts them to the dtype it computes in, as eager's wrapped scalars do.
    case Value::Kind::Bool: return scalar(v.b ? 1.0 : 0.0, DType::Bool);
    case Value::Kind::Int: return v.sym ? symbolic_int(v.as_symint()) : scalar_int(v.i);
    case Value::Kind::Float: return scalar(v.f, DType::Float64);
    default: throw NoLowering("unsupported operand kind");
  }
}

// ---- the algebra ------------------------------------------------------------------------------

LT Lowerer::scalar(double v, DType dt) {
  LT r;
  r.dtype = dt;
  ScalarType t = loop::dtype_compute_type(dt);
  Expr c = loop::const_of(v, t);
  r.at = [c](const Idx&) { return c; };
  return r;
}

LT Lowerer::scalar_int(int64_t v) {
  LT r;
  r.dtype = DType::Int64;
  Expr c = loop::const_int(v, ScalarType::I64);
  r.at = [c](const Idx&) { return c; };
  return r;
}

LT Lowerer::symbolic_int(const SymInt& v) {
  LT r;
  r.dtype = DType::Int64;
  Expr e = loop::size_expr(v);  // read from the kernel's size arguments
  r.at = [e](const Idx&) { return e; };
  return r;
}

namespace {

// Whether every value of dtype `from` is one of `to` (a conversion needs no narrowing).
bool holds_all(DType from, DType to) {
  if (from == to || from == DType::Bool) return true;
  auto bits = [](DType t) -> int {  // significant bits of an exact integer range
    switch (t) {
      case DType::UInt8: return 8;
      case DType::Int8: return 7;
      case DType::Int16: return 15;
      case DType::Int32: return 31;
      case DType::Int64: return 63;
      default: return -1;
    }
  };
  int fb = bits(from);  // -1 for floats
  switch (to) {
    case DType::Int16:
    case DType::Int32:
    case DType::Int64: return fb >= 0 && fb <= bits(to);
    case DType::BFloat16: return fb >= 0 && fb <= 8;
    case DType::Float16: return fb >= 0 && fb <= 11;
    case DType::Float32: return (fb >= 0 && fb <= 24) || from == DType::Float16 || from == DType::BFloat16;
    case DType::Float64: return (fb >= 0 && fb <= 53) || is_floating(from);
    default: return false;  // int8, uint8: only from themselves and bool
  }
}

}  // namespace

LT Lowerer::from_ref(const loop::TensorRef& ref, DType dt) const {
  LT r;
  r.sizes = ref.sizes;
  r.dtype = dt;
  r.ref = ref;
  r.cost = 1;
  r.at = [ref, dt](const Idx& idx) {
    if (!supported_dtype(dt)) throw NoLowering("dtype " + std::string(dtype_name(dt)) + " is not supported in kernels");
    Expr index = loop::const_int(ref.offset);
    for (size_t d = 0; d < idx.size(); ++d) index = loop::index_add(index, loop::index_mul(idx[d], ref.strides[d]));
    return loop::load(ref.buf, index, loop::dtype_compute_type(dt));
  };
  return r;
}

LT Lowerer::cast(const LT& x, DType dt) {
  if (x.dtype == dt) return x;
  if (!supported_dtype(dt)) throw NoLowering("dtype " + std::string(dtype_name(dt)) + " is not supported in kernels");
  LT r = x;
  r.dtype = dt;
  r.ref.reset();
  ScalarType t = loop::dtype_compute_type(dt);
  auto inner = x.at;
  // NB: the value becomes one of dtype dt here, not when it is stored: int64 -> int8 wraps and
  // f32 -> f16 rounds before any later op computes with it, as in eager.
  bool narrowing = !holds_all(x.dtype, dt);
  r.at = [inner, t, dt, narrowing](const Idx& idx) {
    Expr v = loop::cast(inner(idx), t);
    return narrowing ? loop::narrow(v, dt) : v;
  };
  r.cost = x.cost + (narrowing ? 2 : 1);
  return r;
}

LT Lowerer::broadcast(const LT& x, const SymShape& sizes) {
  if (x.sizes.same_as(sizes)) return x;
  FF_CHECK(x.sizes.size() <= sizes.size(), "broadcast to fewer dims");
  size_t lead = sizes.size() - x.sizes.size();
  LT r = x;
  r.sizes = sizes;
  if (x.ref) {
    loop::TensorRef ref = *x.ref;
    ref.sizes = sizes;
    ref.strides.assign(lead, 0);
    for (size_t d = 0; d < x.sizes.size(); ++d)
      ref.strides.push_back(x.sizes[d] == 1 && sizes[lead + d] != 1 ? SymInt(0) : x.ref->strides[d]);
    r.ref = ref;
  }
  auto inner = x.at;
  SymShape xs = x.sizes;
  r.at = [inner, xs, lead](const Idx& idx) {
    Idx sub(xs.size());
    for (size_t d = 0; d < xs.size(); ++d) sub[d] = xs[d] == 1 ? loop::const_int(0) : idx[lead + d];
    return inner(sub);
  };
  return r;
}

namespace {

// Nodes of `e` (a tree: shared operands counted each time), with the operands' probes counted as
// their operands' costs.
int64_t probe_cost(const Expr& e, const std::vector<int64_t>& operand_cost) {
  if (e->kind == loop::ExprKind::Local && e->id <= -2) return operand_cost[static_cast<size_t>(-2 - e->id)];
  int64_t n = 1;
  for (const Expr& a : e->args) n += probe_cost(a, operand_cost);
  return n;
}

// The size of fn's expression once its operands are inlined. NB: a rule may read an operand
// several times (leaky_relu: x < 0 ? x * a : x), so it is measured on probe operands rather
// than summed over the operands.
int64_t inlined_size(const std::vector<LT>& bs, ScalarType ct, const std::function<Expr(const std::vector<Expr>&)>& fn) {
  std::vector<Expr> probes;
  std::vector<int64_t> costs;
  for (size_t i = 0; i < bs.size(); ++i) {
    probes.push_back(loop::local(-2 - static_cast<int>(i), ct));
    costs.push_back(bs[i].size());
  }
  return std::min<int64_t>(probe_cost(fn(probes), costs) + 1, int64_t{1} << 40);
}

}  // namespace

LT Lowerer::map(const std::vector<LT>& xs, DType compute, DType out, const std::function<Expr(const std::vector<Expr>&)>& fn) {
  SymShape sizes;
  for (const LT& x : xs) sizes = broadcast_shapes(sizes, x.sizes);
  if (!supported_dtype(compute) || !supported_dtype(out)) throw NoLowering("dtype not supported in kernels");
  std::vector<LT> bs;
  for (const LT& x : xs) bs.push_back(broadcast(cast(x, compute), sizes));
  ScalarType ct = loop::dtype_compute_type(compute), ot = loop::dtype_compute_type(out);
  int cost = 1;
  for (const LT& b : bs) cost += b.cost;
  // NB: eager stores every op's result in its dtype: an 8/16-bit int result wraps, an f16/bf16
  // one rounds, before the next op reads it. The kernel keeps the wider compute type in
  // registers, so the result is narrowed here (free where a store narrows it anyway).
  bool narrowing = loop::needs_narrowing(out);
  LT r;
  r.sizes = sizes;
  r.dtype = out;
  r.cost = cost + (narrowing ? 1 : 0);
  r.tree = inlined_size(bs, ct, fn) + (narrowing ? 1 : 0);
  r.at = [bs, ct, ot, out, narrowing, fn](const Idx& idx) {
    std::vector<Expr> vals;
    vals.reserve(bs.size());
    for (const LT& b : bs) vals.push_back(loop::cast(b.at(idx), ct));
    Expr v = loop::cast(fn(vals), ot);
    return narrowing ? loop::narrow(v, out) : v;
  };
  return r;
}

LT Lowerer::unary(loop::UnaryOp op, const LT& x, DType dt) {
  return map({x}, dt, dt, [op](const std::vector<Expr>& v) { return loop::unary(op, v[0]); });
}

LT Lowerer::binary(loop::BinaryOp op, const LT& a, const LT& b, DType dt) {
  DType out = loop::is_comparison(op) ? DType::Bool : dt;
  return map({a, b}, dt, out, [op](const std::vector<Expr>& v) { return loop::binary(op, v[0], v[1]); });
}

LT Lowerer::permute(const LT& x, const std::vector<int64_t>& perm) {
  LT r = x;
  r.sizes.clear();
  for (int64_t p : perm) r.sizes.push_back(x.sizes[static_cast<size_t>(p)]);
  if (x.ref) {
    loop::TensorRef ref = *x.ref;
    ref.sizes = r.sizes;
    ref.strides.clear();
    for (int64_t p : perm) ref.strides.push_back(x.ref->strides[static_cast<size_t>(p)]);
    r.ref = ref;
  }
  auto inner = x.at;
  r.at = [inner, perm](const Idx& idx) {
    Idx sub(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) sub[static_cast<size_t>(perm[d])] = idx[d];
    return inner(sub);
  };
  return r;
}

// torch's stride computation for a view of (sizes, strides) as `shape`; nullopt when a copy is needed.
std::optional<SymShape> view_strides(const SymShape& oldshape, const SymShape& oldstride, const SymShape& shape) {
  TensorMeta base;
  base.sizes = oldshape;
  base.strides = oldstride;
  return meta_util::view_strides(base, shape);
}

LT Lowerer::reshape(const LT& x, const SymShape& sizes) {
  if (x.sizes.same_as(sizes)) return x;
  if (x.ref) {
    if (auto st = view_strides(x.ref->sizes, x.ref->strides, sizes)) {
      loop::TensorRef ref = *x.ref;
      ref.sizes = sizes;
      ref.strides = *st;
      return from_ref(ref, x.dtype);
    }
  }
  // General case: match groups of dims with equal products; within a group the output index is
  // linearized and split into the input dims (a division only where a group merges dims).
  std::vector<int> in_dims, out_dims;  // dims of size != 1
  for (size_t d = 0; d < x.sizes.size(); ++d)
    if (x.sizes[d] != 1) in_dims.push_back(static_cast<int>(d));
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1) out_dims.push_back(static_cast<int>(d));
  for (int d : in_dims)
    if (x.sizes[static_cast<size_t>(d)] == 0) throw NoLowering("reshape of an empty tensor");
  struct Group {
    std::vector<int> in, out;
  };
  std::vector<Group> groups;
  size_t i = 0, j = 0;
  while (i < in_dims.size()) {
    FF_CHECK(j < out_dims.size(), "reshape sizes do not match");
    Group gr;
    SymInt pi = x.sizes[static_cast<size_t>(in_dims[i])], pj = sizes[static_cast<size_t>(out_dims[j])];
    gr.in.push_back(in_dims[i++]);
    gr.out.push_back(out_dims[j++]);
    while (pi != pj) {
      if (pi < pj) {
        FF_CHECK(i < in_dims.size(), "reshape");
        pi *= x.sizes[static_cast<size_t>(in_dims[i])];
        gr.in.push_back(in_dims[i++]);
      } else {
        FF_CHECK(j < out_dims.size(), "reshape");
        pj *= sizes[static_cast<size_t>(out_dims[j])];
        gr.out.push_back(out_dims[j++]);
      }
    }
    groups.push_back(gr);
  }
  SymShape xs = x.sizes, os = sizes;
  auto inner = x.at;
  LT r;
  r.sizes = sizes;
  r.dtype = x.dtype;
  r.cost = x.cost + 2;
  r.at = [inner, xs, os, groups](const Idx& idx) {
    Idx sub(xs.size(), loop::const_int(0));
    for (const Group& gr : groups) {
      Expr lin = loop::const_int(0);
      SymInt st = 1;
      for (auto it = gr.out.rbegin(); it != gr.out.rend(); ++it) {
        lin = loop::index_add(lin, loop::index_mul(idx[static_cast<size_t>(*it)], st));
        st *= os[static_cast<size_t>(*it)];
      }
      if (gr.in.size() == 1) {
        sub[static_cast<size_t>(gr.in[0])] = lin;
        continue;
      }
      SymInt cs = 1;
      for (size_t k = gr.in.size(); k-- > 0;) {
        int d = gr.in[k];
        Expr e = cs == 1 ? lin : loop::binary(loop::BinaryOp::FloorDiv, lin, loop::size_expr(cs));
        if (k != 0) e = loop::binary(loop::BinaryOp::Mod, e, loop::size_expr(xs[static_cast<size_t>(d)]));
        sub[static_cast<size_t>(d)] = e;
        cs *= xs[static_cast<size_t>(d)];
      }
    }
    return inner(sub);
  };
  return r;
}

int Lowerer::new_buffer(DType dt, SymShape sizes, SymShape strides, BufferRole role, NodeId node) {
  loop::Buffer b;
  b.dtype = dt;
  b.sizes = std::move(sizes);
  b.strides = std::move(strides);
  b.role = role;
  b.node = node;
  if (node >= 0) b.name = g_.node(node).name;
  prog_.buffers.push_back(std::move(b));
  return static_cast<int>(prog_.buffers.size()) - 1;
}

namespace {

void add_kernel(loop::Program& p, loop::Kernel k) {
  k.name = "k" + std::to_string(p.kernels.size());
  p.kernels.push_back(std::move(k));
  p.steps.push_back({loop::Step::Kind::Kernel, static_cast<int>(p.kernels.size()) - 1});
}

}  // namespace

LT Lowerer::realize(const LT& x, const SymShape& strides, BufferRole role, NodeId node, const std::string& why) {
  if (!supported_dtype(x.dtype)) throw NoLowering("dtype not supported in kernels");
  int b = new_buffer(x.dtype, x.sizes, strides, role, node);
  note("realize buf" + std::to_string(b) + (node >= 0 ? " (" + g_.node(node).name + ")" : "") + ": " + why);
  store_kernel(x, b, strides);
  return from_ref(loop::TensorRef{b, x.sizes, strides, 0}, x.dtype);
}

void Lowerer::store_kernel(const LT& x, int b, const SymShape& strides) {
  if (x.numel() == 0) return;
  std::vector<int> order;
  for (size_t d = 0; d < x.sizes.size(); ++d)
    if (x.sizes[d] != 1) order.push_back(static_cast<int>(d));
  std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return strides[static_cast<size_t>(a)] > strides[static_cast<size_t>(c)]; });
  Idx idx(x.sizes.size(), loop::const_int(0));
  for (size_t k = 0; k < order.size(); ++k) idx[static_cast<size_t>(order[k])] = loop::var(static_cast<int>(k));
  Expr index = loop::const_int(0);
  for (size_t d = 0; d < idx.size(); ++d) index = loop::index_add(index, loop::index_mul(idx[d], strides[d]));
  Stmt body = loop::store_stmt(b, index, x.at(idx));
  loop::Kernel k;
  if (order.empty()) {
    k.root = loop::loop_stmt(0, 1, {body}, true);
    k.num_vars = 1;
  } else {
    for (size_t kk = order.size(); kk-- > 0;)
      body = loop::loop_stmt(static_cast<int>(kk), x.sizes[static_cast<size_t>(order[kk])], {body}, kk == 0);
    k.root = body;
    k.num_vars = static_cast<int>(order.size());
  }
  add_kernel(prog_, std::move(k));
}

void Lowerer::check_none(const LT& bad, const std::string& message) {
  if (!checks_allowed_) throw NoLowering("a value check (" + message + ") in a graph that writes its inputs, draws random numbers or calls torch");
  for (const Node& n : g_.nodes())
    if (has_side_effects(n))
      throw NoLowering("a value check (" + message + ") in a graph that writes its inputs or draws random numbers");
  if (bad.numel() == 0) return;  // no element: eager computes nothing
  LT count = Lowerer::map({bad}, DType::Bool, DType::Int64, [](const std::vector<Expr>& v) { return loop::cast(v[0], loop::ScalarType::I64); });
  LT flag = reduce(count, {}, false, loop::ReduceOp::Sum, DType::Int64);
  FF_CHECK(flag.ref, "a reduction without a buffer");
  prog_.buffers[static_cast<size_t>(flag.ref->buf)].role = BufferRole::Output;
  prog_.checks.push_back({flag.ref->buf, message});
  note("check buf" + std::to_string(flag.ref->buf) + ": " + message + " where an element is");
}

LT Lowerer::realize_contiguous(const LT& x, const std::string& why) {
  return realize(x, TensorMeta::contiguous_strides(x.sizes), BufferRole::Intermediate, -1, why);
}

LT Lowerer::consistent(const LT& x) {
  if (x.ref || x.numel() == 0) return x;
  Idx idx;
  for (int64_t d = 0; d < x.dim(); ++d) idx.push_back(loop::var(static_cast<int>(d)));
  if (!loop::calls_vector_math(x.at(idx))) return x;
  return realize_contiguous(x, "read by several loops and computed with vector math: one value for all of them");
}

LT Lowerer::reduce(const LT& x, std::vector<int64_t> dims, bool keepdim, loop::ReduceOp op, DType acc) {
  if (!supported_dtype(acc)) throw NoLowering("dtype not supported in kernels");
  int64_t nd = x.dim();
  for (auto& d : dims) d = wrap_dim(d, std::max<int64_t>(nd, 1));
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(nd));
    std::iota(dims.begin(), dims.end(), 0);
  }
  auto reduced = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  SymShape out_sizes;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced(d)) out_sizes.push_back(x.sizes[static_cast<size_t>(d)]);
    else if (keepdim) out_sizes.push_back(1);
  }
  SymShape out_strides = TensorMeta::contiguous_strides(out_sizes);
  {
    // NB: a full reduction has an outer loop of one iteration, so it would run on one thread.
    // Large ones reduce in two stages: kParts partial results in parallel, then those.
    constexpr int64_t kParts = 64;
    SymInt total = 1, kept = 1;
    for (int64_t d = 0; d < nd; ++d) (reduced(d) ? total : kept) *= x.sizes[static_cast<size_t>(d)];
    if (total.is_symbolic() && kept == 1) {
      // NB: a symbolic size's divisibility is not known: along the outermost dimension of size > 1
      // first (its rows in parallel), then those partial results.
      int64_t first = 0;
      while (first < nd && x.sizes[static_cast<size_t>(first)] == 1) ++first;
      if (nd - first >= 2) {
        std::vector<int64_t> inner_dims;
        for (int64_t d = first + 1; d < nd; ++d) inner_dims.push_back(d);
        LT rows = reduce(x, inner_dims, false, op, acc);
        return reshape(reduce(rows, {}, false, op, acc), out_sizes);
      }
    } else if (kept == 1 && total >= (int64_t{1} << 16) && total % kParts == 0) {
      LT parts = reduce(reshape(x, {kParts, total / kParts}), {1}, false, op, acc);
      return reshape(reduce(parts, {0}, false, op, acc), out_sizes);
    }
  }
  int b = new_buffer(acc, out_sizes, out_strides, BufferRole::Intermediate, -1);
  loop::TensorRef ref{b, out_sizes, out_strides, 0};
  SymInt out_numel = 1;
  for (const SymInt& s : out_sizes) out_numel *= s;
  if (out_numel == 0) return from_ref(ref, acc);

  std::vector<int> outer, red;
  for (int64_t d = 0; d < nd; ++d) {
    if (x.sizes[static_cast<size_t>(d)] == 1) continue;
    (reduced(d) ? red : outer).push_back(static_cast<int>(d));
  }
  Idx idx(static_cast<size_t>(nd), loop::const_int(0));
  int v = 0;
  for (int d : outer) idx[static_cast<size_t>(d)] = loop::var(v++);
  for (int d : red) idx[static_cast<size_t>(d)] = loop::var(v++);
  Expr out_index = loop::const_int(0);
  size_t od = 0;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced(d)) out_index = loop::index_add(out_index, loop::index_mul(idx[static_cast<size_t>(d)], out_strides[od++]));
    else if (keepdim) od++;
  }
  ScalarType at = loop::dtype_compute_type(acc);
  Stmt red_body = loop::reduce_stmt(0, op, loop::cast(x.at(idx), at));
  for (size_t k = red.size(); k-- > 0;)
    red_body = loop::loop_stmt(static_cast<int>(outer.size() + k), x.sizes[static_cast<size_t>(red[k])], {red_body});
  std::vector<Stmt> inner{loop::init_stmt(0, op), red_body, loop::store_stmt(b, out_index, loop::local(0, at))};
  loop::Kernel k;
  k.locals = {at};
  k.num_vars = v;
  if (outer.empty()) {
    k.root = loop::loop_stmt(v, 1, inner, true);
    k.num_vars = v + 1;
  } else {
    Stmt body = loop::loop_stmt(static_cast<int>(outer.size() - 1), x.sizes[static_cast<size_t>(outer.back())], inner);
    for (size_t kk = outer.size() - 1; kk-- > 0;)
      body = loop::loop_stmt(static_cast<int>(kk), x.sizes[static_cast<size_t>(outer[kk])], {body});
    body.parallel = true;
    k.root = body;
  }
  add_kernel(prog_, std::move(k));
  return from_ref(ref, acc);
}

loop::TensorRef Lowerer::ensure_ref(NodeId id, const std::string& why) {
  auto& lt = values_.at(static_cast<size_t>(id));
  FF_CHECK(lt.has_value(), "no lowered value for node " + g_.node(id).name);
  if (lt->ref) return *lt->ref;
  const TensorMeta& m = g_.node(id).meta.tensor;
  LT r = realize(*lt, m.strides, BufferRole::Intermediate, id, why);
  lt = r;
  return *r.ref;
}

LT Lowerer::extern_call(const Node& n, NodeId id, OpId op, std::vector<Value> args, const std::string& reason) {
  loop::ExternCall e;
  e.node = id;
  e.reason = reason;
  e.op = op;
  e.args = std::move(args);
  std::vector<NodeId> operands;
  for (const Value& v : e.args) v.for_each_node([&](NodeId o) { operands.push_back(o); });
  if (n.kind == NodeKind::GetItem) operands = {n.args[0].node};
  for (NodeId o : operands) {
    if (!values_.at(static_cast<size_t>(o))) continue;  // a Python object at run time
    bool seen = false;
    for (auto& [nn, r] : e.operands) seen |= nn == o;
    if (seen) continue;
    e.operands.push_back({o, like_ == EagerDevice::CUDA && o == attention_mask_node(op, e.args) ? attention_mask_operand(o, id)
                                                                                                : ensure_ref(o, "operand of extern " + node_desc(g_, id))});
  }
  blas_operand_layouts(e, operands.size());
  LT result;
  if (n.meta.is_tensor()) {
    const TensorMeta& m = n.meta.tensor;
    e.result = new_buffer(m.dtype, m.sizes, m.strides, BufferRole::ExternResult, id);
    result = from_ref(loop::TensorRef{e.result, m.sizes, m.strides, 0}, m.dtype);
    NodeId parent = id == current_ && !alias_parent_.empty() ? alias_parent_[static_cast<size_t>(id)] : -1;
    if (parent >= 0 && values_[static_cast<size_t>(parent)] && values_[static_cast<size_t>(parent)]->ref)
      prog_.buffers[static_cast<size_t>(e.result)].aliases = values_[static_cast<size_t>(parent)]->ref->buf;
  }
  note("extern " + node_desc(g_, id) + ": " + reason);
  prog_.externs.push_back(std::move(e));
  prog_.steps.push_back({loop::Step::Kind::Extern, static_cast<int>(prog_.externs.size()) - 1});
  return result;
}

namespace {

// Whether two elements of a tensor with this layout share memory (an expanded tensor).
bool self_overlapping(const TensorMeta& m) {
  std::vector<std::pair<SymInt, SymInt>> dims;  // (stride, size) of dims with more than one element
  for (size_t d = 0; d < m.sizes.size(); ++d)
    if (m.sizes[d] > 1) dims.push_back({m.strides[d], m.sizes[d]});
  std::sort(dims.begin(), dims.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  SymInt span = 1;  // elements the smaller-stride dims cover
  for (auto [stride, size] : dims) {
    if (stride < span) return true;
    span = stride * size;
  }
  return false;
}

// For each node, the write `x.copy_(v)` (the form open in-place ops such as x.sin_() take) that is
// its only user, directly or through other such nodes, where it is a pointwise call; else -1. The
// write's store kernel computes these nodes, reading the input at the element it writes, so they
// may read the input's old contents.
std::vector<NodeId> writes_fed(const Graph& g) {
  const NodeId n = static_cast<NodeId>(g.size());
  std::vector<NodeId> fed(g.size(), -1);
  std::vector<std::vector<NodeId>> users(g.size());
  for (NodeId u = 0; u < n; ++u)
    for (const Value& v : g.node(u).args) v.for_each_node([&](NodeId o) { users[static_cast<size_t>(o)].push_back(u); });
  // NB: users come after the nodes they use, so a backward sweep settles every user first.
  for (NodeId u = n - 1; u >= 0; --u) {
    const Node& nd = g.node(u);
    if (nd.kind != NodeKind::Call) continue;
    const OpDef& d = op_def(nd.op);
    if (!d.has(kPointwise) || d.has(kView) || d.has(kInplace) || d.has(kInplaceFlag)) continue;
    NodeId w = -1;
    bool one = !users[static_cast<size_t>(u)].empty();
    for (NodeId r : users[static_cast<size_t>(u)]) {
      const Node& rn = g.node(r);
      NodeId target = rn.kind == NodeKind::Call && op_kind(rn) == Op::copy_ && rn.args.size() >= 2 && rn.args[1].is_node() &&
                              rn.args[1].node == u
                          ? r
                          : fed[static_cast<size_t>(r)];
      one = one && target >= 0 && (w < 0 || w == target);
      w = target;
    }
    if (one) fed[static_cast<size_t>(u)] = w;
  }
  return fed;
}

// An open op's call as a call of the hand-written op of its ATen name (aten::std.dim as std), so
// that the hand-written op's rule lowers it: where every argument the call passes, other than its
// defaults, has a parameter of the same name there (self as input), and every parameter without a
// default there is passed. The call keeps its own result metadata (torch typed it).
std::optional<Node> as_registry_call(const Node& n) {
  const OpDef& open = op_def(n.op);
  if (!open.is_open() || open.aten.rfind("aten::", 0) != 0) return std::nullopt;
  std::string base = open.aten.substr(6, open.aten.find('.') == std::string::npos ? std::string::npos : open.aten.find('.') - 6);
  std::optional<OpId> id = op_by_name(base);
  if (!id || op_def(*id).is_open()) return std::nullopt;
  const OpDef& reg = op_def(*id);
  if (reg.has(kInplace) || reg.has(kInplaceFlag) || reg.has(kRandom) || reg.has(kView) || reg.has(kNondeterministicOutput))
    return std::nullopt;
  const std::vector<ParamSpec>& theirs = reg.schema.params;
  std::vector<Value> args(theirs.size());
  std::vector<bool> passed(theirs.size(), false);
  for (size_t i = 0; i < theirs.size(); ++i)
    if (theirs[i].has_default) args[i] = theirs[i].default_value;
  for (size_t i = 0; i < open.schema.params.size() && i < n.args.size(); ++i) {
    const ParamSpec& p = open.schema.params[i];
    int k = reg.schema.index_of(p.name);
    if (k < 0 && p.name == "self") k = reg.schema.index_of("input");
    if (k < 0) {
      if (p.has_default && n.args[i] == p.default_value) continue;
      return std::nullopt;
    }
    args[static_cast<size_t>(k)] = n.args[i];
    passed[static_cast<size_t>(k)] = true;
  }
  for (size_t i = 0; i < theirs.size(); ++i)
    if (!passed[i] && !theirs[i].has_default) return std::nullopt;
  Node r = n;
  r.op = *id;
  r.args = std::move(args);
  return r;
}

}  // namespace

// An in-place call on a graph input (or on an earlier such call's result) becomes a kernel that
// stores the new value into the caller's tensor. The runtime bumps the tensor's version and runs
// the reference runner instead when the input shares memory with another input.
// NB: later reads of the input must see the new value and nothing may still want the old one,
// so no node before this call may read the input except earlier writes of it.
std::string Lowerer::write_input(NodeId id) {
  const Node& n = g_.node(id);
  const Op kind = op_kind(n);
  NodeId root = input_root_[static_cast<size_t>(n.args[0].node)];
  const TensorMeta& m = g_.node(root).meta.tensor;
  // NB: strides too: an in-place view op (transpose_ of a square tensor) changes only them.
  if (!n.meta.is_tensor() || n.meta.tensor.sizes != m.sizes || n.meta.tensor.strides != m.strides ||
      n.meta.tensor.dtype != m.dtype)
    return "its result differs from the input in shape, strides or dtype";
  if (!supported_dtype(m.dtype)) return "dtype " + std::string(dtype_name(m.dtype)) + " is not supported in kernels";
  if (self_overlapping(m)) return "elements of the input share memory (an expanded tensor)";
  if (write_feeds_.empty()) write_feeds_ = writes_fed(g_);
  for (NodeId u = root + 1; u < id; ++u) {
    if (input_root_[static_cast<size_t>(u)] == root) continue;  // an earlier write of the same input
    NodeId w = write_feeds_[static_cast<size_t>(u)];
    if (w == id || (w >= 0 && w < id && input_root_[static_cast<size_t>(w)] == root)) continue;  // stored by such a write
    bool reads = false;
    for (const Value& v : g_.node(u).args) v.for_each_node([&](NodeId o) { reads |= input_root_[static_cast<size_t>(o)] == root; });
    if (reads) return g_.node(u).name + " reads the input before it changes";
  }
  LT value;
  try {
    if (kind == Op::copy_) {
      value = broadcast(tensor_arg(n, "other"), m.sizes);
    } else if (kind == Op::fill_) {
      value = broadcast(tensor_arg(n, "value"), m.sizes);
    } else if (kind == Op::zero_) {
      value = broadcast(scalar(0, m.dtype), m.sizes);
    } else {
      Node fn;
      if (std::string why = out_of_place_call(n, &fn, &g_); !why.empty()) return why;
      OpLowering rule = op_lowerings().at(op_kind(fn.op));
      if (rule) {
        value = rule(*this, fn);
      } else {
        // NB: torch computes the out-of-place form (an extern call: new memory, not the input's
        // alias, which current_ would make it), and the kernel below stores it into the input.
        NodeId current = current_;
        current_ = -1;
        value = extern_call(fn, id, fn.op, fn.args, "the out-of-place form of an in-place op on a graph input");
        current_ = current;
      }
    }
  } catch (const NoLowering& e) {
    return e.what();
  }
  FF_CHECK(value.sizes == m.sizes, "in-place write of the wrong shape");
  int b = values_.at(static_cast<size_t>(root))->ref->buf;
  prog_.buffers[static_cast<size_t>(b)].mutated = true;
  store_kernel(cast(value, m.dtype), b, m.strides);
  LT now = from_ref(loop::TensorRef{b, m.sizes, m.strides, 0}, m.dtype);
  values_[static_cast<size_t>(root)] = now;
  values_[static_cast<size_t>(id)] = now;
  input_root_[static_cast<size_t>(id)] = root;
  note("in-place " + node_desc(g_, id) + " stores into graph input " + g_.node(root).name + " (buf" + std::to_string(b) + ")");
  return "";
}

std::optional<LT> Lowerer::lower_node(NodeId id) {
  const Node& n = g_.node(id);
  current_ = id;
  if (n.kind == NodeKind::Placeholder) {
    if (!n.meta.is_tensor()) return std::nullopt;
    const TensorMeta& m = n.meta.tensor;
    int b = new_buffer(m.dtype, m.sizes, m.strides, BufferRole::Input, id);
    int pos = 0;
    for (NodeId p : g_.placeholders()) {
      if (p == id) break;
      ++pos;
    }
    prog_.buffers[static_cast<size_t>(b)].input = pos;
    input_root_[static_cast<size_t>(id)] = id;
    return from_ref(loop::TensorRef{b, m.sizes, m.strides, 0}, m.dtype);
  }
  if (n.kind == NodeKind::GetItem) {
    auto items = n.args.size() == 2 && n.args[0].is_node() ? tuple_items_.find(n.args[0].node) : tuple_items_.end();
    if (items != tuple_items_.end() && n.args[1].kind == Value::Kind::Int && n.args[1].i >= 0 &&
        n.args[1].i < static_cast<int64_t>(items->second.size()))
      return items->second[static_cast<size_t>(n.args[1].i)];
    LT r = extern_call(n, id, kNoOp, {}, "element of a tuple result");
    if (!n.meta.is_tensor()) return std::nullopt;
    return r;
  }
  FF_CHECK(n.kind == NodeKind::Call, "unexpected node kind");
  if (lower_tuple_items(id)) return std::nullopt;
  if (call_mutates_input(op_def(n.op), n.args)) {
    if (!n.args.empty() && n.args[0].kind == Value::Kind::Node && input_root_[static_cast<size_t>(n.args[0].node)] >= 0) {
      std::string why = write_input(id);
      if (!why.empty())
        throw Unsupported("in-place " + op_def(n.op).target + " (" + n.name + ") on a graph input is not compiled by inductor: " + why);
      return values_[static_cast<size_t>(id)];
    }
    // NB: the functionalize graph pass (graph/passes/functionalize.h) computed out of place every
    // in-place call whose mutation nobody can see; this one is seen.
    throw Unsupported("in-place " + op_def(n.op).target + " (" + n.name +
                      ") is not compiled by inductor: the tensor it mutates is not a private intermediate of the graph "
                      "(a view, an output, or read after the mutation)");
  }
  // NB: a call that writes an input beside its first operand (batch norm's running statistics) runs
  // in torch when the kernels run; a value read from that input before it would be computed later,
  // from the new contents.
  for (NodeId w : written_operands(n)) {
    NodeId root = input_root_[static_cast<size_t>(w)];
    if (root < 0) continue;
    for (NodeId u = root + 1; u < id; ++u) {
      bool reads = false;
      for (const Value& v : g_.node(u).args) v.for_each_node([&](NodeId o) { reads |= input_root_[static_cast<size_t>(o)] == root; });
      if (reads)
        throw Unsupported(op_def(n.op).target + " (" + n.name + ") updates graph input " + g_.node(root).name + ", which " +
                          g_.node(u).name + " reads before it: not compiled by inductor");
    }
  }
  const OpDef& op = op_def(n.op);
  std::string reason;
  if (!n.meta.is_tensor()) {
    reason = "its result is not a tensor";
  } else if (!supported_dtype(n.meta.tensor.dtype)) {
    reason = "dtype " + std::string(dtype_name(n.meta.tensor.dtype)) + " is not supported in kernels";
  } else {
    std::optional<Node> adapted = as_registry_call(n);
    const Node& call = adapted ? *adapted : n;
    OpLowering rule = op_lowerings().at(op_kind(call.op));
    if (!rule) {
      reason = op.has(kExtern) ? "matrix products and convolutions run in torch" : "no lowering for " + op.name;
    } else if (!reads_symbolic_args(op_kind(n.op)) && !reads_symbolic_operands(n) &&
               std::any_of(n.args.begin(), n.args.end(), value_symbolic)) {
      // NB: rules read int arguments as plain ints (their traced values); torch runs the call at
      // each run's sizes instead (extern arguments are specialised per call).
      reason = "an argument is a symbolic size";
    } else {
      try {
        LT r = rule(*this, call);
        if (!r.ref) r.at = [inner = std::move(r.at)](const Idx& idx) { return loop::rounded(inner(idx)); };
        const TensorMeta& m = n.meta.tensor;
        FF_CHECK(r.sizes == m.sizes, "lowering of " + op.name + " produced the wrong shape");
        if (r.dtype != m.dtype) r = cast(r, m.dtype);
        if (!r.ref && shares_storage_[static_cast<size_t>(id)])
          r = realize(r, m.strides, BufferRole::Intermediate, id, "its memory is seen through several graph outputs");
        else if (!r.ref && users_[static_cast<size_t>(id)] > 1 && r.cost > kInlineCostLimit)
          r = realize(r, m.strides, BufferRole::Intermediate, id, "expensive value with several users");
        else if (!r.ref && users_[static_cast<size_t>(id)] > 1 && loads_per_element(r) > kInlineLoadLimit)
          // NB: a residual stream (x = x + f(x) per layer) would otherwise be re-read from every
          // earlier layer's buffers by each later consumer.
          r = realize(r, m.strides, BufferRole::Intermediate, id, "reads many buffers and has several users");
        else if (!r.ref && r.size() > kExpressionCostLimit)
          r = realize(r, m.strides, BufferRole::Intermediate, id, "its expression is too large to inline");
        return r;
      } catch (const NoLowering& e) {
        reason = e.what();
      } catch (const SymbolicSpecialization& e) {
        // NB: a rule that decides on a symbolic size (there is no ShapeEnv while lowering): torch
        // runs the op at each call's sizes instead.
        reason = std::string("its lowering needs a concrete size: ") + e.what();
      }
    }
  }
  LT r = extern_call(n, id, n.op, n.args, reason);
  if (!n.meta.is_tensor()) return std::nullopt;
  return r;
}

loop::Program Lowerer::run() {
  prog_.symbolic = has_symbolic_shapes(g_);
  users_.assign(g_.size(), 0);
  input_root_.assign(g_.size(), -1);
  for (const Node& n : g_.nodes())
    for (const Value& v : n.args) v.for_each_node([&](NodeId o) { users_[static_cast<size_t>(o)]++; });
  values_.assign(g_.size(), std::nullopt);
  plan_aliases();
  for (NodeId id = 0; id < static_cast<NodeId>(g_.size()); ++id) {
    if (g_.node(id).kind == NodeKind::Output) continue;
    values_[static_cast<size_t>(id)] = lower_node(id);
  }
  if (auto out = g_.output()) {
    std::vector<NodeId> outs;
    g_.output_value().for_each_node([&](NodeId o) { outs.push_back(o); });
    for (NodeId o : outs) {
      if (!values_[static_cast<size_t>(o)]) continue;  // a Python object
      bool seen = false;
      for (auto& [nn, r] : prog_.outputs) seen |= nn == o;
      if (seen) continue;
      // NB: a lowering that passes an operand through (cat of one non-empty operand) leaves a
      // view of the operand's buffer with the operand's strides; the graph's result has the
      // strides eager gives it (a compiled backward is built for those), so it is copied there.
      auto& lt = values_[static_cast<size_t>(o)];
      const ValueMeta& om = g_.node(o).meta;
      if (lt->ref && om.is_tensor() && !om.tensor.sizes.empty() && lt->ref->sizes.same_as(om.tensor.sizes) &&
          !(g_.node(o).kind == NodeKind::Call && op_def(g_.node(o).op).has(kView))) {
        bool same = true;
        for (size_t d = 0; d < om.tensor.sizes.size(); ++d) {
          const SymInt& size = om.tensor.sizes[d];
          if (!size.is_symbolic() && size.hint() == 1) continue;
          same = same && lt->ref->strides[d].same_as(om.tensor.strides[d]);
        }
        if (!same) {
          LT copy = *lt;
          copy.ref.reset();
          lt = realize(copy, om.tensor.strides, BufferRole::Intermediate, o, "graph output in eager's strides");
        }
      }
      prog_.outputs.push_back({o, ensure_ref(o, "graph output")});
    }
  }
  report_eager_strides(prog_, g_);
  alias_outputs();
  for (auto& [o, ref] : prog_.outputs) {
    auto& buf = prog_.buffers[static_cast<size_t>(ref.buf)];
    if (buf.role == BufferRole::Intermediate) buf.role = BufferRole::Output;
  }
  return std::move(prog_);
}

void report_eager_strides(loop::Program& p, const Graph& g) {
  for (auto& [o, ref] : p.outputs) {
    const ValueMeta& meta = g.node(o).meta;
    if (!meta.is_tensor() || !ref.sizes.same_as(meta.tensor.sizes)) continue;
    for (size_t d = 0; d < ref.sizes.size(); ++d) {
      const SymInt& size = ref.sizes[d];
      if (!size.is_symbolic() && size.hint() == 1) ref.strides[d] = meta.tensor.strides[d];
    }
  }
}

loop::Program lower_graph(const Graph& g, std::vector<std::string>* notes, EagerDevice like) {
  for (const Node& n : g.nodes()) {
    if (like != EagerDevice::CPU || n.kind == NodeKind::Output) continue;
    if (n.meta.is_tensor() && n.meta.tensor.device.type != Device::Type::CPU)
      throw Unsupported("tensor " + n.name + " is on " + n.meta.tensor.device.str() + ": the CPU code generator only handles CPU tensors");
  }
  Lowerer L(g, notes, like);
  loop::Program p = L.run();
  if (!p.checks.empty() && !p.externs.empty()) {
    // NB: a check raises after every step; an extern call may raise or act before it: lowered
    // again, the ops that check computed by torch
    if (notes) notes->push_back("lowered again without value checks: the program calls torch");
    Lowerer again(g, notes, like);
    again.disallow_checks();
    p = again.run();
  }
  std::string err = loop::verify_program(p);
  FF_CHECK(err.empty(), "lowering produced an invalid program: " + err + "\n" + loop::program_str(p));
  return p;
}

}  // namespace ff::inductor
