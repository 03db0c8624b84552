#include "inductor/python/packed_linear.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>

#include "graph/python/torch_native.h"
#include "inductor/parallel.h"
#include "inductor/python/buffer_pool.h"
#include "inductor/python/tensor_check.h"
#include "src/base/logging.h"
#include "src/base/py_ref.h"

namespace ff::inductor {

namespace {

// MKL's Fortran interface, ILP64 flavour: every argument by address, integers 64-bit, matrices
// column-major. `identifier` says which operand is packed ("A" or "B"), `trans` its layout.
using PackGetSizeFn = size_t (*)(const char* identifier, const int64_t* m, const int64_t* n, const int64_t* k);
using PackFn = void (*)(const char* identifier, const char* trans, const int64_t* m, const int64_t* n,
                        const int64_t* k, const float* alpha, const float* src, const int64_t* ld, float* dest);
using ComputeFn = void (*)(const char* transa, const char* transb, const int64_t* m, const int64_t* n,
                           const int64_t* k, const float* a, const int64_t* lda, const float* b, const int64_t* ldb,
                           const float* beta, float* c, const int64_t* ldc);

// NB: plain statics filled under the GIL, not function-local statics: their initializers run
// Python code, and a second thread blocked on a C++ initialization guard while holding the GIL
// would deadlock against the first.
int g_available = -1;  // -1: not checked yet
PackGetSizeFn g_pack_size = nullptr;
PackFn g_pack = nullptr;
ComputeFn g_compute = nullptr;
PyObject* g_float32 = nullptr;
PyObject* g_uint8 = nullptr;
PyObject* g_empty = nullptr;
PyObject* g_is_grad_enabled = nullptr;
PyObject* g_dtype_kwnames = nullptr;

int find_torch_cpu(dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  const char* base = name ? std::strrchr(name, '/') : nullptr;
  base = base ? base + 1 : name;
  if (!base || std::strncmp(base, "libtorch_cpu.", 13) != 0) return 0;
  *static_cast<std::string*>(out) = name;
  return 1;
}

// The three MKL entry points, from the loaded libtorch_cpu and the libraries it loaded (torch's
// wheels link MKL into it; other builds load libmkl_* next to it).
bool find_mkl() {
  std::string path;
  dl_iterate_phdr(find_torch_cpu, &path);
  if (path.empty()) return false;
  void* lib = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);  // NB: kept: torch stays loaded
  if (!lib) return false;
  g_pack_size = reinterpret_cast<PackGetSizeFn>(dlsym(lib, "SGEMM_PACK_GET_SIZE_64"));
  g_pack = reinterpret_cast<PackFn>(dlsym(lib, "SGEMM_PACK_64"));
  g_compute = reinterpret_cast<ComputeFn>(dlsym(lib, "SGEMM_COMPUTE_64"));
  return g_pack_size && g_pack && g_compute;
}

bool check_available() {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return false;
  PyObject* backends_mkl = PyImport_ImportModule("torch.backends.mkl");
  PyObject* r = backends_mkl ? PyObject_CallMethod(backends_mkl, "is_available", nullptr) : nullptr;
  bool ok = r == Py_True && find_mkl();
  Py_XDECREF(r);
  Py_XDECREF(backends_mkl);
  if (ok) {
    g_float32 = PyObject_GetAttrString(torch, "float32");
    g_uint8 = PyObject_GetAttrString(torch, "uint8");
    g_empty = PyObject_GetAttrString(torch, "empty");
    g_is_grad_enabled = PyObject_GetAttrString(torch, "is_grad_enabled");
    g_dtype_kwnames = Py_BuildValue("(s)", "dtype");
    ok = g_float32 && g_uint8 && g_empty && g_is_grad_enabled && g_dtype_kwnames;
  }
  Py_DECREF(torch);
  PyErr_Clear();  // NB: no MKL (Debian's torch 1.13) is not an error: the ordinary linear runs
  return ok;
}

// Whether `t` is a contiguous float32 CPU tensor of `numel` elements whose last size is `cols`
// (and, with `rows` >= 0, a `rows` × `cols` matrix): 1, 0, or -1 with a Python error set. Where it
// is, *requires_grad is or-ed with the tensor's.
int float_matrix(PyObject* t, int64_t numel, int64_t cols, int64_t rows, bool* requires_grad) {
  constexpr int32_t kFloat = 6, kCpu = 0;  // c10::ScalarType::Float, c10::DeviceType::CPU
  if (const ff_torch_native_api* api = torch_native()) {
    ff_native_tensor_meta m;
    if (api->tensor_meta(t, &m)) {
      if (m.scalar_type != kFloat || m.device_type != kCpu || m.dim < 1 || m.sizes[m.dim - 1] != cols) return 0;
      if (rows >= 0 && (m.dim != 2 || m.sizes[0] != rows)) return 0;
      int64_t expect = 1;
      for (int64_t d = m.dim - 1; d >= 0; --d) {
        if (m.sizes[d] != 1 && m.strides[d] != expect) return 0;
        expect *= m.sizes[d];
      }
      *requires_grad |= m.requires_grad != 0;
      return expect == numel;
    }
  }
  // NB: without framefuse._torch_native, or a tensor it does not read: torch's own getters.
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(t, "dtype"));
  if (!dtype) return -1;
  if (dtype.get() != g_float32) return 0;
  PyRef cpu = PyRef::steal(PyObject_GetAttrString(t, "is_cpu"));
  PyRef contig = PyRef::steal(PyObject_CallMethod(t, "is_contiguous", nullptr));
  PyRef shape = PyRef::steal(PyObject_GetAttrString(t, "shape"));
  PyRef count = PyRef::steal(PyObject_CallMethod(t, "numel", nullptr));
  PyRef grad = PyRef::steal(PyObject_GetAttrString(t, "requires_grad"));
  if (!cpu || !contig || !shape || !count || !grad) return -1;
  Py_ssize_t dim = PyObject_Length(shape.get());
  if (dim < 1 || cpu.get() != Py_True || contig.get() != Py_True || PyLong_AsLongLong(count.get()) != numel) return 0;
  PyRef last = PyRef::steal(PySequence_GetItem(shape.get(), dim - 1));
  if (!last) return -1;
  if (PyLong_AsLongLong(last.get()) != cols) return 0;
  if (rows >= 0) {
    PyRef first = PyRef::steal(PySequence_GetItem(shape.get(), 0));
    if (!first) return -1;
    if (dim != 2 || PyLong_AsLongLong(first.get()) != rows) return 0;
  }
  *requires_grad |= grad.get() == Py_True;
  return 1;
}

