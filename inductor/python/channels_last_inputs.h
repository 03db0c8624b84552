// The conv weights a channels-last graph (inductor/channels_last.h) takes in NHWC: each is copied
// into the compiled layout once and reused while the caller passes the same tensor, unchanged.
//
// "Unchanged" is the tensor object, its data pointer and its version counter (bumped by every
// in-place write: optimizer steps, load_state_dict, `with no_grad(): w.mul_(2)`). The source is
// held, so its address is never another tensor's while it is remembered. Tensors without a
// version counter (made under torch.inference_mode) are converted on every call.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace ff::inductor {

// What a tensor-derived cache depends on: the data pointer and version counter of the tensor.
// version -1: the tensor has none (made under torch.inference_mode), so nothing derived from it may
// be reused. False with a Python error set on failure.
struct TensorStamp {
  void* ptr = nullptr;
  int64_t version = -1;
  bool reusable() const { return version >= 0; }
  bool operator==(const TensorStamp&) const = default;
};
bool tensor_stamp(PyObject* t, TensorStamp* out);

class ChannelsLastInputs {
 public:
  ChannelsLastInputs() = default;
  ChannelsLastInputs(const ChannelsLastInputs&) = delete;
  ChannelsLastInputs& operator=(const ChannelsLastInputs&) = delete;
  ~ChannelsLastInputs();

  // Input `index` (placeholder order) is passed as a copy with `sizes`/`strides` (borrowed sequences
  // that must outlive this), on the tensor's own device and dtype.
  void add(size_t index, PyObject* sizes, PyObject* strides);
  bool empty() const { return inputs_.empty(); }
  size_t size() const { return inputs_.size(); }
  size_t index(size_t k) const { return inputs_[k].index; }

  // Replaces inputs[index] (borrowed) by its converted copy; owned[k] (size() entries, null on
  // entry) receives a new reference to the k-th copy, which the caller drops after the run (another
  // thread may convert again meanwhile). False with a Python error set on failure.
  bool convert(PyObject** inputs, PyObject** owned);

 private:
  struct Input {
    size_t index = 0;
    PyObject* sizes = nullptr;
    PyObject* strides = nullptr;
    PyObject* src = nullptr;        // strong: the tensor last converted
    TensorStamp stamp;              // src's when it was converted
    PyObject* converted = nullptr;  // strong
  };
  PyObject* convert_one(Input& in, PyObject* t);  // new reference

  std::vector<Input> inputs_;
};

}  // namespace ff::inductor
