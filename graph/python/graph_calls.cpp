#include "graph/python/graph_calls.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/python/data_dependent.h"
#include "graph/python/open_ops.h"
#include "graph/symbolic_fit.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/gil_once.h"

namespace py = pybind11;

namespace ff {
namespace {

struct TorchTypes {
  py::object torch, dtype, device, memory_format, layout, tensor, empty_strided;
};

const TorchTypes& torch_types() {
  static TorchTypes* types = nullptr;
  return *gil_once(types, [] {
    auto* t = new TorchTypes();  // NB: leaked on purpose; outlives interpreter teardown
    t->torch = py::module_::import("torch");
    t->dtype = t->torch.attr("dtype");
    t->device = t->torch.attr("device");
    t->memory_format = t->torch.attr("memory_format");
    t->layout = t->torch.attr("layout");
    t->tensor = t->torch.attr("Tensor");
    t->empty_strided = t->torch.attr("empty_strided");
    return t;
  });
}

std::string strip_torch(std::string s) { return s.rfind("torch.", 0) == 0 ? s.substr(6) : s; }

// eager_cpu_fma (graph/meta_rules.h): add(a, b, alpha=0.3) of float32 values whose fused and unfused
// results differ, read in the vector body (element 0 of 67) and in the scalar tail (element 66).
bool probe_eager_cpu_fma() {
  const float a = 0.543624997138977f, b = -1.2654215097427368f, alpha = 0.3f;
  const float fused = std::fmaf(b, alpha, a);
  try {
    py::object torch = torch_types().torch;
    py::object f32 = torch.attr("float32");
    py::object x = torch.attr("full")(py::make_tuple(67), a, py::arg("dtype") = f32);
    py::object y = torch.attr("full")(py::make_tuple(67), b, py::arg("dtype") = f32);
    py::object r = torch.attr("add")(x, y, py::arg("alpha") = 0.3);
    auto at = [&](int i) { return r.attr("__getitem__")(i).attr("item")().cast<float>(); };
    return at(0) == fused && at(66) == fused;
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return false;
  }
}

py::tuple int_tuple(const std::vector<int64_t>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = py::int_(v[i]);
  return t;
}

std::vector<int64_t> int_vector(py::handle seq) {
  std::vector<int64_t> out;
  for (py::handle item : seq) out.push_back(item.cast<int64_t>());
  return out;
}

// ---- meta-tensor fallback ----------------------------------------------------------------------

struct FallbackCall {
  const Graph& g;
  std::optional<Device> requested_device;  // a `device=` argument, replaced by "meta" in the call
  std::vector<Device> input_devices;
  std::vector<std::pair<py::object, int64_t>> inputs;  // the meta tensors passed, with their versions
  bool probe = false;  // real tensors of ones on the operand's device instead of meta tensors (kernel_exists)
  // Symbolic sizes and int arguments at these bindings (meta_by_probing); null: specialised.
  const std::vector<int64_t>* at = nullptr;
  // >= 0: real tensors at the traced sizes and strides (meta_by_running), values drawn from a
  // generator seeded with it.
  int real = -1;
  // Set: fake tensors on the operands' devices, made by it (autocast's plan), their nodes in
  // fake_nodes in the order made.
  py::object fake;
  std::vector<NodeId> fake_nodes;

  std::vector<int64_t> ints(const SymShape& s) const {
    if (!at) return s.ints();
    std::vector<int64_t> out;
    for (const SymInt& x : s) out.push_back(sym_specialize(x, *at).hint());
    return out;
  }

  py::object to_meta_py(const Value& v) {
    if (v.is_node()) {
      const ValueMeta& m = g.node(v.node).meta;
      if (!m.is_tensor()) throw MetaError("non-tensor node operand");
      const TensorMeta& t = m.tensor;
      input_devices.push_back(t.device);
      const TorchTypes& tt = torch_types();
      py::object dtype = tt.torch.attr(std::string(dtype_name(t.dtype)).c_str());
      std::vector<int64_t> sizes = ints(t.sizes);
      if (fake) {
        fake_nodes.push_back(v.node);
        py::object f = fake(int_tuple(sizes), int_tuple(ints(t.strides)), dtype, t.device.str(), t.requires_grad);
        inputs.emplace_back(f, 0);
        return f;
      }
      if (probe) {
        // NB: small tensors keep their shape; larger ones shrink every dim to at most 1, which
        // broadcasts like the original (a shape the op rejects only costs a graph break).
        int64_t numel = 1;
        for (int64_t d : sizes) numel *= d;
        if (numel > 4096)
          for (int64_t& d : sizes) d = std::min<int64_t>(d, 1);
        return tt.torch.attr("ones")(int_tuple(sizes), py::arg("dtype") = dtype, py::arg("device") = t.device.str());
      }
      if (real >= 0) return real_tensor(t, sizes, dtype);
      py::object meta = tt.empty_strided(int_tuple(sizes), int_tuple(ints(t.strides)), py::arg("dtype") = dtype,
                                         py::arg("device") = "meta");
      if (t.requires_grad) meta.attr("requires_grad_")(true);
      inputs.emplace_back(meta, meta.attr("_version").cast<int64_t>());
      return meta;
    }
    if (v.kind == Value::Kind::Device) {
      requested_device = v.device;
      return probe ? torch_types().device(v.device.str()) : torch_types().device("meta");
    }
    if (at && v.kind == Value::Kind::Int && v.sym) return py::int_(sym_evaluate(v.sym, *at));
    if (v.is_sequence()) {
      py::list items;
      for (const Value& item : v.items) items.append(to_meta_py(item));
      if (v.kind == Value::Kind::Tuple) return py::tuple(items);
      return items;
    }
    PyObject* obj = value_to_py(v, nullptr);
    if (!obj) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(obj);
  }

