// The CPU renderer: JIT kernels from lowered graphs and run them on plain buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "graph/op_registry.h"
#include "inductor/cpu_codegen.h"
#include "inductor/schedule.h"

namespace ff {
namespace {

NodeId input(Graph& g, const char* name, std::vector<int64_t> sizes, DType dt = DType::Float32) {
  return g.add_placeholder(name, ValueMeta::of_tensor(TensorMeta::contiguous(std::move(sizes), dt)));
}
NodeId call(Graph& g, const char* op, std::vector<Value> pos, std::vector<std::pair<std::string, Value>> kw = {}) {
  const OpDef& d = op_def(*op_by_name(op));
  std::string err;
  auto bound = bind_call(d, pos, kw, g, &err);
  EXPECT_TRUE(bound.has_value()) << err;
  auto meta = infer_meta(d, *bound, g);
  return g.add_call(d.id, *bound, *meta, op);
}
Value N(NodeId n) { return Value::of_node(n); }

// Runs every kernel of p in order over its whole range; `mem` holds one vector per buffer. A
// program specialised from a symbolic one passes the symbols' values (`bindings`) after the buffers.
void run(const loop::Program& p, const inductor::CpuModule& m, std::vector<std::vector<char>>& mem,
         std::vector<int64_t> bindings = {}) {
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (mem[b].empty()) mem[b].resize(static_cast<size_t>(loop::buffer_bytes(p.buffers[b])) + 64);
  for (const auto& s : p.steps) {
    ASSERT_EQ(s.kind, loop::Step::Kind::Kernel);
    const auto& k = p.kernels[static_cast<size_t>(s.index)];
    std::vector<void*> ptrs;
    for (int b : k.buffers()) ptrs.push_back(mem[static_cast<size_t>(b)].data());
    ptrs.push_back(bindings.data());
    m.kernels[static_cast<size_t>(s.index)](ptrs.data(), 0, k.root.extent);
  }
}

template <class T>
std::vector<char> bytes(const std::vector<T>& v) {
  std::vector<char> out(v.size() * sizeof(T) + 64);
  std::memcpy(out.data(), v.data(), v.size() * sizeof(T));
  return out;
}
template <class T>
T at(const std::vector<char>& m, size_t i) {
  T v;
  std::memcpy(&v, m.data() + i * sizeof(T), sizeof(T));
  return v;
}

TEST(LlvmCodegen, SinPlusCos) {
  if (!inductor::cpu_codegen_available()) GTEST_SKIP() << "built without LLVM";
  Graph g;
  NodeId x = input(g, "x", {1000});
  NodeId a = call(g, "add", {N(call(g, "sin", {N(x)})), N(call(g, "cos", {N(x)}))});
  g.set_output(Value::tuple({N(a)}));
  auto p = inductor::compile_to_loop_ir(g);
  auto m = inductor::compile_cpu(p, {});
  std::vector<float> xs(1000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i) * 0.01f - 5.0f;
  std::vector<std::vector<char>> mem(p.buffers.size());
  mem[0] = bytes(xs);
  run(p, *m, mem);
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(at<float>(mem[1], i), std::sin(xs[i]) + std::cos(xs[i]), 2e-6) << i;
}

TEST(LlvmCodegen, SoftmaxRowsSumToOneAndNanPropagates) {
  if (!inductor::cpu_codegen_available()) GTEST_SKIP() << "built without LLVM";
  Graph g;
  NodeId x = input(g, "x", {3, 37});
  NodeId s = call(g, "softmax", {N(x), Value::of_int(-1)});
  NodeId m = call(g, "amax", {N(x), Value::list({Value::of_int(1)})});
  g.set_output(Value::tuple({N(s), N(m)}));
  auto p = inductor::compile_to_loop_ir(g);
  auto mod = inductor::compile_cpu(p, {});
  std::vector<float> xs(3 * 37);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i)) * 4;
  xs[40] = NAN;  // row 1
  std::vector<std::vector<char>> mem(p.buffers.size());
  mem[0] = bytes(xs);
  run(p, *mod, mem);
  int sm = p.outputs[0].second.buf, mx = p.outputs[1].second.buf;
  for (int r : {0, 2}) {
    float total = 0, want_max = -INFINITY;
    for (int c = 0; c < 37; ++c) {
      total += at<float>(mem[static_cast<size_t>(sm)], static_cast<size_t>(r * 37 + c));
      want_max = std::max(want_max, xs[static_cast<size_t>(r * 37 + c)]);
    }
    EXPECT_NEAR(total, 1.0f, 1e-5);
    EXPECT_EQ(at<float>(mem[static_cast<size_t>(mx)], static_cast<size_t>(r)), want_max);
  }
  EXPECT_TRUE(std::isnan(at<float>(mem[static_cast<size_t>(mx)], 1)));
  EXPECT_TRUE(std::isnan(at<float>(mem[static_cast<size_t>(sm)], 37)));
}

