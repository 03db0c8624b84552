// Dynamic shapes at run time, shared by the CPU and CUDA runtimes: a program compiled with
// symbolic sizes runs each call at the symbols' values read from the inputs' sizes (a binding),
// through an instance specialised to them and kept for the next call with the same sizes.
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace ff::inductor {

// Small per-run arrays on the stack; the heap only for large graphs.
template <typename T, size_t N>
struct RunArray {
  T inline_[N];
  std::vector<T> heap_;
  T* data;
  explicit RunArray(size_t n) : data(inline_) {
    if (n > N) {
      heap_.resize(n);
      data = heap_.data();
    }
    for (size_t i = 0; i < n; ++i) data[i] = T();
  }
  T& operator[](size_t i) { return data[i]; }
};

// Where each symbol's value is read: (input position, dimension), dimension -1 for an input that is
// a Python int; input -1 for a symbol the trace specialised (no kernel reads it: its value is 0).
using SymbolSources = std::vector<std::pair<int, int>>;

// The symbols' values in the traced call (the graph's hints).
std::vector<int64_t> traced_bindings(const Graph& g, const SymbolSources& at);

// Reads the symbols' values from `inputs` (borrowed) into out[0 .. at.size()): through
// framefuse._torch_native where loaded, else the `shape` attribute. False where an input is
// missing or has too few dimensions, or a value is below 2 (the program was compiled for sizes of
// at least 2); no Python error is left set.
bool read_bindings(const SymbolSources& at, PyObject* const* inputs, size_t n, int64_t* out);

// "s0=8, s1=64" (logs).
std::string bindings_str(const std::vector<int64_t>& bindings);

// Instances by binding, the most recently used last, at most `kMax` (the oldest goes). Callers
// hold the instance they run (shared_ptr): another thread may evict it meanwhile.
template <class T>
class InstanceCache {
 public:
  static constexpr size_t kMax = 64;
  std::shared_ptr<T> find(const int64_t* values, size_t n) {
    for (size_t k = entries_.size(); k-- > 0;) {
      if (!std::equal(entries_[k].first.begin(), entries_[k].first.end(), values, values + n)) continue;
      std::rotate(entries_.begin() + static_cast<std::ptrdiff_t>(k), entries_.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                  entries_.end());
      return entries_.back().second;
    }
    return nullptr;
  }
  void add(std::vector<int64_t> bindings, std::shared_ptr<T> inst) {
    if (entries_.size() >= kMax) entries_.erase(entries_.begin());
    entries_.emplace_back(std::move(bindings), std::move(inst));
  }
  size_t size() const { return entries_.size(); }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& e : entries_) f(*e.second);
  }

 private:
  std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<T>>> entries_;
};

}  // namespace ff::inductor
