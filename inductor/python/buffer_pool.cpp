#include "inductor/python/buffer_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "src/base/config.h"
#include "src/base/gil_once.h"

namespace ff::inductor {

namespace {

// Capacities are rounded to 2 MB, so a block serves any request of its size class.
constexpr size_t kBlockAlign = size_t{2} << 20;

struct Pool {
  std::mutex mu;
  std::multimap<size_t, void*> free;  // capacity -> block
  int64_t cached = 0;
};
Pool& pool() {
  static auto* p = new Pool;  // NB: leaked: blocks may come back during interpreter shutdown
  return *p;
}

size_t round_capacity(size_t bytes) { return (bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign; }

void* acquire(size_t cap) {
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.free.find(cap);
    if (it != p.free.end()) {
      void* ptr = it->second;
      p.free.erase(it);
      p.cached -= static_cast<int64_t>(cap);
      return ptr;
    }
  }
  // NB: no MADV_HUGEPAGE: where the kernel's THP setting is `madvise`, first touch of an advised
  // block was 6x slower here (64 MB: ~230 ms against ~37 ms), which a process's first calls pay,
  // and steady calls (blocks reused, already mapped) showed no difference.
  return std::aligned_alloc(kBlockAlign, cap);
}

void release(void* ptr, size_t cap) {
  Pool& p = pool();
  int64_t limit = config().cpu_buffer_pool_mb * (int64_t{1} << 20);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.cached + static_cast<int64_t>(cap) <= limit) {
      p.free.emplace(cap, ptr);
      p.cached += static_cast<int64_t>(cap);
      return;
    }
  }
  std::free(ptr);
}

struct Block {
  PyObject_HEAD void* ptr;
  size_t cap;
  Py_ssize_t len;
};

int block_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  auto* b = reinterpret_cast<Block*>(self);
  return PyBuffer_FillInfo(view, self, b->ptr, b->len, /*readonly=*/0, flags);
}

void block_dealloc(PyObject* self) {
  auto* b = reinterpret_cast<Block*>(self);
  if (b->ptr) release(b->ptr, b->cap);
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

PyTypeObject* block_type() {
  static PyTypeObject* t = nullptr;
  return gil_once(t, [] {
    static PyType_Slot slots[] = {
        {Py_bf_getbuffer, reinterpret_cast<void*>(block_getbuffer)},
        {Py_tp_dealloc, reinterpret_cast<void*>(block_dealloc)},
        {0, nullptr},
    };
    static PyType_Spec spec = {"framefuse._C.PoolBlock", sizeof(Block), 0, Py_TPFLAGS_DEFAULT, slots};
    return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  });
}

struct TorchFns {
  PyObject* frombuffer = nullptr;
  PyObject* empty = nullptr;
  PyObject* empty_strided = nullptr;
  PyObject* dtype_kwnames = nullptr;  // ("dtype",)
  bool untyped = false;  // Tensor.untyped_storage exists (torch >= 2.0)
};
const TorchFns* torch_fns() {
  static TorchFns* fns = nullptr;
  return gil_once(fns, []() -> TorchFns* {
    PyObject* torch = PyImport_ImportModule("torch");
    if (!torch) return nullptr;
    auto* r = new TorchFns;
    r->frombuffer = PyObject_GetAttrString(torch, "frombuffer");
    r->empty = PyObject_GetAttrString(torch, "empty");
    r->empty_strided = PyObject_GetAttrString(torch, "empty_strided");
    r->dtype_kwnames = Py_BuildValue("(s)", "dtype");
    PyObject* tensor = PyObject_GetAttrString(torch, "Tensor");
    r->untyped = tensor && PyObject_HasAttrString(tensor, "untyped_storage");
    Py_XDECREF(tensor);
    Py_DECREF(torch);
    if (!r->frombuffer || !r->empty || !r->empty_strided || !r->dtype_kwnames) return nullptr;
    return r;
  });
}

}  // namespace

bool buffer_pool_on() { return config().cpu_buffer_pool_mb > 0; }

PyObject* cpu_empty_strided(PyObject* sizes, PyObject* strides, PyObject* dtype, int64_t bytes) {
  if (buffer_pool_on() && bytes >= kPoolMinBytes) return pooled_empty_strided(sizes, strides, dtype, bytes);
  const TorchFns* fns = torch_fns();
  if (!fns) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "framefuse: cannot find torch.empty_strided");
    return nullptr;
  }
  PyObject* args[3] = {sizes, strides, dtype};
  return PyObject_Vectorcall(fns->empty_strided, args, 2, fns->dtype_kwnames);
}

PyObject* pooled_empty_strided(PyObject* sizes, PyObject* strides, PyObject* dtype, int64_t bytes) {
  const TorchFns* fns = torch_fns();
  PyTypeObject* tp = block_type();
  if (!fns || !tp) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "framefuse: cannot set up the buffer pool");
    return nullptr;
  }
  size_t cap = round_capacity(static_cast<size_t>(bytes));
  void* ptr = acquire(cap);
  if (!ptr) return PyErr_NoMemory();
  auto* b = PyObject_New(Block, tp);
  if (!b) {
    release(ptr, cap);
    return nullptr;
  }
  b->ptr = ptr;
  b->cap = cap;
  b->len = static_cast<Py_ssize_t>(bytes);
  PyObject* block = reinterpret_cast<PyObject*>(b);
  // torch.frombuffer(block, dtype=dtype) owns a buffer view of the block (released with its storage).
  PyObject* args = PyTuple_Pack(1, block);
  PyObject* kw = PyDict_New();
  PyObject* flat = nullptr;
  if (args && kw && PyDict_SetItemString(kw, "dtype", dtype) == 0) flat = PyObject_Call(fns->frombuffer, args, kw);
  Py_XDECREF(args);
  Py_DECREF(block);
  if (!flat) {
    Py_XDECREF(kw);
    return nullptr;
  }
  PyObject* storage = PyObject_CallMethod(flat, fns->untyped ? "untyped_storage" : "storage", nullptr);
  Py_DECREF(flat);
  if (!storage) {
    Py_DECREF(kw);
    return nullptr;
  }
  PyObject* zero = Py_BuildValue("(i)", 0);
  PyObject* out = zero ? PyObject_Call(fns->empty, zero, kw) : nullptr;
  Py_XDECREF(zero);
  Py_DECREF(kw);
  if (out) {
    PyObject* set = PyObject_CallMethod(out, "set_", "OiOO", storage, 0, sizes, strides);
    if (!set) Py_CLEAR(out);
    Py_XDECREF(set);
  }
  Py_DECREF(storage);
  return out;
}

int64_t buffer_pool_cached_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.cached;
}

void buffer_pool_clear() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  for (auto& [cap, ptr] : p.free) std::free(ptr);
  p.free.clear();
  p.cached = 0;
}

}  // namespace ff::inductor