  py::object real_tensor(const TensorMeta& t, const std::vector<int64_t>& sizes, const py::object& dtype) {
    // NB: a buffer as large as the strides reach, viewed with them (an expanded operand keeps its
    // zero strides).
    const TorchTypes& tt = torch_types();
    std::vector<int64_t> strides = ints(t.strides);
    int64_t extent = 1;
    for (size_t d = 0; d < sizes.size(); ++d) extent = sizes[d] == 0 ? 0 : extent + (sizes[d] - 1) * strides[d];
    py::object base = tt.torch.attr("empty")(py::make_tuple(std::max<int64_t>(extent, 1)), py::arg("dtype") = dtype,
                                             py::arg("device") = t.device.str());
    py::object gen = tt.torch.attr("Generator")(py::arg("device") = t.device.str());
    gen.attr("manual_seed")(real);
    // NB: positive floats (weights, scales and variances must be), ints of 1 (valid indices and
    // counts); the probes differ in the floats and the bools.
    if (is_floating(t.dtype)) base.attr("uniform_")(0.5 + real, 1.5 + 2 * real, py::arg("generator") = gen);
    else if (is_complex(t.dtype)) base.attr("normal_")(py::arg("generator") = gen);
    else if (t.dtype == DType::Bool) base.attr("bernoulli_")(0.5, py::arg("generator") = gen);
    else base.attr("fill_")(1);
    if (t.requires_grad) base.attr("requires_grad_")(true);
    py::object out = base.attr("as_strided")(int_tuple(sizes), int_tuple(strides));
    inputs.emplace_back(out, out.attr("_version").cast<int64_t>());
    return out;
  }

  // `fn` called with `bound` (op's arguments) converted by to_meta_py.
  py::object call(PyObject* fn, const OpDef& op, const std::vector<Value>& bound) {
    CallArgs ca = call_args(op, bound);
    py::list pos;
    for (const Value* v : ca.positional) pos.append(to_meta_py(*v));
    py::dict kw;
    for (const auto& [name, v] : ca.keywords) kw[py::str(name)] = to_meta_py(*v);
    py::object r = py::reinterpret_borrow<py::object>(fn)(*py::tuple(pos), **kw);
    if (is_allowed_in_graph_op(op)) check_allowed_result(r);
    return r;
  }

  // An allow_in_graph function's result is a node of its own: a tensor or a tuple of tensors, none
  // of them an argument, a view of one, or another result (eager's would share memory).
  void check_allowed_result(py::handle r) {
    std::vector<py::object> outs;
    if (py::isinstance(r, torch_types().tensor)) outs.push_back(py::reinterpret_borrow<py::object>(r));
    else if (PyTuple_CheckExact(r.ptr()))
      for (py::handle item : r) {
        if (!py::isinstance(item, torch_types().tensor)) throw MetaError("its result is a tuple holding something other than tensors");
        outs.push_back(py::reinterpret_borrow<py::object>(item));
      }
    else throw MetaError(std::string("its result is a ") + Py_TYPE(r.ptr())->tp_name + "; only a tensor or a tuple of tensors is captured");
    auto base = [](const py::object& t) {
      py::object b = t.attr("_base");
      return b.is_none() ? t : b;
    };
    std::vector<py::object> seen;
    for (const auto& [t, version] : inputs) seen.push_back(base(t));
    for (const py::object& o : outs) {
      for (const py::object& s : seen)
        if (base(o).is(s)) throw MetaError("its result is an argument, a view of one or another result (eager's would share memory)");
      seen.push_back(base(o));
    }
  }

  Device result_device() const {
    if (requested_device) return *requested_device;
    for (const Device& d : input_devices)
      if (d.type != Device::Type::CPU) return d;
    return input_devices.empty() ? Device{} : input_devices.front();
  }

