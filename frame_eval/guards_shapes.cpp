#include "frame_eval/guards_shapes.h"

#include <utility>

#include "frame_eval/torch_refs.h"
#include "src/base/errors.h"

namespace ff {

namespace {

// A tuple of ints into out[0..n); false if it is not one of length n.
bool read_ints(PyObject* seq, int64_t* out, size_t n) {
  if (!seq || !PyTuple_Check(seq) || static_cast<size_t>(PyTuple_GET_SIZE(seq)) != n) return false;
  for (size_t i = 0; i < n; ++i) {
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, static_cast<Py_ssize_t>(i)));
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    out[i] = v;
  }
  return true;
}

}  // namespace

ShapeCheck::ShapeCheck(std::shared_ptr<const ShapeEnv> env, std::vector<Tensor> tensors, std::vector<Int> ints,
                       const ff_torch_native_api* native)
    : env_(std::move(env)), tensors_(std::move(tensors)), ints_(std::move(ints)), native_(native) {
  FF_CHECK(env_, "ShapeCheck without a shape environment");
  size_t total = 0;
  for (const Tensor& t : tensors_) {
    offset_.push_back(total);
    total += t.meta.sizes.size();
  }
  symbol_pos_.assign(env_->num_symbols(), -1);
  std::vector<SymExprId> exprs;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const TensorMeta& m = tensors_[t].meta;
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      int pos = static_cast<int>(offset_[t] + d);
      SymbolId s = m.sizes[d].as_symbol();
      if (s >= 0 && symbol_pos_[static_cast<size_t>(s)] < 0) {
        symbol_pos_[static_cast<size_t>(s)] = pos;  // binds s; nothing to compare
      } else if (m.sizes[d].is_symbolic()) {
        exprs.push_back(m.sizes[d].expr());
        compares_.push_back({Compare::Kind::Size, pos, SymRel::Eq});
      }
      if (m.strides[d].is_symbolic()) {
        exprs.push_back(m.strides[d].expr());
        compares_.push_back({Compare::Kind::Stride, pos, SymRel::Eq});
      }
    }
  }
  for (size_t i = 0; i < ints_.size(); ++i) {
    auto s = static_cast<size_t>(ints_[i].symbol);
    FF_CHECK(s < symbol_pos_.size(), "a SymbolicInt guard names an unknown symbol");
    if (symbol_pos_[s] < 0) symbol_pos_[s] = static_cast<int>(total + i);
  }
  total += ints_.size();
  // NB: an unbacked symbol (a data-dependent output's size) has no input to read: no guard
  // mentions it, and it stays unbound here.
  for (size_t k = 0; k < symbol_pos_.size(); ++k)
    FF_CHECK(symbol_pos_[k] >= 0 || env_->is_unbacked(static_cast<SymbolId>(k)),
             "symbol " + env_->origin(static_cast<SymbolId>(k)) + " is no tensor's size or int's value");
  const std::vector<SymGuard>& guards = env_->guards();
  for (size_t i = 0; i < guards.size(); ++i) {
    exprs.push_back(guards[i].expr);
    compares_.push_back({Compare::Kind::Guard, static_cast<int>(i), guards[i].rel});
  }
  for (SymExprId e : env_->evaluated()) {  // only evaluated: run() fails where one overflows
    exprs.push_back(e);
    compares_.push_back({Compare::Kind::Evaluated, 0, SymRel::Eq});
  }
  // NB: the interned expressions of constant guards do not occur: comparisons settle those.
  program_ = SymProgram(exprs);
  sizes_.assign(total, 0);
  strides_.assign(total, 0);
  bindings_.assign(symbol_pos_.size(), 0);
  stack_.assign(program_.stack_size(), 0);
  out_.assign(exprs.size(), 0);
}

bool ShapeCheck::read(size_t t, PyObject* tensor) const {
  size_t n = tensors_[t].meta.sizes.size();
  int64_t* sizes = sizes_.data() + offset_[t];
  int64_t* strides = strides_.data() + offset_[t];
  ff_native_tensor_meta m;
  if (native_ && native_->tensor_meta(tensor, &m)) {
    if (m.dim != static_cast<int64_t>(n)) return false;
    for (size_t d = 0; d < n; ++d) sizes[d] = m.sizes[d], strides[d] = m.strides[d];
    return true;
  }
  const TensorReaders& r = tensor_readers(Py_TYPE(tensor));
  PyObject* shape = r.shape.get(tensor);
  if (!shape) PyErr_Clear();
  bool ok = read_ints(shape, sizes, n);
  Py_XDECREF(shape);
  if (!ok) return false;
  PyObject* stride = PyObject_Vectorcall(r.stride, &tensor, 1, nullptr);
  if (!stride) PyErr_Clear();
  ok = read_ints(stride, strides, n);
  Py_XDECREF(stride);
  return ok;
}

