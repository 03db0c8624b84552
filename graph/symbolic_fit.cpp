#include "graph/symbolic_fit.h"

#include <algorithm>

namespace ff {

std::optional<SymInt> fit_symint(const std::vector<int64_t>& values, const std::vector<std::vector<int64_t>>& bindings,
                                 const std::vector<SymInt>& candidates) {
  const size_t probes = values.size();
  if (probes == 0 || bindings.size() != probes) return std::nullopt;
  if (std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; })) return SymInt(values[0]);
  // Each candidate's values at the probes; candidates that agree everywhere are one.
  std::vector<SymInt> cs;
  std::vector<std::vector<int64_t>> vals;
  for (const SymInt& c : candidates) {
    if (!c.is_symbolic()) continue;
    std::vector<int64_t> v(probes);
    for (size_t k = 0; k < probes; ++k) v[k] = sym_specialize(c, bindings[k]).hint();
    if (std::find(vals.begin(), vals.end(), v) != vals.end()) continue;
    cs.push_back(c);
    vals.push_back(std::move(v));
  }
  auto fits = [&](auto&& f) {
    for (size_t k = 0; k < probes; ++k)
      if (f(k) != values[k]) return false;
    return true;
  };
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::vector<int64_t>& v = vals[i];
    if (fits([&](size_t k) { return v[k]; })) return cs[i];
    int64_t add = values[0] - v[0];
    if (fits([&](size_t k) { return v[k] + add; })) return cs[i] + add;
    if (v[0] != 0 && values[0] % v[0] == 0) {
      int64_t mul = values[0] / v[0];
      if (fits([&](size_t k) { return v[k] * mul; })) return cs[i] * mul;
    }
  }
  for (size_t i = 0; i < cs.size(); ++i)
    for (size_t j = i; j < cs.size(); ++j) {
      const std::vector<int64_t>&a = vals[i], &b = vals[j];
      if (fits([&](size_t k) { return a[k] + b[k]; })) return cs[i] + cs[j];
      if (fits([&](size_t k) { return a[k] * b[k]; })) return cs[i] * cs[j];
    }
  return std::nullopt;
}

}  // namespace ff
