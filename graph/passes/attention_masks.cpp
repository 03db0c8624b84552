#include "graph/passes/attention_masks.h"

#include <optional>
#include <string>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/rewriter.h"
#include "graph/printer.h"
#include "src/base/logging.h"

namespace ff {
namespace {

// An integer tensor whose element at index (i_0 .. i_{n-1}) is c + sum_d a[d] * i_d: one
// coefficient per dim of the value (none: a Python int).
struct IndexForm {
  int64_t c = 0;
  std::vector<int64_t> a;
};

// What a bool tensor holds: the same value everywhere, or element [..., i, j] = (j <= i) over its
// last two dims whatever the other indices.
enum class Fact {
  Unknown,
  AllTrue,
  AllFalse,
  Causal,  // element [..., i, j] is j <= i
};

// Small enough that no sum or product of them below overflows int64 (index ranges are sizes).
constexpr int64_t kMaxCoefficient = int64_t{1} << 20;
constexpr int64_t kMaxConstant = int64_t{1} << 40;
constexpr int kMaxDepth = 48;

bool small(const IndexForm& f) {
  if (f.c > kMaxConstant || f.c < -kMaxConstant) return false;
  for (int64_t x : f.a)
    if (x > kMaxCoefficient || x < -kMaxCoefficient) return false;
  return true;
}

// `f` read as a value of `n` dims (broadcasting aligns dims from the right).
std::vector<int64_t> aligned(const IndexForm& f, size_t n) {
  std::vector<int64_t> out(n, 0);
  for (size_t k = 0; k < f.a.size() && k < n; ++k) out[n - 1 - k] = f.a[f.a.size() - 1 - k];
  return out;
}

std::optional<int64_t> static_int(const Value& v) {
  if (v.kind == Value::Kind::Int && v.sym == 0) return v.i;
  return std::nullopt;
}

std::optional<std::vector<int64_t>> static_sizes(const TensorMeta& t) {
  std::vector<int64_t> out;
  for (const SymInt& s : t.sizes) {
    if (s.is_symbolic()) return std::nullopt;
    out.push_back(s.hint());
  }
  return out;
}

bool is_int64_tensor(const ValueMeta& m) { return m.is_tensor() && m.tensor.dtype == DType::Int64; }
bool is_bool_tensor(const ValueMeta& m) { return m.is_tensor() && m.tensor.dtype == DType::Bool; }

// Sizes the input's dims go to in a view/reshape that only adds or drops size-1 dims: out[k] is
// the output dim of input dim k (-1: a dropped size-1 dim), or nullopt for any other view.
std::optional<std::vector<int>> unit_dim_map(const TensorMeta& in, const TensorMeta& out) {
  auto si = static_sizes(in), so = static_sizes(out);
  if (!si || !so) return std::nullopt;
  std::vector<int> map(si->size(), -1);
  size_t j = 0;
  for (size_t k = 0; k < si->size(); ++k) {
    if ((*si)[k] == 1) continue;
    while (j < so->size() && (*so)[j] == 1) ++j;
    if (j == so->size() || (*so)[j] != (*si)[k]) return std::nullopt;
    map[k] = static_cast<int>(j++);
  }
  while (j < so->size() && (*so)[j] == 1) ++j;
  if (j != so->size()) return std::nullopt;
  return map;
}

class MaskAnalysis {
 public:
  explicit MaskAnalysis(const Graph& g) : g_(g) {}

