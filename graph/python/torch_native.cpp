#include "graph/python/torch_native.h"

#include <cstring>
#include <sstream>

#include "src/base/config.h"
#include "src/base/logging.h"

namespace ff {

namespace {

struct Loaded {
  const ff_torch_native_api* api = nullptr;
  std::string status;
};

Loaded load() {
  Loaded r;
  PyObject* module = PyImport_ImportModule("framefuse._torch_native");
  if (!module) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject* text = value ? PyObject_Str(value) : nullptr;
    const char* s = text ? PyUnicode_AsUTF8(text) : nullptr;
    r.status = std::string("not importable: ") + (s ? s : "unknown error");
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return r;
  }
  PyObject* capsule = PyObject_GetAttrString(module, "_API");
  auto* api = capsule ? static_cast<const ff_torch_native_api*>(PyCapsule_GetPointer(capsule, FF_TORCH_NATIVE_CAPSULE))
                      : nullptr;
  PyErr_Clear();
  Py_XDECREF(capsule);
  Py_DECREF(module);
  if (!api || api->abi != FF_TORCH_NATIVE_ABI || api->size < sizeof(ff_torch_native_api)) {
    r.status = "built from another framefuse version (interface mismatch): rebuild framefuse";
    return r;
  }
  r.api = api;
  r.status = "loaded";
  return r;
}

// NB: not a function-local static initialised by load(): the import runs Python code, which may
// hand the GIL to another thread (see tensor_guards_type()).
const Loaded& loaded() {
  static bool done = false;
  static Loaded* l = new Loaded{nullptr, "loading"};  // NB: leaked: read during shutdown
  if (!done) {
    done = true;
    *l = load();
    if (!l->api && log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, "framefuse._torch_native " + l->status +
                                            "; guards and input checks use torch's Python-visible API (slower cached calls)");
  }
  return *l;
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + (v.size() == 1 ? ",)" : ")");
}

}  // namespace

const ff_torch_native_api* torch_native() { return config().torch_native ? loaded().api : nullptr; }

std::string torch_native_status() {
  if (!config().torch_native) return "switched off (config torch_native)";
  return loaded().status;
}

NativeTensorMatch::~NativeTensorMatch() {
  if (Py_IsInitialized()) Py_XDECREF(reinterpret_cast<PyObject*>(type_));
}

bool NativeTensorMatch::record(PyObject* tensor) {
  const ff_torch_native_api* api = torch_native();
  ff_native_tensor_meta m;
  if (!api || !api->tensor_meta(tensor, &m)) return false;
  api_ = api;
  Py_XDECREF(reinterpret_cast<PyObject*>(type_));
  type_ = Py_TYPE(tensor);
  Py_INCREF(reinterpret_cast<PyObject*>(type_));
  keys_ = m.keys;
  scalar_type_ = m.scalar_type;
  device_type_ = m.device_type;
  device_index_ = m.device_index;
  requires_grad_ = m.requires_grad;
  sizes_.assign(m.sizes, m.sizes + m.dim);
  strides_.assign(m.strides, m.strides + m.dim);
  return true;
}

bool NativeTensorMatch::matches(PyObject* tensor) const {
  ff_native_tensor_meta m;
  if (Py_TYPE(tensor) != type_ || !api_->tensor_meta(tensor, &m)) return false;
  size_t dim = sizes_.size();
  if (m.keys != keys_ || m.scalar_type != scalar_type_ || m.device_type != device_type_ ||
      m.device_index != device_index_ || m.requires_grad != requires_grad_ || m.dim != static_cast<int64_t>(dim))
    return false;
  // NB: a loop, not memcmp: ranks are small and a library call costs more than the compares.
  for (size_t i = 0; i < dim; ++i)
    if (m.sizes[i] != sizes_[i] || m.strides[i] != strides_[i]) return false;
  return true;
}

std::string NativeTensorMatch::mismatch(PyObject* tensor) const {
  if (matches(tensor)) return "";
  std::ostringstream os;
  ff_native_tensor_meta m;
  if (Py_TYPE(tensor) != type_) {
    os << "type " << Py_TYPE(tensor)->tp_name << " (expected " << type_->tp_name << ")";
  } else if (!api_->tensor_meta(tensor, &m)) {
    os << "a kind of tensor the native check does not read (subclass dispatch, nested, sparse, ...)";
  } else if (m.scalar_type != scalar_type_) {
    os << "dtype: c10::ScalarType " << m.scalar_type << " (expected " << scalar_type_ << ")";
  } else if (m.device_type != device_type_ || m.device_index != device_index_) {
    os << "device: c10::DeviceType " << m.device_type << " index " << m.device_index << " (expected "
       << device_type_ << " index " << device_index_ << ")";
  } else if (m.requires_grad != requires_grad_) {
    os << "requires_grad " << (m.requires_grad ? "True" : "False") << " (expected "
       << (requires_grad_ ? "True" : "False") << ")";
  } else if (m.dim != static_cast<int64_t>(sizes_.size()) ||
             std::memcmp(m.sizes, sizes_.data(), sizes_.size() * sizeof(int64_t)) != 0 ||
             std::memcmp(m.strides, strides_.data(), strides_.size() * sizeof(int64_t)) != 0) {
    std::vector<int64_t> sizes(m.sizes, m.sizes + m.dim), strides(m.strides, m.strides + m.dim);
    bool size_differs = sizes != sizes_;
    os << (size_differs ? "sizes " : "strides ") << ints_text(size_differs ? sizes : strides) << " (expected "
       << ints_text(size_differs ? sizes_ : strides_) << ")";
  } else {
    os << "dispatch keys differ: 0x" << std::hex << m.keys << " (expected 0x" << keys_ << std::dec
       << "; an inference tensor, a negative or conjugate view, or a thread-local dispatch mode "
          "entered or left)";
  }
  return os.str();
}

}  // namespace ff