  ValueMeta from_result(py::handle r) {
    if (py::isinstance(r, torch_types().tensor)) {
      std::string dtype = py::str(r.attr("dtype")).cast<std::string>();
      if (!dtype_from_name(strip_torch(dtype))) throw MetaError("a result of dtype " + dtype + " is not supported in graphs");
      TensorMeta t = meta_from_tensor(r.ptr());
      t.device = result_device();
      return ValueMeta::of_tensor(std::move(t));
    }
    if (py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r)) {
      std::vector<ValueMeta> items;
      for (py::handle item : r) items.push_back(from_result(item));
      return ValueMeta::tuple(std::move(items));
    }
    if (py::isinstance<py::bool_>(r)) return ValueMeta::of(ValueMeta::Kind::Bool);
    if (py::isinstance<py::int_>(r)) return ValueMeta::of(ValueMeta::Kind::Int);
    if (py::isinstance<py::float_>(r)) return ValueMeta::of(ValueMeta::Kind::Float);
    if (r.is_none()) return ValueMeta::of(ValueMeta::Kind::None);
    throw MetaError(std::string("result of type ") + Py_TYPE(r.ptr())->tp_name + " is not supported in graphs");
  }
};

bool cuda_capturing() {
  py::object cuda = torch_types().torch.attr("cuda");
  return py::hasattr(cuda, "is_current_stream_capturing") && cuda.attr("is_current_stream_capturing")().cast<bool>();
}

// Meta tensors type a call without running a kernel: abs of a bool tensor, or a float16 op on
// torch 1.13's CPU, types fine but raises in eager. A pointwise, reduction or composite call on CPU
// tensors whose meta came from the fallback is therefore run once on small real tensors of the
// same dtypes (cached by op and operand signature); if that raises, the call is not put in the
// graph (it runs in eager, which raises the user its own error).
bool kernel_exists(const OpDef& op, const std::vector<Value>& bound, const Graph& g, std::string* reason,
                   const std::vector<int64_t>* at = nullptr) {
  if (!(op.traits & (kPointwise | kReduction | kComposite | kCreation)) || (op.traits & (kRandom | kNondeterministicOutput)))
    return true;
  bool has_tensor = false;
  for (const Value& v : bound) has_tensor |= v.is_node() && g.node(v.node).meta.is_tensor();
  if (!has_tensor) return true;  // torch.full(sizes, v): no operand to shrink
  std::string key = op.name;
  for (const Value& v : bound) {
    if (v.is_node() && g.node(v.node).meta.is_tensor()) {
      const TensorMeta& t = g.node(v.node).meta.tensor;
      // NB: CUDA's kernels support other dtypes than CPU's ("floor_cuda" not implemented for
      // 'Bool'), so a CUDA call is probed on its own device: eager's CUDA dispatch decides. Only
      // pointwise ops and reductions there: ones as an index could trip a device-side assert.
      bool cuda = t.device.type == Device::Type::CUDA && (op.traits & (kPointwise | kReduction));
      if (t.device.type != Device::Type::CPU && !cuda) return true;
      if (cuda && cuda_capturing()) return true;  // a probe would be recorded into the user's CUDA graph
      key += "|" + t.device.str() + std::string(dtype_name(t.dtype)) + std::to_string(t.dim());
    } else if (v.is_node()) {
      return true;  // a value known only at run time
    } else {
      char f[40];
      std::snprintf(f, sizeof f, "%a", v.f);  // NB: exact: the verdict may depend on the value
      // NB: the verdict holds for this value only: a Python int that varies is guarded to it.
      int64_t i = v.kind != Value::Kind::Int || !v.sym ? v.i : at ? sym_evaluate(v.sym, *at)
                                                                  : v.as_symint().guard_int();
      key += "|" + std::to_string(static_cast<int>(v.kind)) + ":" + (v.kind == Value::Kind::Int ? std::to_string(i) : v.kind == Value::Kind::Float ? std::string(f)
                                                                                                                                                   : v.s);
    }
  }
  static auto* verdicts = new std::unordered_map<std::string, std::string>();  // NB: under the GIL; leaked on purpose
  auto it = verdicts->find(key);
  if (it == verdicts->end()) {
    std::string verdict;
    PyObject* fn = op_callable(op.id);
    try {
      FallbackCall call{g, std::nullopt, {}, {}, /*probe=*/true, at};
      CallArgs ca = call_args(op, bound);
      py::list pos;
      for (const Value* v : ca.positional) pos.append(call.to_meta_py(*v));
      py::dict kw;
      for (const auto& [name, v] : ca.keywords) kw[py::str(name)] = call.to_meta_py(*v);
      py::object warnings = py::module_::import("warnings");
      py::object quiet = warnings.attr("catch_warnings")();
      quiet.attr("__enter__")();
      warnings.attr("simplefilter")("ignore");
      try {
        py::reinterpret_borrow<py::object>(fn)(*py::tuple(pos), **kw);
      } catch (py::error_already_set& e) {
        verdict = e.what();  // "RuntimeError: ..."
      }
      quiet.attr("__exit__")(py::none(), py::none(), py::none());
    } catch (py::error_already_set& e) {
      verdict = std::string("the kernel probe failed: ") + e.what();
    } catch (MetaError& e) {
      verdict = std::string("the kernel probe failed: ") + e.what();
    }
    it = verdicts->emplace(key, verdict).first;
  }
  if (it->second.empty()) return true;
  *reason = op.target + " raises in eager for these operands: " + it->second.substr(0, it->second.find('\n'));
  return false;
}

// Whether Python number v may not convert to dtype dt: eager converts some scalar arguments with
// a checked conversion (masked_fill, clamp, fill_, where, hardtanh ...) and raises "value cannot be
// converted to type ... without overflow" where it does not fit. Over-approximate: such calls are
// only probed (kernel_exists), which settles it.
bool number_may_overflow(const Value& v, DType dt) {
  if (!v.is_number() || v.kind == Value::Kind::Bool) return false;
  if (v.sym) {
    // NB: a Python int that varies takes any value >= 2 that fits in int64: the wide dtypes hold
    // every one; a narrower one holds it where the trace guards it below the dtype's maximum.
    if (dt == DType::Int64 || dt == DType::Float32 || dt == DType::Float64 || dt == DType::BFloat16) return false;
    if (dt == DType::Bool || !(is_integral(dt, false) || dt == DType::Float16)) return true;
    int64_t hi = dt == DType::Float16 ? 65504 : dt == DType::UInt8 ? 255
                                                                   : (int64_t(1) << (dtype_size(dt) * 8 - 1)) - 1;
    try {
      return !(v.as_symint() <= hi);  // records the guard in the trace's ShapeEnv
    } catch (const SymbolicSpecialization&) {
      return true;
    }
  }
  double x = v.as_double();
  if (dt == DType::Bool) return !(x == 0 || x == 1);
  if (is_integral(dt, false)) {
    if (v.kind == Value::Kind::Float && !std::isfinite(x)) return true;
    int bits = static_cast<int>(dtype_size(dt)) * 8;
    double lo = dt == DType::UInt8 ? 0 : -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, dt == DType::UInt8 ? 8 : bits - 1) - 1;
    if (v.kind == Value::Kind::Int) return dt != DType::Int64 && (static_cast<double>(v.i) < lo || static_cast<double>(v.i) > hi);
    return x < lo || x > hi;
  }
  double max = dt == DType::Float16 ? 65504.0 : dt == DType::BFloat16 ? 3.3895313892515355e38
                                            : dt == DType::Float32    ? 3.4028234663852886e38
                                                                      : INFINITY;
  return std::isfinite(x) && std::fabs(x) > max;
}

bool has_overflowing_number(const std::vector<Value>& bound, const ValueMeta& meta, const Graph& g) {
  std::vector<DType> dtypes;
  for (const Value& v : bound)
    if (v.is_node() && g.node(v.node).meta.is_tensor()) dtypes.push_back(g.node(v.node).meta.tensor.dtype);
  for (const Value& v : bound) {
    for (DType dt : dtypes)
      if (number_may_overflow(v, dt)) return true;
    // NB: a bool result says nothing of the conversion of a Python int that varies (the ops that
    // receive one, arithmetic and comparisons, convert it to the operands' dtype).
    if (meta.is_tensor() && !(v.sym && meta.tensor.dtype == DType::Bool) && number_may_overflow(v, meta.tensor.dtype)) return true;
  }
  return false;
}

// ---- symbolic sizes through the fallback (graph/symbolic_fit.h) ---------------------------------

// The size expressions `v` carries (tensor operands' sizes, strides and numels, symbolic ints),
// and the symbols they use.
void symbolic_operands(const Value& v, const Graph& g, std::vector<SymInt>* exprs, std::set<SymbolId>* used) {
  auto note = [&](const SymInt& x) {
    if (!x.is_symbolic()) return;
    exprs->push_back(x);
    for (SymbolId s : sym_free_symbols(x.expr())) used->insert(s);
  };
  if (v.is_node()) {
    const ValueMeta& m = g.node(v.node).meta;
    if (!m.is_tensor()) return;
    for (const SymInt& x : m.tensor.sizes) note(x);
    for (const SymInt& x : m.tensor.strides) note(x);
    note(m.tensor.numel());
    return;
  }
  if (v.kind == Value::Kind::Int && v.sym) note(v.as_symint());
  for (const Value& item : v.items) symbolic_operands(item, g, exprs, used);
}