  Fact fact(const Value& v, int depth = 0) const {
    if (v.kind == Value::Kind::Bool) return v.b ? Fact::AllTrue : Fact::AllFalse;
    if (!v.is_node() || depth > kMaxDepth) return Fact::Unknown;
    const Node& n = g_.node(v.node);
    if (n.kind != NodeKind::Call || !is_bool_tensor(n.meta)) return Fact::Unknown;
    const Op op = op_kind(n);
    if (op_in(op, {Op::op_lt, Op::lt, Op::op_le, Op::le, Op::op_gt, Op::gt, Op::op_ge, Op::ge, Op::op_eq, Op::eq,
                   Op::op_ne, Op::ne}))
      return compare(n, op, depth);
    if (op_in(op, {Op::op_and, Op::logical_and, Op::bitwise_and}))
      return both(fact(n.args[0], depth + 1), fact(n.args[1], depth + 1));
    if (op_in(op, {Op::op_or, Op::logical_or, Op::bitwise_or}))
      return either(fact(n.args[0], depth + 1), fact(n.args[1], depth + 1));
    if (op_in(op, {Op::op_invert, Op::logical_not, Op::bitwise_not})) {
      Fact f = fact(n.args[0], depth + 1);
      return f == Fact::AllTrue ? Fact::AllFalse : f == Fact::AllFalse ? Fact::AllTrue
                                                                       : Fact::Unknown;
    }
    if (op_in(op, {Op::ones, Op::ones_like, Op::new_ones})) return Fact::AllTrue;
    if (op_in(op, {Op::zeros, Op::zeros_like, Op::new_zeros})) return Fact::AllFalse;
    if (op_in(op, {Op::full, Op::full_like, Op::new_full})) {
      const Value& fill = call_arg(n, "fill_value");
      if (!fill.is_number()) return Fact::Unknown;
      return fill.as_double() != 0.0 ? Fact::AllTrue : Fact::AllFalse;  // NB: bool(nan) is True
    }
    if (op_in(op, {Op::contiguous, Op::clone, Op::to, Op::expand, Op::expand_as, Op::view, Op::reshape, Op::unsqueeze,
                   Op::squeeze, Op::flatten, Op::permute, Op::select, Op::op_getitem})) {
      // Any element of these is an element of the operand: a value held everywhere stays. A
      // triangle stays where the last two dims do (see keeps_last_two_dims).
      if (!is_bool_tensor(g_.meta_of(n.args[0]))) return Fact::Unknown;
      Fact f = fact(n.args[0], depth + 1);
      return f != Fact::Causal || keeps_last_two_dims(n) ? f : Fact::Unknown;
    }
    return Fact::Unknown;
  }

 private:
  // Element [..., i, j] of the result is element [..., i, j] of the operand (other indices aside):
  // elementwise copies, and views that add, drop or broadcast dims before the last two, whose sizes
  // stay. NB: a row-major reshape that keeps the last two sizes keeps (i, j) too.
  bool keeps_last_two_dims(const Node& n) const {
    const SymShape& in = g_.meta_of(n.args[0]).tensor.sizes;
    const SymShape& out = n.meta.tensor.sizes;
    if (in.size() < 2 || out.size() < 2 || !in.back().same_as(out.back()) || !in[in.size() - 2].same_as(out[out.size() - 2]))
      return false;
    const Op op = op_kind(n);
    if (op_in(op, {Op::contiguous, Op::clone, Op::to, Op::expand, Op::expand_as, Op::view, Op::reshape, Op::unsqueeze}))
      return true;
    if (op != Op::op_getitem) return false;
    // None, ... and whole slices only: they keep the order of dims. NB: an int may fix one of the
    // last two dims and bring an earlier dim in (x[:, 0] of [6, 6, 6]).
    const Value& index = n.args[1];
    std::vector<Value> items = index.kind == Value::Kind::Tuple ? index.items : std::vector<Value>{index};
    for (const Value& it : items) {
      if (it.kind == Value::Kind::Slice) {
        for (const Value& part : it.items)
          if (!part.is_none()) return false;
      } else if (!it.is_none() && it.kind != Value::Kind::Ellipsis) {
        return false;
      }
    }
    return true;
  }

  static Fact both(Fact a, Fact b) {
    if (a == Fact::AllFalse || b == Fact::AllFalse) return Fact::AllFalse;
    if (a == Fact::AllTrue) return b;
    if (b == Fact::AllTrue) return a;
    return a == Fact::Causal && b == Fact::Causal ? Fact::Causal : Fact::Unknown;
  }
  static Fact either(Fact a, Fact b) {
    if (a == Fact::AllTrue || b == Fact::AllTrue) return Fact::AllTrue;
    if (a == Fact::AllFalse) return b;
    if (b == Fact::AllFalse) return a;
    return a == Fact::Causal && b == Fact::Causal ? Fact::Causal : Fact::Unknown;
  }

