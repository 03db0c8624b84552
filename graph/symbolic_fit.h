// Dynamic shapes for ops typed by running torch (the meta-tensor fallback, which needs concrete
// sizes): the op is run at a few bindings of the symbols, and each size or stride of its result is
// fitted to an expression over the sizes its operands carry. An expression that reproduces the
// result at every probe is taken as the result's size; where none does, the caller specialises.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/symint.h"

namespace ff {

// An expression over `candidates` (and integer constants) equal to values[k] under bindings[k]
// for every probe k: a constant, a candidate, a candidate plus or times a constant, the sum or the
// product of two candidates. bindings[0] must be the traced values (the result's hint is
// values[0]). Candidates equal at every probe are one. Nullopt where none fits.
std::optional<SymInt> fit_symint(const std::vector<int64_t>& values, const std::vector<std::vector<int64_t>>& bindings,
                                 const std::vector<SymInt>& candidates);

}  // namespace ff
