#include "frame_eval/guards.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <tuple>
#include <unordered_map>

#include "frame_eval/guards_shapes.h"
#include "frame_eval/py_util.h"
#include "frame_eval/torch_refs.h"
#include "graph/python/tensor_guards.h"
#include "graph/python/torch_native.h"
#include "src/base/config.h"
#include "src/base/errors.h"

namespace ff {

// ---- instructions ----------------------------------------------------------------------------

struct GuardProgram::Fetch {
  Source::Kind kind = Source::Kind::Local;
  int out = -1;
  int base = -1;              // Attr, Item, TypeOf
  int index = -1;             // Local (localsplus slot), Closure (cell index)
  PyObject* name = nullptr;   // Global, Builtin, Attr: interned str (strong)
  PyObject* key = nullptr;    // Item: int or str; Object: the object (strong)
  Py_ssize_t int_key = 0;
  bool key_is_str = false;
};

struct GuardProgram::Check {
  Guard::Kind kind = Guard::Kind::TypeMatch;
  int slot = -1;
  std::vector<int> slots;  // SameObject: the other source's slot; Distinct: every source's
  int guard_index = -1;
  std::string text;             // the guard as Python source (cold path)
  std::string source_text;      // its source as Python source
  PyObject* expected = nullptr;  // strong; TypeMatch: a type; Id/Equals: the object; DictKeys: keys
  bool weak = false;             // IdMatch: `expected` is a weak reference to the object
  Py_ssize_t length = 0;         // LenMatch
  // TensorMatch
  PyTypeObject* tensor_type = nullptr;  // strong
  const TensorReaders* readers = nullptr;
  PyObject* dtype = nullptr;            // borrowed (torch keeps dtypes alive)
  std::vector<int64_t> sizes, strides;
  bool requires_grad = false;
  Device device;
  // The negative and conjugate view bits (a view that reads its storage negated or conjugated):
  // compiled kernels read storage, so an entry traced on plain tensors must not take such views.
  bool neg = false, conj = false;
  // The hot-path check through framefuse._torch_native, where it reads the traced tensor; null: the
  // exact check above (or torch's TensorGuards batch).
  std::unique_ptr<NativeTensorMatch> native;
  // GlobalState
  bool grad_enabled = true;
  PyObject* default_dtype = nullptr;  // borrowed
  int native_default_dtype = -1;      // its c10::ScalarType where framefuse._torch_native is loaded
  int deterministic = -1;             // torch.are_deterministic_algorithms_enabled() (-1: not checked)
  // ShapeRelations
  std::shared_ptr<const ShapeCheck> shapes;
};

namespace {

// A new reference to a bool as 1 or 0; -1 for null (the error cleared).
inline int take_flag(PyObject* r) {
  if (!r) {
    PyErr_Clear();
    return -1;
  }
  int v = r == Py_True;
  Py_DECREF(r);
  return v;
}

// Sizes or strides for a TensorMatch check: a symbolic entry is ShapeRelations' to check.
std::vector<int64_t> unchecked_if_symbolic(const SymShape& s) {
  std::vector<int64_t> out;
  for (const SymInt& x : s) out.push_back(x.is_symbolic() ? kUncheckedSize : x.hint());
  return out;
}

// A bool-returning tensor method (is_neg, is_conj): 1, 0, or -1 (missing or raised).
int method_flag(PyObject* method, PyObject* tensor) {
  return method ? take_flag(PyObject_Vectorcall(method, &tensor, 1, nullptr)) : -1;
}

}  // namespace

// ---- Slots -----------------------------------------------------------------------------------

Slots::Slots(size_t n) : n_(n) {
  if (n <= kInline) {
    data_ = inline_;
  } else {
    heap_.reset(new PyObject*[n]);
    data_ = heap_.get();
  }
  for (size_t i = 0; i < n; ++i) data_[i] = nullptr;
}

Slots::~Slots() { clear(); }

void Slots::clear() {
  for (size_t i = 0; i < n_; ++i) Py_CLEAR(data_[i]);
}

// ---- compile ---------------------------------------------------------------------------------

namespace {

// Evaluates a source on the cold path (compile time) to read expected values from the frame.
PyRef eval_source_cold(const SourcePtr& s, const FrameValues& fr) {
  switch (s->kind) {
    case Source::Kind::Local:
      if (s->index < 0 || s->index >= fr.nlocalsplus) return {};
      return PyRef::borrow(fr.localsplus[s->index]);
    case Source::Kind::Closure:
      if (!fr.closure || s->index < 0 || s->index >= PyTuple_GET_SIZE(fr.closure)) return {};
      return PyRef::borrow(PyCell_GET(PyTuple_GET_ITEM(fr.closure, s->index)));
    case Source::Kind::Global: {
      PyObject* v = PyDict_GetItemString(fr.globals, s->name.c_str());
      return PyRef::borrow(v);
    }
    case Source::Kind::Builtin: {
      PyObject* v = PyDict_Check(fr.builtins) ? PyDict_GetItemString(fr.builtins, s->name.c_str()) : nullptr;
      return PyRef::borrow(v);
    }
    case Source::Kind::Attr: {
      PyRef b = eval_source_cold(s->base, fr);
      if (!b) return {};
      PyRef r = PyRef::steal(PyObject_GetAttrString(b.get(), s->name.c_str()));
      if (!r) PyErr_Clear();
      return r;
    }
    case Source::Kind::Item: {
      PyRef b = eval_source_cold(s->base, fr);
      if (!b) return {};
      PyRef k = PyRef::steal(s->key_is_str ? PyUnicode_FromString(s->str_key.c_str()) : PyLong_FromLongLong(s->int_key));
      PyRef r = PyRef::steal(PyObject_GetItem(b.get(), k.get()));
      if (!r) PyErr_Clear();
      return r;
    }
    case Source::Kind::TypeOf: {
      PyRef b = eval_source_cold(s->base, fr);
      if (!b) return {};
      return PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(b.get())));
    }
    case Source::Kind::IterRest: {
      PyRef b = eval_source_cold(s->base, fr);
      return b ? PyRef::steal(iterator_rest(b.get())) : PyRef();
    }
    case Source::Kind::Object:
      return s->object;
  }
  return {};
}