bool ShapeCheck::check(PyObject* const* slots, std::string* why) const {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (!read(t, slots[tensors_[t].slot])) {
      if (why) *why = tensors_[t].source_text + ".dim() == " + std::to_string(tensors_[t].meta.dim()) + " (got another)";
      return false;
    }
  }
  size_t ints_at = sizes_.size() - ints_.size();
  for (size_t i = 0; i < ints_.size(); ++i) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(slots[ints_[i].slot], &overflow);
    if (v == -1 && PyErr_Occurred()) PyErr_Clear();
    sizes_[ints_at + i] = overflow ? 0 : v;  // a huge int fails the `>= 2` or a guard below
    if (overflow) {
      if (why) *why = env_->origin(ints_[i].symbol) + " fits in 64 bits";
      return false;
    }
  }
  for (size_t k = 0; k < symbol_pos_.size(); ++k) {
    if (symbol_pos_[k] < 0) continue;  // unbacked: 0, read by nothing
    bindings_[k] = sizes_[static_cast<size_t>(symbol_pos_[k])];
    if (bindings_[k] < 2) {
      if (why)
        *why = env_->origin(static_cast<SymbolId>(k)) + " >= 2 (got " + std::to_string(bindings_[k]) +
               "): values 0 and 1 are specialised";
      return false;
    }
  }
  if (!program_.run(bindings_.data(), stack_.data(), out_.data())) {
    if (why) *why = "the entry's size expressions divide by zero or overflow int64 at these values";
    return false;
  }
  for (size_t i = 0; i < compares_.size(); ++i) {
    const Compare& c = compares_[i];
    int64_t v = out_[i];
    bool ok;
    switch (c.kind) {
      case Compare::Kind::Size: ok = v == sizes_[static_cast<size_t>(c.pos)]; break;
      case Compare::Kind::Stride: ok = v == strides_[static_cast<size_t>(c.pos)]; break;
      case Compare::Kind::Evaluated: ok = true; break;
      case Compare::Kind::Guard:
        ok = c.rel == SymRel::Eq ? v == 0 : c.rel == SymRel::Ne ? v != 0
                                        : c.rel == SymRel::Lt   ? v < 0
                                                                : v <= 0;
        break;
    }
    if (!ok) {
      if (why) *why = describe_failure(i);
      return false;
    }
  }
  return true;
}

std::string ShapeCheck::describe_failure(size_t item) const {
  const Compare& c = compares_[item];
  if (c.kind == Compare::Kind::Guard) {
    const SymGuard& g = env_->guards()[static_cast<size_t>(c.pos)];
    std::string values;
    for (SymbolId s : sym_free_symbols(g.expr))
      values += "; " + env_->origin(s) + " = " + std::to_string(bindings_[static_cast<size_t>(s)]);
    return env_->guard_str(g) + " (got " + std::to_string(out_[item]) + " " + sym_rel_str(g.rel) + " 0" + values + ")";
  }
  for (size_t t = 0; t < tensors_.size(); ++t) {
    size_t d = static_cast<size_t>(c.pos) - offset_[t];
    if (static_cast<size_t>(c.pos) < offset_[t] || d >= tensors_[t].meta.sizes.size()) continue;
    bool size = c.kind == Compare::Kind::Size;
    const SymInt& want = size ? tensors_[t].meta.sizes[d] : tensors_[t].meta.strides[d];
    int64_t got = size ? sizes_[static_cast<size_t>(c.pos)] : strides_[static_cast<size_t>(c.pos)];
    return tensors_[t].source_text + (size ? ".size()[" : ".stride()[") + std::to_string(d) + "] == " +
           env_->expr_str(want.expr()) + " (got " + std::to_string(got) + ", expected " + std::to_string(out_[item]) + ")";
  }
  return "a symbolic size differs";
}

}  // namespace ff
