// Large CPU buffers of compiled graphs (outputs and intermediates of at least kPoolMinBytes) come
// from a pool instead of torch's allocator. Why: glibc serves such sizes with a fresh mmap, and
// first-touch page faults then cost more than the kernel itself (22 ms per 64 MB here, against
// 8 ms for a whole sin kernel). A pooled block comes back with its pages mapped. (New blocks are
// not advised for transparent huge pages: see acquire() in buffer_pool.cpp.)
//
// The tensor is a torch tensor over a `framefuse._C.PoolBlock` (buffer protocol, through
// torch.frombuffer + set_), so it is an ordinary, non-view tensor; when torch frees its storage,
// the block goes back to the pool, which keeps at most config().cpu_buffer_pool_mb megabytes.
// Such a storage cannot grow (resize_ to a larger size, share_memory_); cpu_buffer_pool_mb = 0
// turns the pool off and every tensor comes from torch's allocator again.
#pragma once

#include <Python.h>

#include <cstdint>

namespace ff::inductor {

constexpr int64_t kPoolMinBytes = int64_t{1} << 20;

// Whether the pool is on (config cpu_buffer_pool_mb > 0). Off, every tensor comes from torch's
// allocator (e.g. for callers that grow outputs with resize_ or move them to shared memory, which a
// pooled tensor's fixed-size storage does not allow).
bool buffer_pool_on();

// A new tensor of `dtype` (a torch.dtype) with `sizes`/`strides` (tuples) spanning `bytes` bytes,
// or nullptr with a Python error set. `bytes` must be a multiple of the element size.
PyObject* pooled_empty_strided(PyObject* sizes, PyObject* strides, PyObject* dtype, int64_t bytes);

// The same tensor from the pool where it is on and `bytes` >= kPoolMinBytes, else from
// torch.empty_strided. Needs the GIL.
PyObject* cpu_empty_strided(PyObject* sizes, PyObject* strides, PyObject* dtype, int64_t bytes);

// Bytes held by free blocks (tests).
int64_t buffer_pool_cached_bytes();
// Frees every cached block (framefuse.reset()).
void buffer_pool_clear();

}  // namespace ff::inductor