bool tensor_match_exact(const GuardProgram::Check& c, PyObject* v, std::string* why);

// A tensor guard that torch's TensorGuards batch checks (those without a native check).
bool in_tensor_batch(const GuardProgram::Check& c) { return c.kind == Guard::Kind::TensorMatch && !c.native; }

// Equality that a folded constant can rely on: the same type at every level, floats equal bit for
// bit (0.0 is not -0.0, a NaN is itself), tuples and frozensets element by element in iteration
// order, ranges and slices by their fields (range(0) == range(5, 5) in Python).
bool strictly_equal(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  if (PyFloat_CheckExact(a)) {
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    return std::memcmp(&x, &y, sizeof(double)) == 0;
  }
  if (PyComplex_CheckExact(a)) {
    Py_complex x = PyComplex_AsCComplex(a), y = PyComplex_AsCComplex(b);
    return std::memcmp(&x.real, &y.real, sizeof(double)) == 0 && std::memcmp(&x.imag, &y.imag, sizeof(double)) == 0;
  }
  if (PyTuple_Check(a)) {  // tuples and torch.Size
    if (PyTuple_GET_SIZE(a) != PyTuple_GET_SIZE(b)) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); ++i)
      if (!strictly_equal(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i))) return false;
    return true;
  }
  if (PyFrozenSet_CheckExact(a)) {
    if (PySet_GET_SIZE(a) != PySet_GET_SIZE(b)) return false;
    PyRef ta = PyRef::steal(PySequence_Tuple(a));
    PyRef tb = PyRef::steal(PySequence_Tuple(b));
    if (!ta || !tb) {
      PyErr_Clear();
      return false;
    }
    return strictly_equal(ta.get(), tb.get());
  }
  if (PyRange_Check(a) || PySlice_Check(a)) {
    for (const char* f : {"start", "stop", "step"}) {
      PyRef x = PyRef::steal(PyObject_GetAttrString(a, f));
      PyRef y = PyRef::steal(PyObject_GetAttrString(b, f));
      if (!x || !y || !strictly_equal(x.get(), y.get())) {
        PyErr_Clear();
        return false;
      }
    }
    return true;
  }
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

// Autocast as at trace time: off then (expected null) and off now, or the same state now.
bool autocast_matches(PyObject* expected, std::string* why) {
  int on = autocast_enabled_now();
  if (on < 0) PyErr_Clear();
  if (!expected) {
    if (on == 0) return true;
    if (why) *why = "autocast is off (it is on now)";
    return false;
  }
  PyRef now = PyRef::steal(on == 1 ? autocast_state_now() : nullptr);
  if (!now) PyErr_Clear();
  if (now && strictly_equal(now.get(), expected)) return true;
  if (why) *why = "autocast == " + py_short_repr(expected) + " (got " + (now ? py_short_repr(now.get()) : "off") + ")";
  return false;
}

}  // namespace

bool GuardProgram::holds_dead_object() const {
  for (const Check& c : checks_)
    if (c.weak && PyWeakref_GET_OBJECT(c.expected) == Py_None) return true;
  return false;
}

bool weakly_held(PyObject* o) {
  // Types stay strong: a class outlives its instances, and guards name it on every object.
  return !PyType_Check(o) && PyType_SUPPORTS_WEAKREFS(Py_TYPE(o)) && !PyWeakref_Check(o);
}

namespace {

// What makes two sources one slot: their printed form, where an object source (a class, a constant
// tensor) counts by identity, not by its printed name (two local classes may share one).
std::string slot_key(const Source& s) {
  switch (s.kind) {
    case Source::Kind::Object: return s.name + "@" + std::to_string(reinterpret_cast<uintptr_t>(s.object.get()));
    case Source::Kind::Attr: return slot_key(*s.base) + "." + s.name;
    case Source::Kind::Item:
      return slot_key(*s.base) + "[" + (s.key_is_str ? "'" + s.str_key + "'" : std::to_string(s.int_key)) + "]";
    case Source::Kind::TypeOf: return "type(" + slot_key(*s.base) + ")";
    case Source::Kind::IterRest: return "rest(" + slot_key(*s.base) + ")";
    default: return s.str();
  }
}

}  // namespace

