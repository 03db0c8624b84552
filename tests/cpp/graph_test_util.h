// Helpers shared by the graph IR tests: building graphs call by call, and golden files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_registry.h"
#include "graph/printer.h"

namespace ff::testing {

inline Value N(NodeId id) { return Value::of_node(id); }
inline Value I(int64_t v) { return Value::of_int(v); }
inline Value F(double v) { return Value::of_float(v); }
inline Value L(std::vector<Value> items) { return Value::list(std::move(items)); }

inline ValueMeta T(std::vector<int64_t> sizes, DType dt = DType::Float32) {
  return ValueMeta::of_tensor(TensorMeta::contiguous(std::move(sizes), dt));
}

// The name a call node gets: the last part of its op's target (`add` for operator.add).
inline std::string hint_for(const OpDef& op) {
  size_t dot = op.target.rfind('.');
  return op.target.substr(dot == std::string::npos ? 0 : dot + 1);
}

// Adds a call of the op named `op_name`: binds the arguments and takes the meta rule's result, or
// `meta` where given (ops whose rule defers to the meta-tensor fallback).
inline NodeId call(Graph& g, const std::string& op_name, const std::vector<Value>& args,
                   const std::vector<std::pair<std::string, Value>>& kwargs = {},
                   std::optional<ValueMeta> meta = std::nullopt) {
  auto id = op_by_name(op_name);
  EXPECT_TRUE(id.has_value()) << "no op " << op_name;
  const OpDef& op = op_def(*id);
  std::string error;
  auto bound = bind_call(op, args, kwargs, g, &error);
  EXPECT_TRUE(bound.has_value()) << error;
  if (!meta) meta = infer_meta(op, *bound, g);
  EXPECT_TRUE(meta.has_value()) << "no meta for " << op_name;
  return g.add_call(*id, *bound, *meta, hint_for(op));
}

// ---- golden files ---------------------------------------------------------------------------
//
// A golden file holds cases, each
//
//   ## one line saying what the case checks
//   <graph code before>
//   ----
//   <graph code expected>
//
// Lines starting with `#!` are comments. FF_ACCEPT=1 rewrites the expected parts with what the
// test produced (review the diff).

struct GoldenCase {
  std::string intent;
  std::string before;
  std::string expected;
};

inline std::filesystem::path golden_path(const std::string& name) {
  return std::filesystem::path(__FILE__).parent_path() / "golden" / name;
}

inline std::vector<GoldenCase> read_golden(const std::string& name) {
  std::ifstream in(golden_path(name));
  EXPECT_TRUE(in.good()) << "cannot open golden file " << name;
  std::vector<GoldenCase> cases;
  std::string line;
  bool in_expected = false;
  while (std::getline(in, line)) {
    if (line.starts_with("#!")) continue;
    if (line.starts_with("## ")) {
      cases.push_back({line.substr(3), "", ""});
      in_expected = false;
      continue;
    }
    if (cases.empty()) continue;
    if (line == "----") {
      in_expected = true;
      continue;
    }
    (in_expected ? cases.back().expected : cases.back().before) += line + "\n";
  }
  auto trim_tail = [](std::string& s) {
    while (s.size() >= 2 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') s.pop_back();
  };
  for (GoldenCase& c : cases) {
    trim_tail(c.before);
    trim_tail(c.expected);
  }
  return cases;
}

inline bool accept_mode() {
  const char* v = std::getenv("FF_ACCEPT");
  return v != nullptr && std::string(v) == "1";
}

inline void write_golden(const std::string& name, const std::vector<GoldenCase>& cases) {
  std::ofstream out(golden_path(name));
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i) out << "\n";
    out << "## " << cases[i].intent << "\n" << cases[i].before << "----\n" << cases[i].expected;
  }
}

}  // namespace ff::testing
