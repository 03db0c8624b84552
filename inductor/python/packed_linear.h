// Linear layers through MKL's packed GEMM (config cpu_pack_linear_weights): the weight is copied
// once into the blocked layout MKL's sgemm would otherwise build on every call, and each call
// multiplies into an output the compiled graph allocates (from its buffer pool when large).
// nanoGPT-sized products (256 rows, K 768..3072) run 1.1-1.25x faster packed on this project's CPU
// machine.
//
// Both steps call MKL itself: sgemm_pack and sgemm_compute, its Fortran interface with 64-bit
// integers, looked up in the torch library that carries MKL (and what that library loaded). They
// are the calls behind torch.ops.mkl._mkl_reorder_linear_weight / _mkl_linear (the bias copied
// into the output, then C += x·Wᵀ), with the same results bit for bit. _mkl_linear takes its result
// from torch's allocator, though: nanoGPT's 256×50304 logits are 51 MB of freshly mapped pages on
// every call, whose first-touch faults cost ~15% of that product
// (benchmarks/results/cpu-packed-linear-pool.md).
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

// Whether MKL's packed GEMM can be called in this process (checked once, under the GIL).
bool packed_linear_available();

class PackedLinear {
 public:
  // A product of `rows` rows of `in_features` values with an `out_features` × `in_features`
  // weight, as the graph was compiled for. Its result is a float32 tensor with `sizes`/`strides`
  // (contiguous; tuples, borrowed: they must outlive this) spanning `bytes`.
  PackedLinear(int64_t rows, int64_t in_features, int64_t out_features, PyObject* sizes, PyObject* strides,
               int64_t bytes);
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;
  ~PackedLinear() = default;

  // linear(x, w, bias) (borrowed; bias may be None), the bias copied into the output on up to
  // `threads` threads. New reference, or nullptr (never with an error set) where this path does not
  // apply this call: the caller runs the ordinary linear. A failure (out of memory, say) turns this
  // path off for good (one perf_hints line).
  PyObject* call(PyObject* x, PyObject* w, PyObject* bias, int threads);
  // Calls served by the packed product so far.
  int64_t packed_calls() const { return packed_calls_; }

 private:
  PyObject* try_call(PyObject* x, PyObject* w, PyObject* bias, int threads);
  PyObject* pack(PyObject* w);

  int64_t rows_, k_, n_;
  PyObject* sizes_;    // borrowed
  PyObject* strides_;  // borrowed
  int64_t bytes_;
  bool disabled_ = false;
  int64_t packed_calls_ = 0;
  DerivedTensor seen_;    // the weight of the last call that did not run packed (no value)
  DerivedTensor packed_;  // the packed copy (a uint8 tensor) and the weight it was made from
};

}  // namespace ff::inductor