int GuardProgram::slot_of(const SourcePtr& s) const {
  if (!s) return -1;
  std::string key = slot_key(*s);
  for (size_t i = 0; i < slot_keys_.size(); ++i)
    if (slot_keys_[i] == key) return static_cast<int>(i);
  return -1;
}

int GuardProgram::add_source(const SourcePtr& s) {
  FF_CHECK(s != nullptr, "guard or input without a source");
  int existing = slot_of(s);
  if (existing >= 0) return existing;
  Fetch f;
  f.kind = s->kind;
  switch (s->kind) {
    case Source::Kind::Local:
    case Source::Kind::Closure:
      FF_CHECK(s->index >= 0, "local/closure source without an index: " + s->str());
      f.index = s->index;
      break;
    case Source::Kind::Global:
    case Source::Kind::Builtin:
      f.name = PyUnicode_InternFromString(s->name.c_str());
      break;
    case Source::Kind::Attr:
      f.base = add_source(s->base);
      f.name = PyUnicode_InternFromString(s->name.c_str());
      break;
    case Source::Kind::Item:
      f.base = add_source(s->base);
      f.key_is_str = s->key_is_str;
      f.int_key = static_cast<Py_ssize_t>(s->int_key);
      f.key = s->key_is_str ? PyUnicode_InternFromString(s->str_key.c_str()) : PyLong_FromLongLong(s->int_key);
      break;
    case Source::Kind::TypeOf:
    case Source::Kind::IterRest:
      f.base = add_source(s->base);
      break;
    case Source::Kind::Object:
      FF_CHECK(s->object, "object source without an object: " + s->str());
      f.key = s->object.get();
      Py_INCREF(f.key);
      break;
  }
  f.out = static_cast<int>(slot_sources_.size());
  slot_sources_.push_back(s);
  slot_names_.push_back(s->str());
  slot_keys_.push_back(slot_key(*s));
  fetches_.push_back(f);
  program_.push_back({true, static_cast<int>(fetches_.size() - 1)});
  return f.out;
}

GuardProgram::GuardProgram(const std::vector<Guard>& guards, const std::vector<SourcePtr>& extra_sources,
                           const FrameValues& frame)
    : native_(torch_native()) {
  std::vector<PyRef> live_tensors;  // per TensorMatch check without a native check, in order
  for (size_t gi = 0; gi < guards.size(); ++gi) {
    const Guard& g = guards[gi];
    Check c;
    c.kind = g.kind;
    c.guard_index = static_cast<int>(gi);
    c.text = g.str();
    if (g.kind != Guard::Kind::GlobalState && g.kind != Guard::Kind::Distinct && g.kind != Guard::Kind::ShapeRelations) {
      c.slot = add_source(g.source);
      c.source_text = g.source->str();
    }
    for (const SourcePtr& o : g.others) c.slots.push_back(add_source(o));
    switch (g.kind) {
      case Guard::Kind::TypeMatch:
      case Guard::Kind::IdMatch:
      case Guard::Kind::EqualsMatch:
      case Guard::Kind::IterMatch:
      case Guard::Kind::NoAttr:
      case Guard::Kind::NoKey:
      case Guard::Kind::DictKeys:
        FF_CHECK(g.expected != nullptr, "guard without an expected value: " + c.text);
        FF_CHECK(g.kind != Guard::Kind::TypeMatch || PyType_Check(g.expected), "TypeMatch needs a type: " + c.text);
        if (g.kind == Guard::Kind::IdMatch && weakly_held(g.expected)) {
          // NB: a cache entry must not keep the objects it is keyed on alive (a module dropped by
          // its user, an exec'd function): held weakly, a dead one matches nothing.
          c.expected = PyWeakref_NewRef(g.expected, nullptr);
          FF_CHECK(c.expected, "a weak reference to a guarded object");
          c.weak = true;
          break;
        }
        c.expected = g.expected;
        Py_INCREF(c.expected);
        break;
      case Guard::Kind::SymbolicInt:
      case Guard::Kind::LenMatch:
      case Guard::Kind::LenAtLeast:
        c.length = static_cast<Py_ssize_t>(g.length);
        break;
      case Guard::Kind::SameObject:
        FF_CHECK(c.slots.size() == 1, "SameObject needs one other source: " + c.text);
        break;
      case Guard::Kind::Distinct:
        FF_CHECK(c.slots.size() >= 2, "Distinct needs two sources or more: " + c.text);
        break;
      case Guard::Kind::TensorMatch: {
        // The exact tensor type (Tensor, Parameter, a subclass) comes from the traced frame.
        PyRef live = eval_source_cold(g.source, frame);
        FF_CHECK(live && is_tensor(live.get()), "TensorMatch on a value that is not a tensor: " + c.text);
        c.tensor_type = Py_TYPE(live.get());
        Py_INCREF(reinterpret_cast<PyObject*>(c.tensor_type));
        c.readers = &tensor_readers(c.tensor_type);
        c.dtype = torch_dtype_object(g.tensor_meta.dtype);
        FF_CHECK(c.dtype != nullptr, "torch lacks dtype " + std::string(dtype_name(g.tensor_meta.dtype)));
        c.sizes = unchecked_if_symbolic(g.tensor_meta.sizes);
        c.strides = unchecked_if_symbolic(g.tensor_meta.strides);
        FF_CHECK(c.sizes.size() == c.strides.size(), "sizes and strides differ in rank: " + c.text);
        c.requires_grad = g.tensor_meta.requires_grad;
        c.device = g.tensor_meta.device;
        c.neg = method_flag(c.readers->is_neg, live.get()) == 1;
        c.conj = method_flag(c.readers->is_conj, live.get()) == 1;
        // NB: the native check records the traced tensor as it is now, so it is taken only where that
        // tensor still passes the exact check (the trace may have changed it in place).
        if (native_ && !g.tensor_meta.is_symbolic()) {
          auto native = std::make_unique<NativeTensorMatch>();
          if (tensor_match_exact(c, live.get(), nullptr) && native->record(live.get())) c.native = std::move(native);
        }
        if (!c.native) live_tensors.push_back(std::move(live));
        break;
      }
      case Guard::Kind::GlobalState:
        c.expected = g.expected;
        Py_XINCREF(c.expected);
        c.grad_enabled = g.grad_enabled;
        c.deterministic = g.deterministic;
        c.default_dtype = torch_dtype_object(g.default_dtype);
        FF_CHECK(c.default_dtype != nullptr, "unknown default dtype");
        if (native_) c.native_default_dtype = native_->dtype_scalar_type(c.default_dtype);
        break;
      case Guard::Kind::ShapeRelations: {
        // NB: the last guard: every TensorMatch before it has its slot.
        std::vector<ShapeCheck::Tensor> tensors;
        std::vector<ShapeCheck::Int> ints;
        for (size_t gj = 0; gj < gi; ++gj) {
          const Guard& t = guards[gj];
          if (t.kind == Guard::Kind::SymbolicInt) {
            int slot = add_source(t.source);
            ints.push_back({slot, static_cast<SymbolId>(t.length)});
            c.slots.push_back(slot);
          }
          if (t.kind != Guard::Kind::TensorMatch || !t.tensor_meta.is_symbolic()) continue;
          int slot = add_source(t.source);
          tensors.push_back({slot, t.tensor_meta, t.source->str()});
          c.slots.push_back(slot);
        }
        c.shapes = std::make_shared<ShapeCheck>(g.shape_env, std::move(tensors), std::move(ints), native_);
        shapes_ = c.shapes.get();
        break;
      }
    }
    checks_.push_back(std::move(c));
    program_.push_back({false, static_cast<int>(checks_.size() - 1)});
  }
  for (const SourcePtr& s : extra_sources) add_source(s);
  hot_program_ = program_;
  if (!live_tensors.empty() && config().guard_tensors_batched && tensor_guards_type())
    batch_tensor_checks(live_tensors);
}