// The symbolic result whose value at probe k is results[k] (sizes and strides fitted to the
// candidates), or nullopt where the results differ in structure or a value fits no expression.
std::optional<ValueMeta> fit_meta(const std::vector<ValueMeta>& results, const std::vector<std::vector<int64_t>>& probes,
                                  const std::vector<SymInt>& candidates) {
  const ValueMeta& first = results[0];
  for (const ValueMeta& r : results)
    if (r.kind != first.kind || r.items.size() != first.items.size() ||
        (r.is_tensor() && (r.tensor.dim() != first.tensor.dim() || r.tensor.dtype != first.tensor.dtype)))
      return std::nullopt;
  ValueMeta out = first;
  if (first.is_tensor()) {
    auto fit_entries = [&](auto member, const std::vector<SymInt>& cands) -> std::optional<SymShape> {
      SymShape fitted;
      for (size_t d = 0; d < first.tensor.sizes.size(); ++d) {
        std::vector<int64_t> values;
        for (const ValueMeta& r : results) values.push_back((r.tensor.*member)[d].hint());
        auto x = fit_symint(values, probes, cands);
        if (!x) return std::nullopt;
        fitted.push_back(*x);
      }
      return fitted;
    };
    auto sizes = fit_entries(&TensorMeta::sizes, candidates);
    if (!sizes) return std::nullopt;
    // Strides: the contiguous ones of the fitted sizes where they reproduce every probe, else each
    // fitted to the operands' expressions and the result's sizes and their suffix products.
    SymShape strides = TensorMeta::contiguous_strides(*sizes);
    bool contiguous = true;
    for (size_t k = 0; k < results.size() && contiguous; ++k)
      for (size_t d = 0; d < strides.size(); ++d)
        contiguous &= sym_specialize(strides[d], probes[k]).hint() == results[k].tensor.strides[d].hint();
    if (!contiguous) {
      std::vector<SymInt> cands = candidates;
      cands.insert(cands.end(), sizes->begin(), sizes->end());
      cands.insert(cands.end(), strides.begin(), strides.end());
      auto fitted = fit_entries(&TensorMeta::strides, cands);
      if (!fitted) return std::nullopt;
      strides = *fitted;
    }
    out.tensor.sizes = *sizes;
    out.tensor.strides = strides;
    return out;
  }
  for (size_t i = 0; i < first.items.size(); ++i) {
    std::vector<ValueMeta> items;
    for (const ValueMeta& r : results) items.push_back(r.items[i]);
    auto item = fit_meta(items, probes, candidates);
    if (!item) return std::nullopt;
    out.items[i] = std::move(*item);
  }
  return out;
}

// An op without a C++ rule whose operands carry symbolic sizes, typed without specialising them:
// run on meta tensors at the traced sizes and at other bindings (probes_for), its result's sizes
// and strides fitted to expressions over the operands' (fit_meta). The probes first move each
// symbol on its own; where torch rejects those (operands whose sizes must agree), symbols of equal
// traced value move together and the trace guards them equal. Nullopt where the op raises at a
// probe or nothing fits: the caller then specialises as before.
std::optional<ValueMeta> meta_by_probing(const OpDef& op, PyObject* fn, const std::vector<Value>& bound, const Graph& g,
                                         ShapeEnv& env) {
  std::vector<SymInt> candidates;
  std::set<SymbolId> used;
  for (const Value& v : bound) symbolic_operands(v, g, &candidates, &used);
  if (used.empty()) return std::nullopt;
  std::vector<int64_t> hints(env.num_symbols());
  for (size_t s = 0; s < hints.size(); ++s) hints[s] = env.hint(static_cast<SymbolId>(s));
  CallArgs ca = call_args(op, bound);
  auto run_at = [&](const std::vector<std::vector<int64_t>>& probes) -> std::optional<ValueMeta> {
    std::vector<ValueMeta> results;
    for (const std::vector<int64_t>& at : probes) {
      FallbackCall call{g, std::nullopt, {}, {}, false, &at};
      try {
        py::list pos;
        for (const Value* v : ca.positional) pos.append(call.to_meta_py(*v));
        py::dict kw;
        for (const auto& [name, v] : ca.keywords) kw[py::str(name)] = call.to_meta_py(*v);
        py::object result = py::reinterpret_borrow<py::object>(fn)(*py::tuple(pos), **kw);
        for (const auto& [meta, version] : call.inputs)
          if (meta.attr("_version").cast<int64_t>() != version && op.is_open() && !call_mutates_input(op, bound))
            return std::nullopt;  // an unannounced write: the specialising path reports it
        results.push_back(call.from_result(result));
      } catch (py::error_already_set&) {
        return std::nullopt;
      } catch (MetaError&) {
        return std::nullopt;
      }
    }
    return fit_meta(results, probes, candidates);
  };
  // Probes in general position over classes of symbols that move together: the traced sizes,
  // each class moved alone, and two moves of every class by different amounts. A function linear
  // in the symbols is then pinned down (its classes' points are affinely independent), and the
  // mixed moves tell products apart; probes along one line would fit many expressions at once.
  auto probes_for = [&](const std::vector<std::vector<SymbolId>>& classes) {
    std::vector<std::vector<int64_t>> probes{hints};
    auto move = [&](const std::vector<int64_t>& by) {
      std::vector<int64_t> at = hints;
      for (size_t c = 0; c < classes.size(); ++c)
        for (SymbolId sym : classes[c]) at[static_cast<size_t>(sym)] += by[c];
      probes.push_back(std::move(at));
    };
    for (size_t c = 0; c < classes.size(); ++c) {
      std::vector<int64_t> by(classes.size(), 0);
      by[c] = 2;
      move(by);
    }
    for (int64_t k : {3, 5}) {
      std::vector<int64_t> by(classes.size());
      for (size_t c = 0; c < classes.size(); ++c) by[c] = k + static_cast<int64_t>(c) * (k - 1);
      move(by);
    }
    return probes;
  };
  std::vector<std::vector<SymbolId>> alone;
  for (SymbolId sym : used) alone.push_back({sym});
  std::optional<ValueMeta> m = run_at(probes_for(alone));
  if (!m) {
    // Operands whose sizes must agree (a product's inner dimension): symbols of equal traced
    // value move together, and the trace guards them equal, whether or not the op needs it.
    std::map<int64_t, std::vector<SymbolId>> by_hint;
    for (SymbolId sym : used) by_hint[hints[static_cast<size_t>(sym)]].push_back(sym);
    std::vector<std::vector<SymbolId>> classes;
    for (auto& [hint, syms] : by_hint) classes.push_back(syms);
    if (classes.size() == alone.size()) return std::nullopt;
    m = run_at(probes_for(classes));
    if (!m) return std::nullopt;
    for (const auto& cls : classes)
      for (size_t k = 1; k < cls.size(); ++k) {
        int64_t h = hints[static_cast<size_t>(cls[0])];
        env.add_guard(SymGuard{(SymInt::symbol(cls[0], h) - SymInt::symbol(cls[k], h)).expr(), SymRel::Eq});
      }
  }
  std::string reason;
  if (!kernel_exists(op, bound, g, &reason, &hints)) return std::nullopt;
  return m;
}

