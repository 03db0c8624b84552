// The conv weights a channels-last graph (graph/passes/channels_last.h) takes in NHWC: each is copied
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

// A tensor made from another one (a layout copy, a packed weight), kept while the caller brings the
// same source object with the same stamp. Every field is replaced before the old references are
// released: releasing a tensor may let another thread run (torch releases the GIL), and that thread
// must never find a value next to another source's object or stamp. Needs the GIL.
class DerivedTensor {
 public:
  DerivedTensor() = default;
  DerivedTensor(DerivedTensor&& o) noexcept;
  DerivedTensor& operator=(DerivedTensor&&) = delete;
  DerivedTensor(const DerivedTensor&) = delete;
  DerivedTensor& operator=(const DerivedTensor&) = delete;
  ~DerivedTensor();

  // Whether the last set() was for `src` with `stamp` (never for a stamp that is not reusable).
  bool made_from(PyObject* src, const TensorStamp& stamp) const {
    return src_ == src && stamp.reusable() && stamp_ == stamp;
  }
  // A new reference to the value made from `src` with `stamp`, or null (no error set).
  PyObject* get(PyObject* src, const TensorStamp& stamp) const;
  // Keeps `value` (borrowed; may be null: only the source is remembered) as made from `src`.
  void set(PyObject* src, const TensorStamp& stamp, PyObject* value);
  void clear() { set(nullptr, TensorStamp{}, nullptr); }

 private:
  PyObject* src_ = nullptr;    // strong
  TensorStamp stamp_;
  PyObject* value_ = nullptr;  // strong
};

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
    DerivedTensor copy;  // the converted copy and the tensor it was made from
  };
  PyObject* convert_one(Input& in, PyObject* t);  // new reference

  std::vector<Input> inputs_;
};

}  // namespace ff::inductor