void GuardProgram::batch_tensor_checks(const std::vector<PyRef>& live) {
  std::vector<const Check*> tensor_checks;
  for (const Check& c : checks_)
    if (in_tensor_batch(c)) tensor_checks.push_back(&c);
  FF_CHECK(tensor_checks.size() == live.size(), "one traced tensor per TensorMatch without a native check");
  Py_ssize_t n = static_cast<Py_ssize_t>(live.size());
  PyRef args = PyRef::steal(PyTuple_New(n));
  if (!args) return PyErr_Clear();
  std::vector<std::vector<int64_t>> sizes, strides;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* t = live[static_cast<size_t>(i)].get();
    Py_INCREF(t);
    PyTuple_SET_ITEM(args.get(), i, t);
    sizes.push_back(tensor_checks[static_cast<size_t>(i)]->sizes);
    strides.push_back(tensor_checks[static_cast<size_t>(i)]->strides);
  }
  // NB: null if the traced tensors no longer match their guards' metadata (the trace changed one in
  // place): the per-tensor checks stay.
  PyObject* check = nullptr;
  PyRef tg = PyRef::steal(make_tensor_guards(args.get(), sizes, strides, &check));
  if (!tg) return;
  tensor_guards_ = tg.release();
  tensor_batch_.reset(check, live.size());
  tensor_batch_args_.assign(live.size(), nullptr);
  hot_program_.clear();
  std::vector<Instr> after_batch;  // ShapeRelations: reads sizes the batch checked the ranks of
  for (const Instr& ins : program_) {
    if (!ins.is_fetch && in_tensor_batch(checks_[static_cast<size_t>(ins.index)])) continue;
    if (!ins.is_fetch && checks_[static_cast<size_t>(ins.index)].kind == Guard::Kind::ShapeRelations) after_batch.push_back(ins);
    else hot_program_.push_back(ins);
  }
  for (const Check* c : tensor_checks) tensor_batch_slots_.push_back(c->slot);
  hot_program_.push_back({false, kTensorBatch});
  hot_program_.insert(hot_program_.end(), after_batch.begin(), after_batch.end());
}

GuardProgram::~GuardProgram() {
  if (!Py_IsInitialized()) return;
  Py_CLEAR(tensor_guards_);
  for (Fetch& f : fetches_) {
    Py_CLEAR(f.name);
    Py_CLEAR(f.key);
  }
  for (Check& c : checks_) {
    Py_CLEAR(c.expected);
    Py_XDECREF(reinterpret_cast<PyObject*>(c.tensor_type));
  }
}

// ---- hot path --------------------------------------------------------------------------------