// An op torch has no meta kernel for (lstsq, geqrf, histogram, cov ... ; many more on torch 1.13),
// typed by running it on real tensors of the operands' sizes, strides, dtypes and devices, twice,
// with other values: what it returns twice alike is its result's metadata. Not for random ops, ops
// that write an operand, symbolic sizes, operands over 64Ki elements, or integer tensors whose
// values are sizes (`tensor_split(x, indices_or_sections)`: their results would differ per value
// and two probes may agree by chance); the probes run with warnings ignored and the CPU (and CUDA)
// generators restored. Nullopt with *reason where it cannot be typed so.
std::optional<ValueMeta> meta_by_running(const OpDef& op, PyObject* fn, const std::vector<Value>& bound, const Graph& g,
                                         std::string* reason) {
  if (op.traits & (kRandom | kNondeterministicOutput | kInplace)) return std::nullopt;
  int64_t numel = 0;
  bool cuda = false;
  for (size_t i = 0; i < bound.size(); ++i) {
    std::vector<const Value*> vs{&bound[i]};
    for (const Value& item : bound[i].items) vs.push_back(&item);
    for (const Value* v : vs) {
      if (!v->is_node()) {
        if (v->sym) return std::nullopt;
        continue;
      }
      const ValueMeta& m = g.node(v->node).meta;
      if (!m.is_tensor() || m.tensor.is_symbolic()) return std::nullopt;
      const TensorMeta& t = m.tensor;
      if (t.device.type != Device::Type::CPU && t.device.type != Device::Type::CUDA) return std::nullopt;
      cuda |= t.device.type == Device::Type::CUDA;
      numel += t.numel();
      const ParamSpec& p = op.schema.params[i];
      bool tensor_param = p.type == ParamType::Tensor || p.type == ParamType::TensorList || p.type == ParamType::TensorVarargs;
      if (!tensor_param) return std::nullopt;  // a tensor as a Scalar or an int: its value is read
      if (!is_floating(t.dtype) && !is_complex(t.dtype)) {
        for (const char* sizes : {"indices_or_sections", "tensor_indices_or_sections", "sections", "split_size", "split_sizes",
                                  "repeats", "size", "sizes", "shape", "output_size", "minlength", "start", "end", "step", "steps"})
          if (p.name == sizes) return std::nullopt;
      }
    }
  }
  if (numel > (int64_t{1} << 16)) return std::nullopt;
  if (cuda && cuda_capturing()) return std::nullopt;
  const TorchTypes& tt = torch_types();
  py::object cpu_state = tt.torch.attr("get_rng_state")();
  py::object cuda_state = cuda ? tt.torch.attr("cuda").attr("get_rng_state")() : py::none();
  py::object warnings = py::module_::import("warnings");
  py::object quiet = warnings.attr("catch_warnings")();
  quiet.attr("__enter__")();
  warnings.attr("simplefilter")("ignore");
  std::optional<ValueMeta> out;
  try {
    std::vector<ValueMeta> results;
    for (int seed : {0, 1}) {
      FallbackCall call{g, std::nullopt, {}};
      call.real = seed;
      py::object r = call.call(fn, op, bound);
      for (const auto& [t, version] : call.inputs)
        if (t.attr("_version").cast<int64_t>() != version) throw MetaError("it writes an operand");
      results.push_back(call.from_result(r));
    }
    if (!(results[0] == results[1])) throw MetaError("its result's sizes or layout depend on its operands' values");
    out = std::move(results[0]);
  } catch (py::error_already_set& e) {
    *reason = op.target + " has no meta kernel and raises on probe values: " + std::string(e.what());
  } catch (MetaError& e) {
    *reason = op.target + " has no meta kernel and " + e.what();
  }
  quiet.attr("__exit__")(py::none(), py::none(), py::none());
  tt.torch.attr("set_rng_state")(cpu_state);
  if (cuda) tt.torch.attr("cuda").attr("set_rng_state")(cuda_state);
  if (!out) {
    auto nl = reason->find('\n');
    if (nl != std::string::npos) reason->resize(nl);
  }
  return out;
}

std::optional<ValueMeta> meta_by_fallback(const OpDef& op, const std::vector<Value>& bound, const Graph& g,
                                          std::string* reason) {
  PyObject* fn = op_callable(op.id);
  if (!fn) {
    *reason = op.target + " is not available in the installed torch";
    return std::nullopt;
  }
  if (ShapeEnv* env = ShapeEnv::current())
    if (auto m = meta_by_probing(op, fn, bound, g, *env)) return m;
  try {
    FallbackCall call{g, std::nullopt, {}};
    py::object result = call.call(fn, op, bound);
    if (op.is_open() && !call_mutates_input(op, bound)) {
      // NB: what an op writes is read off torch's schema; a write the schema does not announce
      // (seen as a bumped version counter) would be lost on a graph's values.
      for (const auto& [meta, version] : call.inputs)
        if (meta.attr("_version").cast<int64_t>() != version) {
          *reason = is_allowed_in_graph_op(op)
                        ? op.target + " writes its argument in place"
                        : op.target + " writes an operand in place although its schema (" + op.aten + ") does not say so";
          return std::nullopt;
        }
    }
    ValueMeta meta = call.from_result(result);
    if (!kernel_exists(op, bound, g, reason)) return std::nullopt;
    return meta;
  } catch (py::error_already_set& e) {
    *reason = op.target + " cannot be typed on meta tensors: " + std::string(e.what());
    auto nl = reason->find('\n');
    if (nl != std::string::npos) reason->resize(nl);
    // NB: no meta kernel (torch says NotImplementedError) is not an error of the call: the op is
    // typed on real probe values instead where that is safe. Not a library's op (torch.library):
    // its kernel is the user's code, which may have effects; it needs a fake implementation.
    if (e.matches(PyExc_NotImplementedError) && op.is_open() && op.aten.rfind("aten::", 0) != 0) {
      *reason = op.target +
                " has no fake implementation to type it on meta tensors: register one with "
                "torch.library.register_fake (before torch 2.4: impl_abstract, or a Meta kernel)";
      return std::nullopt;
    }
    if (e.matches(PyExc_NotImplementedError)) {
      std::string why;
      if (auto m = meta_by_running(op, fn, bound, g, &why)) return m;
      if (!why.empty()) *reason = why;
    }
    return std::nullopt;
  } catch (MetaError& e) {
    *reason = op.target + ": " + e.what();
    return std::nullopt;
  }
}

}  // namespace