  // `lhs OP rhs` over the result's index ranges: rewritten as F <= 0 (integers) and bounded.
  Fact compare(const Node& n, Op op, int depth) const {
    auto lhs = form(n.args[0], depth + 1), rhs = form(n.args[1], depth + 1);
    if (!lhs || !rhs) return Fact::Unknown;
    const size_t dims = n.meta.tensor.sizes.size();
    std::vector<int64_t> a = aligned(*lhs, dims), b = aligned(*rhs, dims);
    IndexForm diff{lhs->c - rhs->c, std::vector<int64_t>(dims)};
    for (size_t d = 0; d < dims; ++d) diff.a[d] = a[d] - b[d];
    if (op == Op::op_eq || op == Op::eq || op == Op::op_ne || op == Op::ne) {
      bool ne = op == Op::op_ne || op == Op::ne;
      auto [lo, hi] = bounds(diff, n.meta.tensor);
      if (lo && hi && *lo == 0 && *hi == 0) return ne ? Fact::AllFalse : Fact::AllTrue;
      if ((lo && *lo > 0) || (hi && *hi < 0)) return ne ? Fact::AllTrue : Fact::AllFalse;
      return Fact::Unknown;
    }
    // F <= 0 with F = lhs - rhs (le), rhs - lhs (ge), lhs - rhs + 1 (lt), rhs - lhs + 1 (gt).
    bool flip = op == Op::op_ge || op == Op::ge || op == Op::op_gt || op == Op::gt;
    bool strict = op == Op::op_lt || op == Op::lt || op == Op::op_gt || op == Op::gt;
    if (flip) {
      diff.c = -diff.c;
      for (int64_t& x : diff.a) x = -x;
    }
    if (strict) diff.c += 1;
    auto [lo, hi] = bounds(diff, n.meta.tensor);
    if (hi && *hi <= 0) return Fact::AllTrue;
    if (lo && *lo > 0) return Fact::AllFalse;
    if (dims >= 2 && diff.c == 0 && diff.a[dims - 1] == 1 && diff.a[dims - 2] == -1) {
      for (size_t d = 0; d + 2 < dims; ++d)
        if (diff.a[d] != 0) return Fact::Unknown;
      return Fact::Causal;  // j - i <= 0
    }
    return Fact::Unknown;
  }

  // The least and greatest value of `f` over index ranges [0, size_d): nullopt where a dim of
  // unknown (symbolic) size makes that side unbounded.
  static std::pair<std::optional<int64_t>, std::optional<int64_t>> bounds(const IndexForm& f, const TensorMeta& t) {
    std::optional<int64_t> lo = f.c, hi = f.c;
    for (size_t d = 0; d < f.a.size(); ++d) {
      if (f.a[d] == 0) continue;
      const SymInt& size = t.sizes[d];
      if (size.is_symbolic()) {
        (f.a[d] > 0 ? hi : lo) = std::nullopt;
        continue;
      }
      if (size.hint() == 0) return {std::nullopt, std::nullopt};  // no elements: nothing to prove
      int64_t span = f.a[d] * (size.hint() - 1);
      if (span > 0 && hi) *hi += span;
      if (span < 0 && lo) *lo += span;
    }
    return {lo, hi};
  }

  std::optional<IndexForm> form(const Value& v, int depth) const {
    if (auto k = static_int(v); k) return IndexForm{*k, {}};
    if (!v.is_node() || depth > kMaxDepth) return std::nullopt;
    const Node& n = g_.node(v.node);
    if (n.kind != NodeKind::Call || !is_int64_tensor(n.meta)) return std::nullopt;
    std::optional<IndexForm> out = form_of_call(n, depth);
    if (out && (out->a.size() != n.meta.tensor.sizes.size() || !small(*out))) return std::nullopt;
    return out;
  }