namespace {

// A dict lookup that never leaves an error set: new reference or null.
inline PyObject* dict_get(PyObject* d, PyObject* key) {
  PyObject* v = PyDict_GetItemWithError(d, key);
  if (!v) {
    PyErr_Clear();
    return nullptr;
  }
  Py_INCREF(v);
  return v;
}

// Compares a sequence of Python ints (tuple or torch.Size) with `expected`. On mismatch, *at is
// the first differing index (or -1 for a length difference) and *got the actual value.
inline bool ints_equal(PyObject* seq, const std::vector<int64_t>& expected, int* at, int64_t* got) {
  if (!PyTuple_Check(seq)) return false;
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  if (n != static_cast<Py_ssize_t>(expected.size())) {
    if (at) *at = -1, *got = n;
    return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (expected[static_cast<size_t>(i)] == kUncheckedSize) continue;
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
    if (v != expected[static_cast<size_t>(i)]) {
      if (v == -1 && PyErr_Occurred()) PyErr_Clear();
      if (at) *at = static_cast<int>(i), *got = v;
      return false;
    }
  }
  return true;
}

inline int bool_getter(const AttrGetter& g, PyObject* obj) { return take_flag(g.get(obj)); }

// The exact tensor check, through torch's Python-level getters; `why` (cold path) gets the first
// difference as Python source.
bool tensor_match_exact(const GuardProgram::Check& c, PyObject* v, std::string* why) {
  const std::string& s = c.source_text;
  if (Py_TYPE(v) != c.tensor_type) {
    if (why) *why = "type(" + s + ") is " + py_type_name(reinterpret_cast<PyObject*>(c.tensor_type)) + " (got " + py_type_name(v) + ")";
    return false;
  }
  const TensorReaders& r = *c.readers;
  PyObject* dt = r.dtype.get(v);
  if (!dt) PyErr_Clear();
  bool dtype_ok = dt == c.dtype;
  if (!dtype_ok && why) *why = s + ".dtype == " + py_short_repr(c.dtype) + " (got " + py_short_repr(dt) + ")";
  Py_XDECREF(dt);
  if (!dtype_ok) return false;
  // Device.
  bool dev_ok;
  switch (c.device.type) {
    case Device::Type::CPU: dev_ok = bool_getter(r.is_cpu, v) == 1; break;
    case Device::Type::Meta: dev_ok = bool_getter(r.is_meta, v) == 1; break;
    case Device::Type::CUDA: {
      dev_ok = bool_getter(r.is_cuda, v) == 1;
      if (dev_ok && c.device.index >= 0) {
        PyObject* idx = PyObject_Vectorcall(r.get_device, &v, 1, nullptr);
        dev_ok = idx && PyLong_AsLong(idx) == c.device.index;
        if (!idx || PyErr_Occurred()) PyErr_Clear();
        Py_XDECREF(idx);
      }
      break;
    }
    default: dev_ok = false;
  }
  if (!dev_ok) {
    if (why) {
      PyRef d = PyRef::steal(r.device.get(v));
      if (!d) PyErr_Clear();
      *why = s + ".device == " + c.device.str() + " (got " + py_short_repr(d.get()) + ")";
    }
    return false;
  }
  int rg = bool_getter(r.requires_grad, v);
  if (rg != static_cast<int>(c.requires_grad)) {
    if (why) *why = s + ".requires_grad == " + (c.requires_grad ? "True" : "False") + " (got " + (rg == 1 ? "True" : "False") + ")";
    return false;
  }
  // NB: no layout check: stride() raises for every layout but torch.strided (sparse, CSR,
  // mkldnn), so the stride comparison below fails for them.
  int at = 0;
  int64_t got = 0;
  PyObject* shape = r.shape.get(v);
  if (!shape) PyErr_Clear();
  bool sizes_ok = shape && ints_equal(shape, c.sizes, &at, &got);
  Py_XDECREF(shape);
  if (!sizes_ok) {
    if (why) {
      if (at < 0) *why = s + ".dim() == " + std::to_string(c.sizes.size()) + " (got " + std::to_string(got) + ")";
      else *why = s + ".size()[" + std::to_string(at) + "] == " + std::to_string(c.sizes[static_cast<size_t>(at)]) + " (got " + std::to_string(got) + ")";
    }
    return false;
  }
  PyObject* stride = PyObject_Vectorcall(r.stride, &v, 1, nullptr);
  if (!stride) PyErr_Clear();
  bool strides_ok = stride && ints_equal(stride, c.strides, &at, &got);
  Py_XDECREF(stride);
  if (!strides_ok) {
    if (why) *why = s + ".stride()[" + std::to_string(at < 0 ? 0 : at) + "] == " +
                    std::to_string(at < 0 || c.strides.empty() ? 0 : c.strides[static_cast<size_t>(at)]) + " (got " + std::to_string(got) + ")";
    return false;
  }
  for (auto [method, want, name] : {std::tuple{r.is_neg, c.neg, ".is_neg()"}, std::tuple{r.is_conj, c.conj, ".is_conj()"}}) {
    int got_bit = method_flag(method, v);
    if (got_bit >= 0 && got_bit != static_cast<int>(want)) {
      if (why) *why = s + name + " == " + (want ? "True" : "False") + " (got " + (got_bit ? "True" : "False") + ")";
      return false;
    }
  }
  return true;
}

}  // namespace