std::optional<Value> constant_from_py(PyObject* obj) {
  if (obj == Py_None) return Value::none();
  if (obj == Py_Ellipsis) return Value::ellipsis();
  if (PyBool_Check(obj)) return Value::of_bool(obj == Py_True);
  if (PyLong_CheckExact(obj)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) return std::nullopt;
    return Value::of_int(v);
  }
  if (PyFloat_CheckExact(obj)) return Value::of_float(PyFloat_AS_DOUBLE(obj));
  if (PyUnicode_CheckExact(obj)) return Value::of_str(py::reinterpret_borrow<py::str>(obj).cast<std::string>());
  if (PySlice_Check(obj)) {
    auto* s = reinterpret_cast<PySliceObject*>(obj);
    auto a = constant_from_py(s->start), b = constant_from_py(s->stop), c = constant_from_py(s->step);
    if (!a || !b || !c) return std::nullopt;
    return Value::slice(*a, *b, *c);
  }
  if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
    std::vector<Value> items;
    py::handle seq(obj);
    for (py::handle item : seq) {
      auto v = constant_from_py(item.ptr());
      if (!v) return std::nullopt;
      items.push_back(std::move(*v));
    }
    return PyList_CheckExact(obj) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  const TorchTypes& tt = torch_types();
  py::handle h(obj);
  if (py::isinstance(h, tt.dtype)) {
    auto d = dtype_from_name(strip_torch(py::str(h).cast<std::string>()));
    if (!d) return std::nullopt;
    return Value::of_dtype(*d);
  }
  if (py::isinstance(h, tt.device)) {
    auto d = Device::parse(py::str(h).cast<std::string>());
    if (!d) return std::nullopt;
    return Value::of_device(*d);
  }
  if (py::isinstance(h, tt.memory_format)) return Value::of_memory_format(strip_torch(py::str(h).cast<std::string>()));
  if (py::isinstance(h, tt.layout)) return Value::of_layout(strip_torch(py::str(h).cast<std::string>()));
  return std::nullopt;
}

PyObject* value_to_py(const Value& v, PyObject* const* node_values) {
  try {
    switch (v.kind) {
      case Value::Kind::None: Py_RETURN_NONE;
      case Value::Kind::Ellipsis: Py_INCREF(Py_Ellipsis); return Py_Ellipsis;
      case Value::Kind::Bool: return PyBool_FromLong(v.b);
      case Value::Kind::Int: return PyLong_FromLongLong(v.sym ? v.as_symint().guard_int() : v.i);
      case Value::Kind::Float: return PyFloat_FromDouble(v.f);
      case Value::Kind::Str: return PyUnicode_FromStringAndSize(v.s.data(), static_cast<Py_ssize_t>(v.s.size()));
      case Value::Kind::DType:
        return py::object(torch_types().torch.attr(std::string(dtype_name(v.dtype)).c_str())).release().ptr();
      case Value::Kind::Device: return torch_types().device(v.device.str()).release().ptr();
      case Value::Kind::MemoryFormat:
      case Value::Kind::Layout: return py::object(torch_types().torch.attr(v.s.c_str())).release().ptr();
      case Value::Kind::Slice: {
        PyObject* a = value_to_py(v.items[0], node_values);
        PyObject* b = a ? value_to_py(v.items[1], node_values) : nullptr;
        PyObject* c = b ? value_to_py(v.items[2], node_values) : nullptr;
        PyObject* s = c ? PySlice_New(a, b, c) : nullptr;
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        return s;
      }
      case Value::Kind::List:
      case Value::Kind::Tuple: {
        bool list = v.kind == Value::Kind::List;
        Py_ssize_t n = static_cast<Py_ssize_t>(v.items.size());
        PyObject* seq = list ? PyList_New(n) : PyTuple_New(n);
        if (!seq) return nullptr;
        for (Py_ssize_t i = 0; i < n; ++i) {
          PyObject* item = value_to_py(v.items[static_cast<size_t>(i)], node_values);
          if (!item) {
            Py_DECREF(seq);
            return nullptr;
          }
          if (list) PyList_SET_ITEM(seq, i, item);
          else PyTuple_SET_ITEM(seq, i, item);
        }
        return seq;
      }
      case Value::Kind::Node: {
        if (!node_values || !node_values[v.node]) {
          PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: graph value used before it was computed");
          return nullptr;
        }
        Py_INCREF(node_values[v.node]);
        return node_values[v.node];
      }
    }
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  }
  PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: unknown value kind");
  return nullptr;
}

TensorMeta meta_from_tensor(PyObject* tensor) {
  py::handle t(tensor);
  TensorMeta m;
  // NB: graphs hold dense, strided tensors (a sparse one has no strides and no data pointer).
  std::string layout = py::str(t.attr("layout")).cast<std::string>();
  if (layout != "torch.strided") throw Unsupported("a tensor with layout " + layout + ": framefuse captures dense, strided tensors");
  m.sizes = int_vector(t.attr("shape"));
  m.strides = int_vector(t.attr("stride")());
  auto dt = dtype_from_name(strip_torch(py::str(t.attr("dtype")).cast<std::string>()));
  FF_CHECK(dt.has_value(), "unsupported tensor dtype " + py::str(t.attr("dtype")).cast<std::string>());
  m.dtype = *dt;
  auto dev = Device::parse(py::str(t.attr("device")).cast<std::string>());
  FF_CHECK(dev.has_value(), "unsupported device " + py::str(t.attr("device")).cast<std::string>());
  m.device = *dev;
  m.requires_grad = t.attr("requires_grad").cast<bool>();
  return m;
}

// ---- torch.autocast ------------------------------------------------------------------------------