// torch.is_grad_enabled(): 1, 0, or -1 with a Python error set.
int grad_enabled() {
  if (const ff_torch_native_api* api = torch_native()) return api->grad_enabled();
  PyObject* g = PyObject_CallNoArgs(g_is_grad_enabled);
  if (!g) return -1;
  int on = g == Py_True;
  Py_DECREF(g);
  return on;
}

// Rows [begin, end) of the output (buffers[0], buffers[2] floats each) set to the bias (buffers[1]).
void fill_bias_rows(void** buffers, int64_t begin, int64_t end) {
  auto* out = static_cast<float*>(buffers[0]);
  const auto* bias = static_cast<const float*>(buffers[1]);
  const int64_t n = *static_cast<const int64_t*>(buffers[2]);
  for (int64_t r = begin; r < end; ++r) std::memcpy(out + r * n, bias, sizeof(float) * static_cast<size_t>(n));
}

// Below this many output elements the bias is copied on the calling thread.
constexpr int64_t kParallelFill = int64_t{1} << 16;

}  // namespace

bool packed_linear_available() {
  if (g_available < 0) g_available = check_available() ? 1 : 0;
  return g_available == 1;
}

PackedLinear::PackedLinear(int64_t rows, int64_t in_features, int64_t out_features, PyObject* sizes,
                           PyObject* strides, int64_t bytes)
    : rows_(rows), k_(in_features), n_(out_features), sizes_(sizes), strides_(strides), bytes_(bytes) {}

PyObject* PackedLinear::call(PyObject* x, PyObject* w, PyObject* bias, int threads) {
  if (disabled_ || !packed_linear_available()) return nullptr;
  PyObject* out = try_call(x, w, bias, threads);
  if (out) ++packed_calls_;
  if (out || !PyErr_Occurred()) return out;
  // NB: the ordinary linear runs instead, and reports the error if it has one too.
  std::string why = "error";
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyObject* str = value ? PyObject_Str(value) : nullptr) {
    if (const char* u = PyUnicode_AsUTF8(str)) why = u;
    Py_DECREF(str);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  disabled_ = true;
  if (log_enabled(LogArtifact::perf_hints))
    log_emit(LogArtifact::perf_hints, "inductor: a linear layer runs without MKL's packed weights from now on: " + why);
  return nullptr;
}