  std::optional<IndexForm> form_of_call(const Node& n, int depth) const {
    const size_t dims = n.meta.tensor.sizes.size();
    switch (op_kind(n)) {
      case Op::arange: {
        // arange(end): `start` holds the end (it may be a symbolic size); arange(start, end[, step]).
        auto step = static_int(call_arg(n, "step"));
        if (!step) return std::nullopt;
        if (call_arg(n, "end").is_none()) return IndexForm{0, {*step}};
        auto start = static_int(call_arg(n, "start"));
        if (!start) return std::nullopt;
        return IndexForm{*start, {*step}};
      }
      case Op::op_add:
      case Op::add:
      case Op::op_sub:
      case Op::sub: {
        Op op = op_kind(n);
        if ((op == Op::add || op == Op::sub) && static_int(call_arg(n, "alpha")) != 1) return std::nullopt;
        auto a = form(n.args[0], depth + 1), b = form(n.args[1], depth + 1);
        if (!a || !b) return std::nullopt;
        int64_t sign = op == Op::op_sub || op == Op::sub ? -1 : 1;
        IndexForm out{a->c + sign * b->c, aligned(*a, dims)};
        std::vector<int64_t> bb = aligned(*b, dims);
        for (size_t d = 0; d < dims; ++d) out.a[d] += sign * bb[d];
        return out;
      }
      case Op::op_mul: {
        auto a = form(n.args[0], depth + 1), b = form(n.args[1], depth + 1);
        if (!a || !b || (!a->a.empty() && !b->a.empty())) return std::nullopt;
        const IndexForm& t = a->a.empty() ? *b : *a;
        int64_t k = a->a.empty() ? a->c : b->c;
        if (k > kMaxCoefficient || k < -kMaxCoefficient) return std::nullopt;
        IndexForm out{t.c * k, aligned(t, dims)};
        for (int64_t& x : out.a) x *= k;
        return out;
      }
      case Op::contiguous:
      case Op::clone:
      case Op::to: {
        // NB: an integer tensor converted to int64 keeps its values.
        const ValueMeta& in = g_.meta_of(n.args[0]);
        if (!in.is_tensor() || !is_integral(in.tensor.dtype, false)) return std::nullopt;
        return form(n.args[0], depth + 1);
      }
      case Op::unsqueeze: {
        auto a = form(n.args[0], depth + 1);
        auto dim = static_int(n.args[1]);
        if (!a || !dim) return std::nullopt;
        int64_t d = *dim < 0 ? *dim + static_cast<int64_t>(dims) : *dim;
        if (d < 0 || d > static_cast<int64_t>(a->a.size())) return std::nullopt;
        a->a.insert(a->a.begin() + d, 0);
        return a;
      }
      case Op::expand:
      case Op::expand_as: {
        auto a = form(n.args[0], depth + 1);
        if (!a) return std::nullopt;
        const TensorMeta& in = g_.meta_of(n.args[0]).tensor;
        IndexForm out{a->c, aligned(*a, dims)};
        // NB: a size-1 dim's index is always 0: its coefficient never counted.
        for (size_t k = 0; k < in.sizes.size(); ++k)
          if (in.sizes[k].same_as(SymInt(1))) out.a[dims - in.sizes.size() + k] = 0;
        return out;
      }
      case Op::view:
      case Op::reshape: {
        auto a = form(n.args[0], depth + 1);
        auto map = unit_dim_map(g_.meta_of(n.args[0]).tensor, n.meta.tensor);
        if (!a || !map) return std::nullopt;
        IndexForm out{a->c, std::vector<int64_t>(dims, 0)};
        for (size_t k = 0; k < map->size(); ++k)
          if ((*map)[k] >= 0) out.a[static_cast<size_t>((*map)[k])] = a->a[k];
        return out;
      }
      case Op::op_getitem: return subscript(n, depth);
      default: return std::nullopt;
    }
  }

  // x[None, :, ..., 3]: None adds a dim, a full slice or ... keeps dims, an int fixes one.
  std::optional<IndexForm> subscript(const Node& n, int depth) const {
    auto a = form(n.args[0], depth + 1);
    if (!a) return std::nullopt;
    std::vector<Value> items = n.args[1].kind == Value::Kind::Tuple ? n.args[1].items : std::vector<Value>{n.args[1]};
    size_t consumed = 0;
    for (const Value& it : items)
      if (it.kind == Value::Kind::Slice || it.kind == Value::Kind::Int) ++consumed;
    if (consumed > a->a.size()) return std::nullopt;
    IndexForm out{a->c, {}};
    size_t d = 0;  // next dim of the operand
    const TensorMeta& in = g_.meta_of(n.args[0]).tensor;
    for (const Value& it : items) {
      if (it.is_none()) {
        out.a.push_back(0);
      } else if (it.kind == Value::Kind::Ellipsis) {
        for (size_t rest = a->a.size() - consumed; rest > 0 && d < a->a.size(); --rest) out.a.push_back(a->a[d++]);
      } else if (it.kind == Value::Kind::Slice) {
        for (const Value& part : it.items)
          if (!part.is_none()) return std::nullopt;
        if (d >= a->a.size()) return std::nullopt;
        out.a.push_back(a->a[d++]);
      } else if (auto k = static_int(it); k) {
        if (d >= a->a.size() || in.sizes[d].is_symbolic()) return std::nullopt;
        int64_t i = *k < 0 ? *k + in.sizes[d].hint() : *k;
        out.c += a->a[d++] * i;
      } else {
        return std::nullopt;
      }
    }
    while (d < a->a.size()) out.a.push_back(a->a[d++]);
    return out;
  }