namespace {

thread_local const AutocastState* g_autocast = nullptr;

py::object autocast_module() {
  static py::object* mod = nullptr;
  return *gil_once(mod, [] { return new py::object(py::module_::import("framefuse._autocast")); });  // NB: leaked on purpose
}

bool autocast_eligible(const TensorMeta& t, const AutocastState& ac) {
  // NB: autocast's own test: a floating tensor other than float64, on a device type it is on for.
  bool on = t.device.type == Device::Type::CPU ? ac.cpu : t.device.type == Device::Type::CUDA && ac.cuda;
  return on && (t.dtype == DType::Float32 || t.dtype == DType::Float16 || t.dtype == DType::BFloat16);
}

// The plan's cache key: the op, the state, the tensor operands' device, dtype, rank and
// requires_grad, and the other arguments (ints of varying value by kind only).
void append_autocast_key(std::string& key, const Value& v, const Graph& g) {
  if (v.is_node()) {
    const ValueMeta& m = g.node(v.node).meta;
    if (!m.is_tensor()) {
      key += "n;";
      return;
    }
    key += "t" + m.tensor.device.str() + std::string(dtype_name(m.tensor.dtype)) + std::to_string(m.tensor.dim()) +
           (m.tensor.requires_grad ? "g;" : ";");
    return;
  }
  key += std::to_string(static_cast<int>(v.kind)) + ":";
  if (v.kind == Value::Kind::Int) key += v.sym ? "s" : std::to_string(v.i);
  else if (v.kind == Value::Kind::Float) {
    char f[40];
    std::snprintf(f, sizeof f, "%a", v.f);
    key += f;
  } else if (v.kind == Value::Kind::Bool) key += v.b ? "1" : "0";
  else if (v.kind == Value::Kind::DType) key += dtype_name(v.dtype);
  else key += v.s;
  key += "(";
  for (const Value& item : v.items) append_autocast_key(key, item, g);
  key += ");";
}

// Autocast's casts of this call's operands as (operand index, dtype), operands counted in the
// order the call passes them; nullopt with *reason where autocast does more than cast operands.
std::optional<std::vector<std::pair<int, DType>>> autocast_plan(const Graph& g, const OpDef& def, const std::vector<Value>& bound,
                                                                const AutocastState& ac, std::string* reason,
                                                                std::vector<NodeId>* operands) {
  CallArgs ca = call_args(def, bound);
  std::string key = def.name;
  if (ac.cpu) key += "|cpu:" + std::string(dtype_name(ac.cpu_dtype));
  if (ac.cuda) key += "|cuda:" + std::string(dtype_name(ac.cuda_dtype));
  key += "|";
  for (const Value* v : ca.positional) append_autocast_key(key, *v, g);
  for (const auto& [name, v] : ca.keywords) {
    key += name + "=";
    append_autocast_key(key, *v, g);
  }
  struct Plan {
    std::vector<std::pair<int, DType>> casts;
    std::string error;
  };
  static auto* plans = new std::unordered_map<std::string, Plan>();  // NB: under the GIL; leaked on purpose
  FallbackCall call{g, std::nullopt, {}};
  call.fake = autocast_module().attr("fake");
  py::list pos;
  py::dict kw;
  try {
    for (const Value* v : ca.positional) pos.append(call.to_meta_py(*v));
    for (const auto& [name, v] : ca.keywords) kw[py::str(name)] = call.to_meta_py(*v);
  } catch (MetaError& e) {
    *reason = def.target + " under torch.autocast: " + e.what();
    return std::nullopt;
  }
  *operands = call.fake_nodes;
  auto it = plans->find(key);
  if (it == plans->end()) {
    Plan plan;
    PyObject* fn = op_callable(def.id);
    if (!fn) {
      plan.error = "no eager callable";
    } else {
      py::list inputs;
      for (const auto& [t, version] : call.inputs) inputs.append(t);
      py::list state;
      const TorchTypes& tt = torch_types();
      auto dtype_of = [&](DType d) { return tt.torch.attr(std::string(dtype_name(d)).c_str()); };
      if (ac.cpu) state.append(py::make_tuple("cpu", dtype_of(ac.cpu_dtype)));
      if (ac.cuda) state.append(py::make_tuple("cuda", dtype_of(ac.cuda_dtype)));
      py::object r = autocast_module().attr("casts")(py::reinterpret_borrow<py::object>(fn), py::tuple(pos), kw, inputs,
                                                     py::tuple(state));
      if (py::isinstance<py::str>(r)) {
        plan.error = r.cast<std::string>();
      } else {
        for (py::handle item : r) {
          auto dt = dtype_from_name(strip_torch(py::str(item.attr("__getitem__")(1)).cast<std::string>()));
          if (!dt) {
            plan.error = "autocast casts to an unsupported dtype";
            break;
          }
          plan.casts.emplace_back(item.attr("__getitem__")(0).cast<int>(), *dt);
        }
      }
    }
    it = plans->emplace(key, std::move(plan)).first;
  }
  if (!it->second.error.empty()) {
    *reason = def.target + " under torch.autocast: " + it->second.error;
    return std::nullopt;
  }
  return it->second.casts;
}

// Replaces the operands of `bound` autocast casts by `to` nodes of them (add_op_call's autocast step).
bool apply_autocast(Graph& g, const OpDef& def, std::vector<Value>& bound, const AutocastState& ac, std::string* reason,
                    bool grad_enabled) {
  // NB: autocast casts no view, cast or in-place op (and `to` is what a cast is made of).
  if ((def.traits & (kView | kInplace)) || def.id == op_id(Op::to)) return true;
  bool eligible = false;
  for (const Value& v : bound)
    v.for_each_node([&](NodeId n) {
      const ValueMeta& m = g.node(n).meta;
      eligible = eligible || (m.is_tensor() && autocast_eligible(m.tensor, ac));
    });
  if (!eligible) return true;
  std::vector<NodeId> operands;
  auto plan = autocast_plan(g, def, bound, ac, reason, &operands);
  if (!plan) return false;
  if (plan->empty()) return true;
  if (def.traits & (kInplace | kInplaceFlag)) {
    *reason = def.target + " under torch.autocast: autocast casts the operands of an in-place call";
    return false;
  }
  if (plan->size() == 1 && plan->front().first == -1) {
    // autocast passes dtype= instead of casting (CUDA's sum, softmax ...): the call with it
    int index = def.schema.index_of("dtype");
    if (index < 0 || !bound[static_cast<size_t>(index)].is_none()) {
      *reason = def.target + " under torch.autocast: autocast sets a dtype argument this op does not take";
      return false;
    }
    bound[static_cast<size_t>(index)] = Value::of_dtype(plan->front().second);
    return true;
  }
  std::map<NodeId, DType> target;
  for (const auto& [k, dt] : *plan) {
    if (static_cast<size_t>(k) >= operands.size()) throw InternalError("autocast plan: operand index out of range");
    NodeId n = operands[static_cast<size_t>(k)];
    if (target.count(n) && target[n] != dt) {
      *reason = def.target + " under torch.autocast: one operand cast to two dtypes";
      return false;
    }
    target[n] = dt;
  }
  std::map<NodeId, NodeId> cast;
  AutocastScope none(nullptr);
  for (const auto& [n, dt] : target) {
    auto c = add_op_call(g, op_id(Op::to), {Value::of_node(n), Value::of_dtype(dt)}, {}, reason, grad_enabled);
    if (!c) return false;
    cast[n] = *c;
  }
  std::function<void(Value&)> replace = [&](Value& v) {
    if (v.is_node()) {
      auto it = cast.find(v.node);
      if (it != cast.end()) v.node = it->second;
    }
    for (Value& item : v.items) replace(item);
  };
  for (Value& v : bound) replace(v);
  return true;
}

}  // namespace

