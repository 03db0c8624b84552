// Graph inputs that a compiled program writes in place (loop::Buffer::mutated, made by
// Lowerer::write_input): the per-call checks and the version bump that the CPU and CUDA runtimes
// share. Kernels store into the caller's tensor, so before they run the written inputs must share
// no byte with another tensor input (the kernels assume they do not) and must not be inference
// tensors (eager refuses to write those outside inference mode, and has no version to bump).
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

class InputWrites {
 public:
  InputWrites() = default;
  InputWrites(const InputWrites&) = delete;
  InputWrites& operator=(const InputWrites&) = delete;
  ~InputWrites();

  // Reads which inputs `p` writes (needs the GIL). Throws Unsupported when it writes one and this
  // torch cannot bump a tensor's version (before 2.1): autograd could not tell the tensor changed.
  void prepare(const loop::Program& p);
  bool empty() const { return written_.empty(); }

  // The data pointers of the caller's tensor inputs into ptrs[position]: `inputs` (borrowed) and
  // ptrs are indexed by placeholder position, the first n being the caller's own (inputs a runtime
  // derives and appends, such as folded weights, are fresh tensors and never written). The caller
  // reuses them for its kernels. False with a Python error set.
  bool pointers(PyObject* const* inputs, size_t n, void** ptrs) const;
  // With those pointers, before the kernels run: 1 when the kernels may write, 0 when a written
  // input is an inference tensor or shares a byte with another tensor input (the caller runs the
  // graph some other way), -1 with a Python error set.
  int writable(PyObject* const* inputs, size_t n, void* const* ptrs) const;
  // Bumps the written inputs' version counters. NB: before the kernels: a packed linear of the
  // same weight later in the graph must see a new version. False with a Python error set.
  bool bump(PyObject* const* inputs) const;

 private:
  struct Tensor {
    size_t pos;     // placeholder position
    int64_t bytes;  // what its layout spans
    bool written;
  };
  std::vector<Tensor> tensors_;            // every tensor input
  std::vector<size_t> written_;            // placeholder positions of the written ones
  PyObject* increment_version_ = nullptr;  // torch.autograd.graph.increment_version (strong)
  PyObject* is_inference_ = nullptr;       // "is_inference" (strong)
};

}  // namespace ff::inductor
