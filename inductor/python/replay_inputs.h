// The inputs a CUDA graph was recorded with (mode="reduce-overhead", framefuse.cuda.CudaGraphReplay),
// checked before every replay: the inputs read in place (parameters) must be the very objects
// recorded, at the same addresses; the tensors copied into static buffers must have the recorded
// dtype, sizes, strides and device; other values must compare equal. One C++ call instead of a
// Python loop over every input, which for resnet18's ~100 inputs was about a quarter of a replay's
// host time.
#pragma once

#include <Python.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "inductor/python/tensor_check.h"

namespace ff::inductor {

class ReplayInputs {
 public:
  // `inputs` (borrowed) as recorded; fixed[i]: input i is read in place. Needs the GIL.
  ReplayInputs(const std::vector<PyObject*>& inputs, const std::vector<bool>& fixed);
  ReplayInputs(const ReplayInputs&) = delete;
  ReplayInputs& operator=(const ReplayInputs&) = delete;
  ~ReplayInputs();

  // 1 if `inputs` (borrowed, n of them) fit the recording, 0 if not, -1 with a Python error set.
  // Needs the GIL; one thread at a time (the replay's lock).
  int matches(PyObject* const* inputs, size_t n);

 private:
  struct Fixed {
    size_t index;
    PyObject* tensor;  // strong
    void* data;
  };
  // The copied tensors on one device (a LayoutCheck checks one device).
  struct Device {
    PyObject* device;             // strong
    std::unique_ptr<LayoutCheck> layouts;
    std::vector<size_t> indices;  // of the inputs it checks
    std::vector<PyObject*> scratch;  // those inputs in one call
  };
  size_t n_ = 0;
  std::vector<Fixed> fixed_;
  std::vector<std::pair<size_t, PyObject*>> values_;  // index, recorded value (strong)
  std::vector<PyObject*> owned_;                       // dtypes, sizes and strides the checks borrow
  std::vector<Device> devices_;
};

}  // namespace ff::inductor