AutocastScope::AutocastScope(const AutocastState* state) : saved_(g_autocast) { g_autocast = state; }
AutocastScope::~AutocastScope() { g_autocast = saved_; }

bool autocast_capturable() {
  static int capturable = -1;  // NB: under the GIL
  if (capturable < 0) capturable = autocast_module().attr("available")().cast<bool>() ? 1 : 0;
  return capturable == 1;
}

std::optional<NodeId> add_op_call(Graph& g, OpId op, const std::vector<Value>& args,
                                  const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                  bool grad_enabled) {
  const OpDef& def = op_def(op);
  auto bound = bind_call(def, args, kwargs, g, reason);
  if (!bound) return std::nullopt;
  if (g_autocast && g_autocast->any() && !apply_autocast(g, def, *bound, *g_autocast, reason, grad_enabled)) return std::nullopt;
  std::optional<ValueMeta> meta;
  if (is_data_dependent_call(def, *bound, g)) {
    if (!config().capture_dynamic_output_shape_ops) {
      *reason = def.target +
                " has an output size that depends on its operands' values: not captured "
                "(config capture_dynamic_output_shape_ops is off)";
      return std::nullopt;
    }
    try {
      meta = data_dependent_meta(def, *bound, g, reason);
    } catch (MetaError& e) {
      *reason = def.target + ": " + e.what();
      return std::nullopt;
    }
    if (!meta) return std::nullopt;
    if (!grad_enabled) meta->clear_requires_grad();
    return g.add_call(op, std::move(*bound), std::move(*meta), def.schema.name);
  }
  try {
    static bool version_set = false;  // NB: a flag under the GIL, not a static initializer (src/base/gil_once.h)
    if (!version_set) {
      std::string v = py::str(torch_types().torch.attr("__version__")).cast<std::string>();
      int major = 0, minor = 0;
      if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) == 2) set_torch_version(major, minor);
      set_eager_cpu_fma(probe_eager_cpu_fma());
      version_set = true;
    }
    // The rules promote Python floats and integer math to torch's default dtype.
    auto default_dtype = dtype_from_name(strip_torch(py::str(torch_types().torch.attr("get_default_dtype")()).cast<std::string>()));
    if (default_dtype && is_floating(*default_dtype)) set_default_float_dtype(*default_dtype);
    meta = infer_meta(def, *bound, g);
  } catch (MetaError& e) {
    *reason = def.target + ": " + e.what();
    return std::nullopt;
  }
  if (!meta) {
    if (!config().meta_fallback) {
      *reason = def.target + " has no C++ meta rule for these operands (config.meta_fallback is off)";
      return std::nullopt;
    }
    meta = meta_by_fallback(def, *bound, g, reason);
  } else if (has_overflowing_number(*bound, *meta, g) && !kernel_exists(def, *bound, g, reason)) {
    return std::nullopt;
  }
  if (!meta) return std::nullopt;
  if (!grad_enabled) meta->clear_requires_grad();
  return g.add_call(op, std::move(*bound), std::move(*meta), def.schema.name);
}

CallTyper python_typer() {
  return [](Graph& g, OpId op, const std::vector<Value>& positional,
            const std::vector<std::pair<std::string, Value>>& keywords) -> NodeId {
    std::string reason;
    std::optional<NodeId> n = add_op_call(g, op, positional, keywords, &reason, /*grad_enabled=*/false);
    if (!n) throw Unsupported("a backward call cannot be typed: " + reason);
    return *n;
  };
}

std::optional<NodeId> add_torch_call(Graph& g, PyObject* fn, const std::vector<Value>& args,
                                     const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                     bool grad_enabled) {
  auto op = op_for_callable(fn);
  // NB: a mark on a function the registry takes is no change (as torch's allow_in_graph of an op)
  if (!op && allowed_in_graph(fn)) return add_allowed_call(g, fn, args, kwargs, reason, grad_enabled);
  if (!op) {
    py::handle h(fn);
    std::string name = py::hasattr(h, "__qualname__") ? py::str(h.attr("__qualname__")).cast<std::string>()
                                                      : py::str(py::repr(h)).cast<std::string>();
    std::string why;
    open_ops_for_callable(fn, &why);  // why torch's schemas did not help, where they were asked
    *reason = why.empty() ? name + " is not in framefuse's op registry" : why;
    return std::nullopt;
  }
  std::string why;
  if (op_def(*op).is_open()) return add_open_call(g, open_ops_for_callable(fn, &why), args, kwargs, reason, grad_enabled);
  // NB: a hand-written schema narrower than torch's (squeeze with several dims, Tensor.to with
  // five arguments) falls back to the ops torch's own schemas give the callable.
  if (!bind_call(op_def(*op), args, kwargs, g, &why)) {
    std::string unused;
    const std::vector<OpId>& open = open_ops_for_callable(fn, &unused);
    for (OpId o : open)
      if (bind_call(op_def(o), args, kwargs, g, &unused)) return add_open_call(g, open, args, kwargs, reason, grad_enabled);
    *reason = why;  // the hand-written schema's complaint: torch's do not bind either
    return std::nullopt;
  }
  return add_op_call(g, *op, args, kwargs, reason, grad_enabled);
}

}  // namespace ff
