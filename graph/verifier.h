// The graph verifier: the invariants every Graph holds between passes, as named predicates.
//
// Tests and debug runs verify after every pass (graph/pipeline.h, config `verify_graphs`); a
// violation is a framefuse bug, reported with the graph's text form.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace ff {

// X(name, the invariant)
// clang-format off
#define FF_GRAPH_INVARIANTS(X)                                                                          \
  X(placeholders_first, "every Placeholder precedes every other node")                                  \
  X(one_output_last, "there is exactly one Output node, it is the last node and holds one Value")       \
  X(operands_defined_before_use, "every node an operand names exists, precedes its user and is not the Output") \
  X(call_matches_schema,                                                                                \
    "a Call names a registered op and holds one argument per schema parameter, each of the parameter's " \
    "type and in the canonical form bind_call gives it")                                               \
  X(getitem_on_tuple,                                                                                   \
    "a GetItem takes element i (an Int in range) of a tuple-producing node and carries that element's meta") \
  X(tuple_subscript_is_getitem,                                                                         \
    "an int subscript of a tuple-producing node is a GetItem node, not an operator.getitem Call (the "  \
    "text form cannot tell them apart)")                                                                \
  X(unique_names, "node names are unique Python identifiers that Graph::unique_name could hand out")    \
  X(meta_matches_rule, "a Call whose op's meta rule answers for its operands carries the rule's result (requires_grad may be clear where the rule sets it: grad mode was off)")
// clang-format on

enum class GraphInvariant : uint8_t {
#define FF_INVARIANT_ENUM(name, doc) name,
  FF_GRAPH_INVARIANTS(FF_INVARIANT_ENUM)
#undef FF_INVARIANT_ENUM
};

struct Violation {
  GraphInvariant invariant;
  std::string node;    // the offending node's name ("" for the graph as a whole)
  std::string detail;  // a sentence

  std::string str() const;  // "operands_defined_before_use: 'relu' uses 'add', which comes later"
};

std::vector<Violation> find_violations(const Graph& g);

// Every violation as text (empty: the graph is well formed).
std::vector<std::string> verify(const Graph& g);

// Throws InternalError listing the violations and the graph code. `context` says when the check
// ran ("after cse").
void verify_or_throw(const Graph& g, std::string_view context = "");

const char* invariant_name(GraphInvariant inv);

}  // namespace ff