bool GuardProgram::run_fetch(const Fetch& f, const FrameValues& fr, Slots& slots) const {
  PyObject* v = nullptr;
  switch (f.kind) {
    case Source::Kind::Local:
      if (f.index < fr.nlocalsplus) {
        v = fr.localsplus[f.index];
        Py_XINCREF(v);
      }
      break;
    case Source::Kind::Closure:
      if (fr.closure && f.index < PyTuple_GET_SIZE(fr.closure)) {
        v = PyCell_GET(PyTuple_GET_ITEM(fr.closure, f.index));
        Py_XINCREF(v);
      }
      break;
    case Source::Kind::Global:
      v = dict_get(fr.globals, f.name);
      break;
    case Source::Kind::Builtin:
      if (PyDict_Check(fr.builtins)) {
        v = dict_get(fr.builtins, f.name);
      } else {
        v = PyObject_GetAttr(fr.builtins, f.name);
        if (!v) PyErr_Clear();
      }
      break;
    case Source::Kind::Attr:
      v = PyObject_GetAttr(slots[f.base], f.name);
      if (!v) PyErr_Clear();
      break;
    case Source::Kind::Item: {
      PyObject* b = slots[f.base];
      if (!f.key_is_str && (PyList_CheckExact(b) || PyTuple_CheckExact(b))) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(b);
        Py_ssize_t i = f.int_key < 0 ? f.int_key + n : f.int_key;
        if (i >= 0 && i < n) {
          v = PySequence_Fast_GET_ITEM(b, i);
          Py_INCREF(v);
        }
      } else if (PyDict_Check(b)) {  // NB: a dict subclass's entry, not what its own __getitem__ says
        v = dict_get(b, f.key);
      } else {
        v = PyObject_GetItem(b, f.key);
        if (!v) PyErr_Clear();
      }
      break;
    }
    case Source::Kind::TypeOf:
      v = reinterpret_cast<PyObject*>(Py_TYPE(slots[f.base]));
      Py_INCREF(v);
      break;
    case Source::Kind::IterRest:
      v = iterator_rest(slots[f.base]);
      break;
    case Source::Kind::Object:
      v = f.key;
      Py_INCREF(v);
      break;
  }
  slots[static_cast<size_t>(f.out)] = v;
  return v != nullptr;
}

