#include "inductor/python/size_bindings.h"

#include "graph/python/torch_native.h"
#include "src/base/py_ref.h"

namespace ff::inductor {

std::vector<int64_t> traced_bindings(const Graph& g, const SymbolSources& at) {
  std::vector<int64_t> traced(at.size(), 0);
  std::vector<NodeId> inputs = g.placeholders();
  for (size_t s = 0; s < at.size(); ++s)
    if (at[s].first >= 0) {
      const ValueMeta& m = g.node(inputs[static_cast<size_t>(at[s].first)]).meta;
      traced[s] = at[s].second < 0 ? m.hint : m.tensor.sizes[static_cast<size_t>(at[s].second)].hint();
    }
  return traced;
}

std::string bindings_str(const std::vector<int64_t>& bindings) {
  std::string out;
  for (size_t s = 0; s < bindings.size(); ++s) out += (s ? ", s" : "s") + std::to_string(s) + "=" + std::to_string(bindings[s]);
  return out;
}

bool read_bindings(const SymbolSources& at, PyObject* const* inputs, size_t n, int64_t* out) {
  const ff_torch_native_api* native = torch_native();
  for (size_t s = 0; s < at.size(); ++s) {
    auto [i, d] = at[s];
    if (i < 0) {
      out[s] = 0;
      continue;
    }
    if (static_cast<size_t>(i) >= n) return false;
    if (d < 0) {  // a Python int that varies
      int overflow = 0;
      out[s] = PyLong_AsLongLongAndOverflow(inputs[i], &overflow);
      if (out[s] == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      if (overflow || out[s] < 2) return false;
      continue;
    }
    // NB: the sizes straight from the tensor where framefuse._torch_native is loaded (no torch.Size).
    if (native) {
      ff_native_tensor_meta m;
      if (native->tensor_meta(inputs[i], &m) && m.dim > d) {
        out[s] = m.sizes[d];
        if (out[s] < 2) return false;
        continue;
      }
    }
    PyRef shape = PyRef::steal(PyObject_GetAttrString(inputs[i], "shape"));
    if (!shape || !PyTuple_Check(shape.get()) || PyTuple_GET_SIZE(shape.get()) <= d) {
      PyErr_Clear();
      return false;
    }
    out[s] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), d));
    if (out[s] == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    if (out[s] < 2) return false;
  }
  return true;
}

}  // namespace ff::inductor
