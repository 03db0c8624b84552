// Linear layers through MKL's packed GEMM (config cpu_pack_linear_weights): the weight is copied
// once into the blocked layout MKL's sgemm would otherwise build on every call
// (torch.ops.mkl._mkl_reorder_linear_weight) and the product runs with torch.ops.mkl._mkl_linear.
// nanoGPT-sized products (256 rows, K 768..3072) run 1.1-1.25x faster that way on this
// project's CPU machine.
//
// Only float32 weights that are graph inputs, 2-d and contiguous, and only once the same weight
// (object, data pointer, version counter: TensorStamp) has been seen on two calls in a row: a weight
// that changes every call would be packed every call, which costs more than it saves. The packed
// copy is dropped and rebuilt when the weight changes (optimizer step, load_state_dict).
#pragma once

#include <Python.h>

#include <cstdint>

#include "inductor/python/channels_last_inputs.h"

namespace ff::inductor {

// Whether this torch has the packed linear ops and MKL (checked once, under the GIL).
bool packed_linear_available();

class PackedLinear {
 public:
  // A product of `rows` rows (input elements / in_features, as the graph was compiled for) with
  // `out_sizes` (a tuple, borrowed: it must outlive this) as its result's sizes. Needs the GIL.
  PackedLinear(int64_t rows, int64_t in_features, PyObject* out_sizes);
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;
  ~PackedLinear();

  // linear(x, w, bias) (borrowed; bias may be None). New reference, or nullptr (never with an error
  // set) where this path does not apply this call: the caller runs the ordinary linear. A failing
  // MKL call turns this path off for good (one perf_hints line).
  PyObject* call(PyObject* x, PyObject* w, PyObject* bias);
  // Calls served by the packed product so far.
  int64_t packed_calls() const { return packed_calls_; }

 private:
  PyObject* try_call(PyObject* x, PyObject* w, PyObject* bias);

  PyObject* rows_ = nullptr;      // strong: the row count, as _mkl_linear takes it
  PyObject* in_shape_ = nullptr;  // strong: (rows, in_features), the input as a matrix
  PyObject* out_sizes_;           // borrowed
  bool disabled_ = false;
  int64_t packed_calls_ = 0;
  DerivedTensor seen_;    // the weight of the last call that did not run packed (no value)
  DerivedTensor packed_;  // the packed copy and the weight it was made from
};

}  // namespace ff::inductor