TEST(LlvmCodegen, IntegerSumAndBroadcast) {
  if (!inductor::cpu_codegen_available()) GTEST_SKIP() << "built without LLVM";
  Graph g;
  NodeId x = input(g, "x", {4, 5}, DType::Int32);
  NodeId y = input(g, "y", {5}, DType::Int32);
  NodeId a = call(g, "mul", {N(x), N(y)});
  NodeId s = call(g, "sum", {N(a), Value::list({Value::of_int(0)})});
  g.set_output(Value::tuple({N(s)}));
  auto p = inductor::compile_to_loop_ir(g);
  auto mod = inductor::compile_cpu(p, {});
  std::vector<int32_t> xs(20), ys(5);
  for (int i = 0; i < 20; ++i) xs[static_cast<size_t>(i)] = i - 7;
  for (int i = 0; i < 5; ++i) ys[static_cast<size_t>(i)] = 3 - i;
  std::vector<std::vector<char>> mem(p.buffers.size());
  mem[0] = bytes(xs);
  mem[1] = bytes(ys);
  run(p, *mod, mem);
  int out = p.outputs[0].second.buf;
  EXPECT_EQ(p.buffers[static_cast<size_t>(out)].dtype, DType::Int64);
  for (int c = 0; c < 5; ++c) {
    int64_t want = 0;
    for (int r = 0; r < 4; ++r) want += int64_t{xs[static_cast<size_t>(r * 5 + c)]} * ys[static_cast<size_t>(c)];
    EXPECT_EQ(at<int64_t>(mem[static_cast<size_t>(out)], static_cast<size_t>(c)), want);
  }
}

// Dynamic shapes: a graph over x: f32[s0, s1] lowers to kernels whose extents and index
// arithmetic read the symbols; one compiled module runs at any sizes (the program specialised per
// call only for its buffers' sizes).
TEST(LlvmCodegen, SymbolicSizesAreKernelArguments) {
  if (!inductor::cpu_codegen_available()) GTEST_SKIP() << "built without LLVM";
  ShapeEnv env;
  Graph g;
  {
    ShapeEnvScope scope(&env);
    SymShape sizes{env.new_symbol(5, "x0"), env.new_symbol(7, "x1")};
    NodeId x = g.add_placeholder("x", ValueMeta::of_tensor(TensorMeta::contiguous(sizes, DType::Float32)));
    NodeId rows = call(g, "sum", {N(x), Value::list({Value::of_int(1)})}, {{"keepdim", Value::of_bool(true)}});
    NodeId out = call(g, "add", {N(call(g, "mul", {N(x), Value::of_float(2.0)})), N(rows)});
    g.set_output(Value::tuple({N(out)}));
    EXPECT_TRUE(env.guards().empty());
  }
  ShapeEnvScope none(nullptr);  // nothing may specialise a size while compiling
  loop::Program p = inductor::compile_to_loop_ir(g);
  ASSERT_TRUE(p.symbolic);
  std::string text = loop::program_str(p);
  EXPECT_NE(text.find("for v0 in 0..s0 parallel"), std::string::npos) << text;
  EXPECT_NE(text.find("buf0[((v0 * s1) + v1)]"), std::string::npos) << text;
  auto m = inductor::compile_cpu(p, {});
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 4}, {9, 2}, {2, 33}}) {
    std::vector<int64_t> bindings{rows, cols};
    loop::Program concrete = loop::specialize_program(p, bindings);
    EXPECT_FALSE(concrete.symbolic);
    EXPECT_EQ(concrete.buffers[0].sizes.str(), "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    std::vector<float> xs(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 13) - 6.0f;
    std::vector<std::vector<char>> mem(p.buffers.size());
    mem[0] = bytes(xs);
    run(concrete, *m, mem, bindings);
    int out = concrete.outputs.at(0).second.buf;
    for (int64_t r = 0; r < rows; ++r) {
      float sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += xs[static_cast<size_t>(r * cols + c)];
      for (int64_t c = 0; c < cols; ++c)
        EXPECT_FLOAT_EQ(at<float>(mem[static_cast<size_t>(out)], static_cast<size_t>(r * cols + c)),
                        xs[static_cast<size_t>(r * cols + c)] * 2 + sum)
            << rows << "x" << cols << " at " << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace ff
