// Dynamic shapes in the trace: which dimensions of a tensor read from the frame get a symbol.
//
// A symbol stands for the dimension's size on every call the entry serves; what the trace relies
// on about it becomes guards (graph/symint.h, Guard::Kind::ShapeRelations). Dimensions become
// symbolic the ways torch.compile's do:
//  - marked: torch._dynamo.mark_dynamic / framefuse.mark_dynamic set `_dynamo_dynamic_indices`
//    (maybe_mark_dynamic: `_dynamo_weak_dynamic_indices`); mark_static sets `_dynamo_static_indices`;
//  - automatic: a dimension that had another size in an earlier trace of the same code;
//  - dynamic=True: every dimension of a tensor passed in (module attributes stay static).
// Sizes 0 and 1 always specialise (broadcasting and emptiness depend on them), as torch's do.
#include <Python.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <unordered_set>

#include "frame_eval/interpreter_impl.h"
#include "graph/op.h"
#include "graph/python/graph_calls.h"
#include "src/base/logging.h"

namespace ff {

namespace {

// The ints of a set/list/tuple attribute of `tensor` (borrowed), or nothing.
std::set<int64_t> index_attr(PyObject* tensor, const char* name) {
  std::set<int64_t> out;
  PyRef v = PyRef::steal(PyObject_GetAttrString(tensor, name));
  if (!v) {
    PyErr_Clear();
    return out;
  }
  PyRef it = PyRef::steal(PyObject_GetIter(v.get()));
  if (!it) {
    PyErr_Clear();
    return out;
  }
  while (PyRef item = PyRef::steal(PyIter_Next(it.get()))) {
    long long d = PyLong_AsLongLong(item.get());
    if (d == -1 && PyErr_Occurred()) PyErr_Clear();
    else out.insert(d);
  }
  PyErr_Clear();
  return out;
}

// Read through an attribute somewhere (a module's parameter or buffer).
bool through_attribute(const Source& s) {
  for (const Source* p = &s; p; p = p->base.get())
    if (p->kind == Source::Kind::Attr) return true;
  return false;
}

}  // namespace

void SymbolicTracer::make_dynamic(PyObject* tensor, const Source& src, TensorMeta* meta) {
  if (options_.dynamic == DynamicShapes::Off || meta->dim() == 0) return;
  const std::string key = src.str();
  const size_t n = static_cast<size_t>(meta->dim());
  std::vector<int64_t> hints = meta->sizes.hints();
  std::vector<std::string> why(n);
  auto mark = [&](std::set<int64_t> dims, const char* reason) {
    for (int64_t d : dims) {
      if (d < 0) d += meta->dim();
      if (d >= 0 && static_cast<size_t>(d) < n && why[static_cast<size_t>(d)].empty()) why[static_cast<size_t>(d)] = reason;
    }
  };
  mark(index_attr(tensor, "_dynamo_dynamic_indices"), "marked dynamic");
  mark(index_attr(tensor, "_dynamo_weak_dynamic_indices"), "marked maybe dynamic");
  std::vector<int64_t>* seen = nullptr;
  if (options_.size_history) {
    auto [it, added] = options_.size_history->emplace(key, hints);
    seen = &it->second;
    if (!added && seen->size() == n) {
      for (size_t d = 0; d < n; ++d) {
        if ((*seen)[d] == hints[d]) continue;
        if (why[d].empty()) why[d] = (*seen)[d] < 0 ? "dynamic since an earlier call" : "it was " + std::to_string((*seen)[d]) + " in an earlier call";
        (*seen)[d] = -1;
      }
    } else if (!added) {
      *seen = hints;  // another rank: start over
    }
  }
  if (options_.dynamic == DynamicShapes::All && !through_attribute(src))
    for (size_t d = 0; d < n; ++d)
      if (why[d].empty()) why[d] = "dynamic=True";
  for (int64_t d : index_attr(tensor, "_dynamo_static_indices"))
    if (d >= 0 && static_cast<size_t>(d) < n) why[static_cast<size_t>(d)].clear();

  bool any = false;
  for (size_t d = 0; d < n; ++d) any |= !why[d].empty() && hints[d] >= 2;
  if (!any) return;
  // NB: only dense tensors get symbols: contiguous ones, or (every size at least 2) a permutation
  // of a contiguous buffer (a transpose, channels-last, nonzero's (n, dims) result): their strides
  // follow from the sizes. Another layout's strides would need symbols of their own (a view of a
  // larger buffer keeps its strides).
  // NB: exactly the contiguous strides, not torch's is_contiguous(): an empty tensor or a size-1
  // dimension may have any stride, which the symbolic strides would not describe.
  std::vector<size_t> order(n);  // outermost first
  std::iota(order.begin(), order.end(), 0);
  if (meta->strides.hints() != TensorMeta::contiguous_strides(meta->sizes).hints()) {
    std::vector<int64_t> strides = meta->strides.hints();
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
    bool dense = std::all_of(hints.begin(), hints.end(), [](int64_t h) { return h >= 2; });
    int64_t expected = 1;
    for (size_t k = n; k-- > 0 && dense;) {
      dense = strides[order[k]] == expected;
      expected *= hints[order[k]];
    }
    if (!dense) {
      if (log_enabled(LogArtifact::dynamic))
        log_emit(LogArtifact::dynamic, key + " stays static: it is not dense (stride " + meta->strides.str() + ")");
      return;
    }
  }
  std::string note;
  for (size_t d = 0; d < n; ++d) {
    if (why[d].empty() || hints[d] < 2) continue;
    std::string origin = key + ".size()[" + std::to_string(d) + "]";
    meta->sizes[d] = shape_env_->new_symbol(hints[d], origin);
    note += "\n    " + origin + " -> " + meta->sizes[d].str() + ": " + why[d];
  }
  SymShape ordered;
  for (size_t d : order) ordered.push_back(meta->sizes[d]);
  SymShape strides = TensorMeta::contiguous_strides(ordered);
  for (size_t k = 0; k < n; ++k) meta->strides[order[k]] = strides[k];
  if (log_enabled(LogArtifact::dynamic)) log_emit(LogArtifact::dynamic, "symbolic sizes of " + key + ":" + note);
  else if (log_enabled(LogArtifact::recompiles)) log_emit(LogArtifact::recompiles, "dynamic from now on:" + note);
}

Sym SymbolicTracer::dynamic_int(PyObject* obj, const SourcePtr& src) {
  // NB: ints read through attributes (module and config fields) stay constants, as Dynamo's
  // nn.Module ints do; so do globals.
  if (options_.dynamic == DynamicShapes::Off || through_attribute(*src) || src->kind == Source::Kind::Global ||
      src->kind == Source::Kind::Builtin)
    return nullptr;
  const std::string key = src->str();
  auto known = int_symbols_.find(key);
  if (known != int_symbols_.end()) return known->second;
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || (value == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return nullptr;
  }
  std::string why;
  if (options_.size_history) {
    // NB: its own history entry (a tensor may be read at the same source in another call).
    auto [it, added] = options_.size_history->emplace("int " + key, std::vector<int64_t>{value});
    int64_t& seen = it->second.at(0);
    if (!added && seen != value) {
      why = seen < 0 ? "dynamic since an earlier call" : "it was " + std::to_string(seen) + " in an earlier call";
      seen = -1;
    }
  }
  if (why.empty() && options_.dynamic == DynamicShapes::All) why = "dynamic=True";
  // NB: 0 and 1 specialise as sizes do (and negative ints: symbols are at least 2).
  if (why.empty() || value < 2) return nullptr;
  SymInt sym = shape_env_->new_symbol(value, key);
  Guard g;
  g.kind = Guard::Kind::SymbolicInt;
  g.source = src;
  g.length = sym.as_symbol();
  out_.guards.push_back(std::move(g));
  add_input(ValueMeta::of_symint(sym), src);
  Sym s = size_of(sym);
  int_symbols_.emplace(key, s);
  if (log_enabled(LogArtifact::dynamic)) log_emit(LogArtifact::dynamic, "symbolic int " + key + " -> " + sym.str() + ": " + why);
  else if (log_enabled(LogArtifact::recompiles)) log_emit(LogArtifact::recompiles, "dynamic from now on:\n    " + key + " -> " + sym.str() + ": " + why);
  return s;
}

// ---- symbolic Python ints ------------------------------------------------------------------------
//
// A size read from a symbolic dimension (x.shape[0], x.size(1), B, T, C = x.size()) is a SymInt
// value. Arithmetic (+ - * // %), comparisons, truth, stack moves, locals, tuples, inlined calls and
// the torch ops listed in symint_op() keep it symbolic; every other use first specialises it to the
// traced value with a guard (the trace is then exact for the sizes the guard admits).

namespace {

bool is_plain_int(const Sym& v) { return v->is(SymKind::Const) && PyLong_CheckExact(v->obj.get()); }

// Two ints, at least one of them symbolic.
bool symint_operands(const Sym& a, const Sym& b) {
  return (a->is(SymKind::SymInt) || b->is(SymKind::SymInt)) && (a->is(SymKind::SymInt) || is_plain_int(a)) &&
         (b->is(SymKind::SymInt) || is_plain_int(b));
}

SymInt int_of(const Sym& v) {
  if (v->is(SymKind::SymInt)) return v->sint;
  return SymInt(PyLong_AsLongLong(v->obj.get()));
}

}  // namespace

// Opcodes that move symbolic ints or model them: the stack keeps them.
bool keeps_symints(Handler h) {
  switch (h) {
    case Handler::Nop:
    case Handler::Precall:
    case Handler::PopTop:
    case Handler::PushNull:
    case Handler::Copy:
    case Handler::Swap:
    case Handler::LoadConst:
    case Handler::ContainsOp:  // these specialise what they hash or compare themselves
    case Handler::BuildMap:
    case Handler::BuildConstKeyMap:
    case Handler::MapAdd:
    case Handler::DictMerge:
    case Handler::DictUpdate:
    case Handler::LoadFast:
    case Handler::LoadFastAndClear:
    case Handler::StoreFast:
    case Handler::DeleteFast:
    case Handler::LoadGlobal:
    case Handler::LoadDeref:
    case Handler::StoreDeref:
    case Handler::LoadClosure:
    case Handler::MakeCell:
    case Handler::CopyFreeVars:
    case Handler::BinaryOp:
    case Handler::UnaryNegative:
    case Handler::UnaryPositive:
    case Handler::UnaryNot:
    case Handler::CompareOp:
    case Handler::BinarySubscr:
    case Handler::BinarySlice:
    case Handler::BuildTuple:
    case Handler::BuildList:
    case Handler::ListAppend:
    case Handler::ListExtend:
    case Handler::ListToTuple:
    case Handler::CallIntrinsic1:  // list to tuple, unary +
    case Handler::UnpackEx:
    case Handler::CallFunctionEx:  // f(*shape[:-1], -1): as Call, the callee decides
    case Handler::BuildSlice:
    case Handler::UnpackSequence:
    case Handler::JumpForward:
    case Handler::JumpBackward:
    case Handler::PopJumpIfFalse:
    case Handler::PopJumpIfTrue:
    case Handler::PopJumpIfNone:
    case Handler::PopJumpIfNotNone:
    case Handler::ToBool:  // 3.13: before every branch on a value that is not a bool
    case Handler::KwNames:
    case Handler::Call:
    case Handler::CallKw:
    case Handler::ReturnValue:
    case Handler::ReturnConst: return true;
    default: return false;
  }
}

// Ops whose meta rules read their int arguments as SymInts (sizes, slice bounds, arange's bounds) or
// only their kind (arithmetic and comparisons with a Python int): only they receive symbolic ints;
// any other op gets them specialised.
bool symint_op(std::optional<OpId> op) {
  if (!op) return false;
  return op_in(op_kind(*op), {Op::view, Op::reshape, Op::tensor_reshape, Op::expand, Op::op_getitem, Op::arange, Op::zeros, Op::ones,
                              Op::empty, Op::new_zeros, Op::new_ones, Op::new_empty, Op::layer_norm, Op::rms_norm,
                              // a Python int that varies as an operand: the kernels read it (lower.cpp)
                              Op::add, Op::sub, Op::mul, Op::div, Op::true_divide, Op::op_add, Op::op_sub, Op::op_mul,
                              Op::op_truediv, Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge, Op::op_eq, Op::op_ne, Op::op_lt,
                              Op::op_le, Op::op_gt, Op::op_ge});
}

Sym SymbolicTracer::size_of(const SymInt& v) {
  // NB: a size only the run knows (a data-dependent output's) is not given to Python code: what
  // it computes from it would need the value. The graph ends before the read.
  if (sym_has_unbacked(v.expr()))
    brk(BreakKind::DataDependentShape, "reads the size " + v.str() + " of a data-dependent output");
  if (v.is_symbolic()) ++symints_made_;
  return make_size(v);
}

void SymbolicTracer::specialize_ints(const Sym& v) {
  if (symints_made_ == 0 || !v) return;
  std::unordered_set<const SymValue*> seen;
  std::vector<SymValue*> todo = {v.get()};
  while (!todo.empty()) {
    SymValue* s = todo.back();
    todo.pop_back();
    if (!s || !seen.insert(s).second) continue;
    if (s->is(SymKind::SymInt)) {
      int64_t value = s->sint;  // NB: specialises (guards) the expression
      s->kind = SymKind::Const;
      s->obj = PyRef::steal(PyLong_FromLongLong(value));
      s->sint = SymInt();
      continue;
    }
    for (const Sym& i : s->items) todo.push_back(i.get());
    for (const Sym& k : s->keys) todo.push_back(k.get());
    for (const auto& [name, a] : s->attrs) todo.push_back(a.get());
    if (s->origin) todo.push_back(s->origin.get());
  }
}

void SymbolicTracer::specialize_stack(Frame& f) {
  if (symints_made_ == 0) return;
  for (const Sym& v : f.stack) specialize_ints(v);
}

Sym SymbolicTracer::symint_binary(int nb, const Sym& a, const Sym& b) {
  if (!symint_operands(a, b)) return nullptr;
  // NB: an operand or result past int64 (Python ints have no bound) stays a Python int: the
  // operands specialise and the plain path computes it.
  if (is_plain_int(a) || is_plain_int(b)) {
    int overflow = 0;
    PyLong_AsLongLongAndOverflow((is_plain_int(a) ? a : b)->obj.get(), &overflow);
    if (overflow) return nullptr;
  }
  SymInt x = int_of(a), y = int_of(b);
  try {
    switch (nb >= 13 ? nb - 13 : nb) {
      case 0: return size_of(x + y);   // NB_ADD
      case 10: return size_of(x - y);  // NB_SUBTRACT
      case 5: return size_of(x * y);   // NB_MULTIPLY
      case 2:                          // NB_FLOOR_DIVIDE
      case 6:                          // NB_REMAINDER
        if (y == 0) return nullptr;   // eager raises: the plain path reports it
        return size_of(nb % 13 == 2 ? x / y : x % y);
      default: return nullptr;
    }
  } catch (const std::overflow_error&) {
    return nullptr;
  }
}

Sym SymbolicTracer::symint_compare(int cmp, const Sym& a, const Sym& b) {
  if (!symint_operands(a, b)) return nullptr;
  SymInt x = int_of(a), y = int_of(b);
  bool r;
  switch (cmp) {  // Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE
    case 0: r = x < y; break;
    case 1: r = x <= y; break;
    case 2: r = x == y; break;
    case 3: r = x != y; break;
    case 4: r = x > y; break;
    default: r = x >= y; break;
  }
  return make_const(r ? Py_True : Py_False);
}

bool SymbolicTracer::keeps_symint_args(const Sym& fn) {
  switch (fn->kind) {
    case SymKind::Function:
    case SymKind::BoundMethod:
    case SymKind::Partial:
    case SymKind::Object:
    case SymKind::NewObject: return true;  // inlined Python code (a module's forward ...)
    case SymKind::Method: return !fn->items.empty() && fn->items[0]->is(SymKind::Tensor);
    case SymKind::Const: {
      PyObject* o = fn->obj.get();
      return PyFunction_Check(o) || PyMethod_Check(o) || op_for_callable(o).has_value();
    }
    default: return false;
  }
}

}  // namespace ff