bool GuardProgram::run_check(const Check& c, const Slots& slots, std::string* why) const {
  PyObject* v = c.slot >= 0 ? slots[static_cast<size_t>(c.slot)] : nullptr;
  switch (c.kind) {
    case Guard::Kind::TypeMatch:
      if (reinterpret_cast<PyObject*>(Py_TYPE(v)) == c.expected) return true;
      if (why) *why = "type(" + c.source_text + ") is " + py_type_name(c.expected) + " (got " + py_type_name(v) + ")";
      return false;
    case Guard::Kind::IdMatch: {
      PyObject* e = c.weak ? PyWeakref_GET_OBJECT(c.expected) : c.expected;
      if (v == e && !(c.weak && e == Py_None)) return true;
      if (why) *why = c.source_text + " is " + (c.weak && e == Py_None ? std::string("<an object that no longer exists>") : py_short_repr(e)) + " (got " + py_short_repr(v) + ")";
      return false;
    }
    case Guard::Kind::EqualsMatch: {
      if (strictly_equal(v, c.expected)) return true;
      if (why) *why = c.source_text + " == " + py_short_repr(c.expected) + " (got " + py_short_repr(v) + ")";
      return false;
    }
    case Guard::Kind::NoAttr: {
      PyObject* a = PyObject_GetAttr(v, c.expected);
      if (!a) {
        PyErr_Clear();
        return true;
      }
      Py_DECREF(a);
      if (why) *why = "not hasattr(" + c.source_text + ", " + py_short_repr(c.expected) + ") (it has one now)";
      return false;
    }
    case Guard::Kind::SameObject:
      if (v == slots[static_cast<size_t>(c.slots[0])]) return true;
      if (why) *why = c.text + " (they are two objects now)";
      return false;
    case Guard::Kind::Distinct: {
      bool distinct = true;
      if (c.slots.size() <= 16) {  // a handful of objects: pairwise comparison beats sorting
        for (size_t i = 0; i < c.slots.size() && distinct; ++i)
          for (size_t j = i + 1; j < c.slots.size(); ++j)
            if (slots[static_cast<size_t>(c.slots[i])] == slots[static_cast<size_t>(c.slots[j])]) distinct = false;
      } else {  // a model's modules (hundreds): sorted, neighbours differ
        std::vector<PyObject*> objs;
        objs.reserve(c.slots.size());
        for (int s : c.slots) objs.push_back(slots[static_cast<size_t>(s)]);
        std::sort(objs.begin(), objs.end());
        distinct = std::adjacent_find(objs.begin(), objs.end()) == objs.end();
      }
      if (distinct) return true;
      if (why) *why = c.text + " (two of them are one object now)";
      return false;
    }
    case Guard::Kind::NoKey: {
      // NB: os.environ is a mapping, not a dict.
      int in = PyDict_Check(v) ? PyDict_Contains(v, c.expected) : PySequence_Contains(v, c.expected);
      if (in == 0) return true;
      if (in < 0) PyErr_Clear();
      if (why) *why = py_short_repr(c.expected) + " not in " + c.source_text + " (it is there now)";
      return false;
    }
    case Guard::Kind::IterMatch: {
      bool ok = PyAnySet_CheckExact(v) && PySet_GET_SIZE(v) == PyTuple_GET_SIZE(c.expected);
      if (ok) {
        PyRef items = PyRef::steal(PySequence_Tuple(v));
        if (!items) PyErr_Clear();
        ok = items && strictly_equal(items.get(), c.expected);
      }
      if (ok) return true;
      if (why) {
        PyRef items = PyRef::steal(PySequence_Tuple(v));
        if (!items) PyErr_Clear();
        *why = "tuple(" + c.source_text + ") == " + py_short_repr(c.expected) + " (got " +
               (items ? py_short_repr(items.get()) : py_type_name(v)) + ")";
      }
      return false;
    }
    case Guard::Kind::LenMatch: {
      Py_ssize_t n;
      if (PyList_Check(v)) n = PyList_GET_SIZE(v);
      else if (PyTuple_Check(v)) n = PyTuple_GET_SIZE(v);
      else if (PyDict_Check(v)) n = PyDict_GET_SIZE(v);
      else {
        n = PyObject_Length(v);
        if (n < 0) PyErr_Clear();
      }
      if (n == c.length) return true;
      if (why) *why = "len(" + c.source_text + ") == " + std::to_string(c.length) + " (got " + std::to_string(n) + ")";
      return false;
    }
    case Guard::Kind::SymbolicInt:
      if (PyLong_CheckExact(v)) return true;
      if (why) *why = "type(" + c.source_text + ") is int (got " + py_type_name(v) + ")";
      return false;
    case Guard::Kind::LenAtLeast: {
      Py_ssize_t n = PyObject_Length(v);
      if (n < 0) PyErr_Clear();
      if (n >= c.length) return true;
      if (why) *why = "len(" + c.source_text + ") >= " + std::to_string(c.length) + " (got " + std::to_string(n) + ")";
      return false;
    }
    case Guard::Kind::DictKeys: {
      bool ok = PyDict_Check(v) && PyTuple_Check(c.expected) && PyDict_GET_SIZE(v) == PyTuple_GET_SIZE(c.expected);
      auto same_key = [](PyObject* key, PyObject* want) { return strictly_equal(key, want); };
      if (ok && PyDict_CheckExact(v)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *val;
        while (ok && PyDict_Next(v, &pos, &key, &val)) ok = same_key(key, PyTuple_GET_ITEM(c.expected, i++));
      } else if (ok) {
        // NB: a dict subclass (OrderedDict) iterates in its own order, not its table's.
        PyRef keys = PyRef::steal(PySequence_Tuple(v));
        if (!keys) PyErr_Clear();
        ok = keys && PyTuple_GET_SIZE(keys.get()) == PyTuple_GET_SIZE(c.expected);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(keys.get()); ++i)
          ok = same_key(PyTuple_GET_ITEM(keys.get(), i), PyTuple_GET_ITEM(c.expected, i));
      }
      if (ok) return true;
      if (why) {
        PyRef keys = PyRef::steal(PyDict_Check(v) ? PyDict_Keys(v) : nullptr);
        *why = "list(" + c.source_text + ".keys()) == " + py_short_repr(c.expected) + " (got " +
               (keys ? py_short_repr(keys.get()) : py_type_name(v)) + ")";
      }
      return false;
    }
    case Guard::Kind::TensorMatch: {
      if (!c.native) return tensor_match_exact(c, v, why);
      if (!why) return c.native->matches(v);
      // NB: the native check also compares dispatch keys; the exact one explains everything else.
      if (!tensor_match_exact(c, v, why)) return false;
      std::string diff = c.native->mismatch(v);
      if (diff.empty()) return true;
      *why = c.source_text + ": " + diff;
      return false;
    }
    case Guard::Kind::GlobalState: {
      if (!autocast_matches(c.expected, why)) return false;
      if (c.deterministic >= 0) {
        PyObject* d = call_torch_getter(torch_refs().get_deterministic);
        int now = d ? PyObject_IsTrue(d) : -1;
        Py_XDECREF(d);
        if (now < 0) PyErr_Clear();
        if (now != c.deterministic) {
          if (why) *why = std::string("torch.are_deterministic_algorithms_enabled() == ") + (c.deterministic ? "True" : "False");
          return false;
        }
      }
      if (c.native_default_dtype >= 0 && !why)
        return native_->grad_enabled() == static_cast<int>(c.grad_enabled) &&
               native_->default_scalar_type() == c.native_default_dtype;
      int ge = grad_enabled_now();
      if (ge < 0) PyErr_Clear();
      if (ge != static_cast<int>(c.grad_enabled)) {
        if (why) *why = std::string("torch.is_grad_enabled() == ") + (c.grad_enabled ? "True" : "False") + " (got " + (ge == 1 ? "True" : "False") + ")";
        return false;
      }
      PyObject* dd = call_torch_getter(torch_refs().get_default_dtype);
      if (!dd) PyErr_Clear();
      bool ok = dd == c.default_dtype;
      if (!ok && why) *why = "torch.get_default_dtype() == " + py_short_repr(c.default_dtype) + " (got " + py_short_repr(dd) + ")";
      Py_XDECREF(dd);
      return ok;
    }
    case Guard::Kind::ShapeRelations: {
      return c.shapes->check(slots.data(), why);
    }
  }
  return false;
}