// A packed copy of `w` (a contiguous n × k float32 matrix), as the weight side of x·Wᵀ. New
// reference, or nullptr with a Python error set.
PyObject* PackedLinear::pack(PyObject* w) {
  // Column-major, the product is outᵀ (n × rows) = W (n × k) · xᵀ (k × rows): W is operand A, and
  // the row-major weight read column-major is Wᵀ, so A is packed transposed.
  const char a = 'A', t = 'T';
  const float one = 1.0f;
  size_t size = g_pack_size(&a, &n_, &rows_, &k_);
  PyRef shape = PyRef::steal(Py_BuildValue("(n)", static_cast<Py_ssize_t>(size)));
  if (!shape) return nullptr;
  PyObject* args[2] = {shape.get(), g_uint8};
  PyRef packed = PyRef::steal(PyObject_Vectorcall(g_empty, args, 1, g_dtype_kwnames));
  if (!packed) return nullptr;
  auto* src = static_cast<const float*>(tensor_data_ptr(w));
  auto* dest = static_cast<float*>(tensor_data_ptr(packed.get()));
  if (PyErr_Occurred()) return nullptr;
  Py_BEGIN_ALLOW_THREADS
      g_pack(&a, &t, &n_, &rows_, &k_, &one, src, &k_, dest);
  Py_END_ALLOW_THREADS return packed.release();
}

PyObject* PackedLinear::try_call(PyObject* x, PyObject* w, PyObject* bias, int threads) {
  // Each operand's layout, and whether autograd would record the product (MKL's has no derivative).
  bool requires_grad = false;
  int fits = float_matrix(x, rows_ * k_, k_, -1, &requires_grad);
  if (fits == 1) fits = float_matrix(w, n_ * k_, k_, n_, &requires_grad);
  if (fits == 1 && bias != Py_None) fits = float_matrix(bias, n_, n_, -1, &requires_grad);
  if (fits == 1 && requires_grad) fits = grad_enabled() == 0;  // on, or an error (set): not this path
  if (fits != 1) return nullptr;  // (an error, if any, stays set for the caller)
  TensorStamp stamp;
  if (!tensor_stamp(w, &stamp)) return nullptr;
  // NB: `packed` is this call's own reference: the GIL is released while packing and multiplying,
  // and another thread may meanwhile bring another weight through this layer.
  PyRef packed = PyRef::steal(packed_.get(w, stamp));
  if (!packed) {
    if (!seen_.made_from(w, stamp)) {
      // A new or changed weight (or one without a version counter, which could change unseen):
      // remembered, and packed if the next call brings it unchanged.
      seen_.set(w, stamp, nullptr);
      return nullptr;
    }
    packed = PyRef::steal(pack(w));
    if (!packed) return nullptr;
    packed_.set(w, stamp, packed.get());
  }
  PyRef out = PyRef::steal(cpu_empty_strided(sizes_, strides_, g_float32, bytes_));
  if (!out) return nullptr;
  auto* a = static_cast<const float*>(tensor_data_ptr(packed.get()));
  auto* b = static_cast<const float*>(tensor_data_ptr(x));
  auto* c = static_cast<float*>(tensor_data_ptr(out.get()));
  void* bias_data = bias == Py_None ? nullptr : tensor_data_ptr(bias);
  if (PyErr_Occurred()) return nullptr;
  // As torch's _mkl_linear: the bias in every row of the output first, the product added to it.
  const float beta = bias_data ? 1.0f : 0.0f;
  const char pa = 'P', nb = 'N';
  Py_BEGIN_ALLOW_THREADS if (bias_data) {
    void* fill[3] = {c, bias_data, &n_};
    if (threads > 1 && rows_ * n_ >= kParallelFill)
      parallel_run(fill_bias_rows, fill, rows_, threads);
    else
      fill_bias_rows(fill, 0, rows_);
  }
  g_compute(&pa, &nb, &n_, &rows_, &k_, a, &k_, b, &k_, &beta, c, &n_);
  Py_END_ALLOW_THREADS return out.release();
}

}  // namespace ff::inductor