  const Graph& g_;
};

// The query and key lengths of an SDPA call are equal for every binding of the graph's symbols
// (the same number, or the same expression), and the mask's last two dims are those lengths.
bool equal_lengths(const Graph& g, const Node& sdpa, const TensorMeta& mask) {
  const TensorMeta& q = g.meta_of(call_arg(sdpa, "query")).tensor;
  const TensorMeta& k = g.meta_of(call_arg(sdpa, "key")).tensor;
  if (q.dim() < 2 || k.dim() < 2 || mask.dim() < 2) return false;
  const SymInt& L = q.sizes[q.sizes.size() - 2];
  const SymInt& S = k.sizes[k.sizes.size() - 2];
  return L.same_as(S) && mask.sizes.back().same_as(S) && mask.sizes[mask.sizes.size() - 2].same_as(L);
}

// SDPA's result has the query's sizes with the value's head dim: the mask broadcast into nothing more.
bool sized_by_query(const Graph& g, const Node& sdpa) {
  SymShape want = g.meta_of(call_arg(sdpa, "query")).tensor.sizes;
  const TensorMeta& v = g.meta_of(call_arg(sdpa, "value")).tensor;
  if (want.empty() || v.dim() == 0 || !sdpa.meta.is_tensor()) return false;
  want.back() = v.sizes.back();
  return sdpa.meta.tensor.sizes.same_as(want);
}

// `torch.where(c, x, y)` as an SDPA mask, with c True (False) everywhere: x (y) when it is a tensor of
// the where's dtype. Broadcast to the scores it holds the same values, and SDPA only reads it.
std::optional<Value> chosen_branch(const Graph& g, const MaskAnalysis& analysis, const Value& mask) {
  if (!mask.is_node()) return std::nullopt;
  const Node& w = g.node(mask.node);
  if (op_kind(w) != Op::where || !w.meta.is_tensor()) return std::nullopt;
  Fact c = analysis.fact(w.args[0]);
  if (c != Fact::AllTrue && c != Fact::AllFalse) return std::nullopt;
  const Value& branch = w.args[c == Fact::AllTrue ? 1 : 2];
  const ValueMeta& m = g.meta_of(branch);
  if (!branch.is_node() || !m.is_tensor() || m.tensor.dtype != w.meta.tensor.dtype || m.tensor.dim() > w.meta.tensor.dim())
    return std::nullopt;
  return branch;
}

}  // namespace

Graph attention_masks(const Graph& g) {
  MaskAnalysis analysis(g);
  GraphRewriter rw(g);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (op_kind(n) != Op::scaled_dot_product_attention || !call_arg(n, "attn_mask").is_node()) {
      rw.copy(id);
      continue;
    }
    const OpSchema& schema = op_def(n.op).schema;
    const size_t mask_at = static_cast<size_t>(schema.index_of("attn_mask"));
    const size_t causal_at = static_cast<size_t>(schema.index_of("is_causal"));
    Value mask = n.args[mask_at];
    std::optional<Value> branch = chosen_branch(g, analysis, mask);
    if (branch) mask = *branch;
    Fact fact = analysis.fact(mask);
    bool causal = fact == Fact::Causal && n.args[causal_at].kind == Value::Kind::Bool && !n.args[causal_at].b &&
                  equal_lengths(g, n, g.meta_of(mask).tensor);
    if (fact != Fact::AllTrue && !causal && !branch) {
      rw.copy(id);
      continue;
    }
    std::vector<Value> args;
    for (const Value& v : n.args) args.push_back(rw.map(v));
    args[mask_at] = fact == Fact::AllTrue || causal ? Value::none() : rw.map(mask);
    if (causal) args[causal_at] = Value::of_bool(true);
    // NB: the result's sizes must be the query's (a mask with more dims than the scores broadcasts
    // them). Its layout is the captured call's: where the kernel now chosen lays its result out
    // otherwise, the runtimes copy it into that layout, as for any extern call typed by torch.
    if (!sized_by_query(g, n)) {
      rw.copy(id);
      continue;
    }
    if (log_enabled(LogComponent::graph, LogLevel::Debug))
      log_emit(LogComponent::graph, LogLevel::Debug,
               "attention_masks: '" + n.name + "': the mask is " +
                   (causal                  ? "causal: is_causal=True"
                    : fact == Fact::AllTrue ? "all True: dropped"
                                            : "a where() whose condition is known: its branch"));
    rw.copy_with(id, std::move(args));
  }
  return rw.finish();
}

}  // namespace ff