bool GuardProgram::run_tensor_batch(const Slots& slots) const {
  PyObject** args = tensor_batch_args_.data();
  for (size_t i = 0; i < tensor_batch_slots_.size(); ++i) args[i] = slots[static_cast<size_t>(tensor_batch_slots_[i])];
  return tensor_batch_(args);
}

bool GuardProgram::check(const FrameValues& frame, Slots& slots) const {
  for (const Instr& ins : hot_program_) {
    bool ok = ins.is_fetch                ? run_fetch(fetches_[static_cast<size_t>(ins.index)], frame, slots)
              : ins.index == kTensorBatch ? run_tensor_batch(slots)
                                          : run_check(checks_[static_cast<size_t>(ins.index)], slots, nullptr);
    if (!ok) {
      slots.clear();
      return false;
    }
  }
  return true;
}

std::vector<std::string> GuardProgram::explain(const FrameValues& frame, bool first_only) const {
  std::vector<std::string> out;
  Slots slots(num_slots());
  std::vector<bool> fetched_ok(num_slots(), false);
  for (const Instr& ins : program_) {
    if (ins.is_fetch) {
      const Fetch& f = fetches_[static_cast<size_t>(ins.index)];
      bool base_ok = f.base < 0 || fetched_ok[static_cast<size_t>(f.base)];
      fetched_ok[static_cast<size_t>(f.out)] = base_ok && run_fetch(f, frame, slots);
      if (!fetched_ok[static_cast<size_t>(f.out)] && base_ok) {
        out.push_back(slot_names_[static_cast<size_t>(f.out)] + " exists (it could not be read)");
        if (first_only) return out;
      }
      continue;
    }
    const Check& c = checks_[static_cast<size_t>(ins.index)];
    if (c.slot >= 0 && !fetched_ok[static_cast<size_t>(c.slot)]) continue;
    if (c.kind == Guard::Kind::ShapeRelations &&
        !std::all_of(c.slots.begin(), c.slots.end(), [&](int s) { return bool(fetched_ok[static_cast<size_t>(s)]); }))
      continue;
    std::string why;
    if (!run_check(c, slots, &why)) {
      out.push_back(why);
      if (first_only) return out;
    }
  }
  bool batch_fetched = true;
  for (int slot : tensor_batch_slots_) batch_fetched &= fetched_ok[static_cast<size_t>(slot)];
  if (out.empty() && tensor_batch_ && batch_fetched && !run_tensor_batch(slots)) out.push_back(explain_tensor_batch(slots));
  return out;
}

std::string GuardProgram::explain_tensor_batch(const Slots& slots) const {
  std::string generic =
      "a tensor's dispatch keys differ from the traced one's (a negative or conjugate view, "
      "inference mode, or a tensor subclass's state)";
  Py_ssize_t n = static_cast<Py_ssize_t>(tensor_batch_slots_.size());
  PyRef args = PyRef::steal(PyTuple_New(n));
  PyRef names = PyRef::steal(PyList_New(n));
  if (!args || !names) return PyErr_Clear(), generic;
  Py_ssize_t i = 0;
  for (const Check& c : checks_) {
    if (!in_tensor_batch(c)) continue;
    PyObject* t = slots[static_cast<size_t>(c.slot)];
    Py_INCREF(t);
    PyTuple_SET_ITEM(args.get(), i, t);
    PyList_SET_ITEM(names.get(), i, PyUnicode_FromString(c.source_text.c_str()));
    ++i;
  }
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyRef verbose = PyRef::steal(PyObject_GetAttrString(tensor_guards_, "check_verbose"));
  if (!kwargs || !verbose || PyDict_SetItemString(kwargs.get(), "tensor_check_names", names.get()) < 0)
    return PyErr_Clear(), generic;
  PyRef r = PyRef::steal(PyObject_Call(verbose.get(), args.get(), kwargs.get()));
  if (!r || !PyUnicode_Check(r.get())) return PyErr_Clear(), generic;
  const char* text = PyUnicode_AsUTF8(r.get());
  if (!text) return PyErr_Clear(), generic;
  return generic + ": " + text;
}

std::vector<std::string> GuardProgram::describe() const {
  std::vector<std::string> out;
  for (const Check& c : checks_) out.push_back(c.text);
  return out;
}

Guard current_global_state_guard() {
  Guard g;
  g.kind = Guard::Kind::GlobalState;
  int ge = grad_enabled_now();
  if (ge < 0) PyErr_Clear();
  g.grad_enabled = ge == 1;
  PyRef dd = PyRef::steal(call_torch_getter(torch_refs().get_default_dtype));
  if (!dd) PyErr_Clear();
  DType t = DType::Float32;
  if (dd) dtype_from_object(dd.get(), &t);
  g.default_dtype = t;
  g.expected = autocast_state_if_on();
  return g;
}

}  // namespace ff
