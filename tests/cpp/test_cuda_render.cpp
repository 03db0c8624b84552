// The CUDA renderer: strategy choice per kernel, vectorized variants, and (where NVRTC is
// installed) that the generated source compiles for sm_90.
#include <gtest/gtest.h>

#include "graph/op_registry.h"
#include "inductor/cuda/cuda_api.h"
#include "inductor/cuda/cuda_render.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/lower.h"
#include "inductor/schedule.h"
#include "src/base/config.h"
#include "src/base/errors.h"

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
  EXPECT_TRUE(meta.has_value());
  return g.add_call(d.id, *bound, *meta);
}

Value N(NodeId n) { return Value::of_node(n); }

cuda::ModuleSource render(const Graph& g, loop::Program* out = nullptr) {
  loop::Program p = inductor::compile_to_loop_ir(g);
  if (out) *out = p;
  return cuda::render_module(p);
}

// Compiles when NVRTC is installed (CI installs it; the Python tests insist on it there).
void expect_compiles(const cuda::ModuleSource& m) {
  std::string why;
  if (!cuda::nvrtc_api(&why)) {
    std::cout << "[ NVRTC absent: source not compiled ] " << why.substr(0, 80) << "\n";
    return;
  }
  config().disk_cache = false;
  std::string cubin = cuda::compile_cubin(m.source, "sm_90");
  EXPECT_GT(cubin.size(), 1000u);
  EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f"
                                            "ELF"));
}

TEST(CudaRender, SinCosIsVectorizedPointwise) {
  Graph g;
  NodeId x = input(g, "x", {1 << 20});
  NodeId s = call(g, "sin", {N(x)});
  NodeId c = call(g, "cos", {N(x)});
  g.set_output(Value::tuple({N(call(g, "add", {N(s), N(c)}))}));
  auto m = render(g);
  ASSERT_EQ(m.kernels.size(), 1u);
  const auto& k = m.kernels[0];
  EXPECT_EQ(k.strategy, cuda::Strategy::Pointwise);
  ASSERT_EQ(k.variants.size(), 2u);  // 16-byte vectors, and a scalar fallback
  EXPECT_EQ(k.variants[0].vec, 4);
  EXPECT_EQ(k.variants[0].aligned.size(), 2u);
  EXPECT_TRUE(k.variants[1].aligned.empty());
  EXPECT_NE(m.source.find("ff_vec<float, 4>"), std::string::npos);
  // sin and cos of one value: one sincos.
  EXPECT_NE(m.source.find("ff_sincos("), std::string::npos);
  // The vector function is compiled up front; the scalar fallback is a lazy program of its own.
  ASSERT_EQ(m.units.size(), 2u);
  EXPECT_FALSE(m.units[static_cast<size_t>(k.variants[0].unit)].lazy);
  EXPECT_TRUE(m.units[static_cast<size_t>(k.variants[1].unit)].lazy);
  EXPECT_EQ(m.units[static_cast<size_t>(k.variants[0].unit)].source.find(k.variants[1].fn + "("), std::string::npos);
  EXPECT_NE(m.units[static_cast<size_t>(k.variants[1].unit)].source.find(k.variants[1].fn + "("), std::string::npos);
  expect_compiles(m);
}

TEST(CudaRender, SoftmaxIsOneRowBlockKernel) {
  Graph g;
  NodeId x = input(g, "x", {64, 4096});
  NodeId m0 = call(g, "mul", {N(x), Value::of_float(0.125)});
  g.set_output(Value::tuple({N(call(g, "softmax", {N(m0), Value::of_int(-1)}))}));
  auto m = render(g);
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].strategy, cuda::Strategy::RowBlock);
  EXPECT_TRUE(m.kernels[0].variants[0].fixed_block);
  EXPECT_EQ(m.kernels[0].variants[0].block_x, 512);
  EXPECT_NE(m.source.find("ff_block_reduce<2, 512>"), std::string::npos);  // max
  EXPECT_NE(m.source.find("ff_block_reduce<0, 512>"), std::string::npos);  // sum
  EXPECT_TRUE(m.kernels[0].variants.back().aligned.empty());
  expect_compiles(m);
}

TEST(CudaRender, SymbolicSizesAreKernelArguments) {
  // Dynamic shapes: rows s0 (traced 6) of s1 (traced 8) floats, and a second input of 12 * s0
  // rows: the source relies only on what holds at every binding.
  ShapeEnv env;
  Graph g;
  {
    ShapeEnvScope scope(&env);
    SymInt s0 = env.new_symbol(6, "x0"), s1 = env.new_symbol(8, "x1");
    NodeId x = g.add_placeholder("x", ValueMeta::of_tensor(TensorMeta::contiguous(SymShape{s0, s1}, DType::Float32)));
    NodeId y = g.add_placeholder("y", ValueMeta::of_tensor(TensorMeta::contiguous(SymShape{s0 * 12, SymInt(8)}, DType::Float32)));
    NodeId sm = call(g, "softmax", {N(x), Value::of_int(-1)});
    g.set_output(Value::tuple({N(sm), N(call(g, "relu", {N(y)}))}));
  }
  ShapeEnvScope none(nullptr);  // nothing may specialise a size while rendering
  loop::Program p;
  auto m = render(g, &p);
  ASSERT_TRUE(p.symbolic);
  ASSERT_EQ(m.kernels.size(), 2u);
  const cuda::KernelPlan* soft = nullptr;
  const cuda::KernelPlan* relu = nullptr;
  for (const auto& k : m.kernels) (k.strategy == cuda::Strategy::RowBlock ? soft : relu) = &k;
  ASSERT_TRUE(soft && relu);
  EXPECT_EQ(soft->items.str(), "s0");
  EXPECT_EQ(soft->symbols, (std::vector<SymbolId>{0, 1}));
  // The row length s1 is only known per call: no vectors along it; rows per block clamped (s0's
  // divisibility is unknown), with the last block's extra rows redoing the last one.
  EXPECT_TRUE(soft->variants.back().aligned.empty());
  EXPECT_NE(m.source.find("min((int)blockIdx.x * "), std::string::npos) << m.source;
  EXPECT_NE(m.source.find("< s1; "), std::string::npos) << m.source;
  // 96 * s0 elements: a multiple of 4 at every binding, so 16-byte vectors and no scalar tail.
  EXPECT_EQ(relu->items.str(), "96*s0");
  EXPECT_EQ(relu->variants[0].vec, 4);
  EXPECT_NE(m.source.find("long long ff_s0"), std::string::npos);
  EXPECT_NE(m.source.find("const int s0 = (int)ff_s0;"), std::string::npos);
  EXPECT_EQ(m.source.find("< 6;"), std::string::npos);  // the traced sizes are no extents
  EXPECT_EQ(m.source.find("< 576;"), std::string::npos);
  // 32-bit indices at the traced sizes; past 2^30 elements the runtime compiles its own.
  EXPECT_FALSE(relu->wide_index);
  loop::Program big = loop::specialize_program(p, {int64_t{1} << 24, 8});
  EXPECT_TRUE(cuda::needs_wide_index(big, big.kernels[1]) || cuda::needs_wide_index(big, big.kernels[0]));
  loop::Program small = loop::specialize_program(p, {100, 8});
  EXPECT_FALSE(cuda::needs_wide_index(small, small.kernels[0]) || cuda::needs_wide_index(small, small.kernels[1]));
  expect_compiles(m);
}

TEST(CudaRender, LayerNormGeluBf16) {
  Graph g;
  NodeId x = input(g, "x", {16, 768}, DType::BFloat16);
  NodeId r = input(g, "r", {16, 768}, DType::BFloat16);
  NodeId w = input(g, "w", {768}, DType::BFloat16);
  NodeId b = input(g, "b", {768}, DType::BFloat16);
  NodeId a = call(g, "add", {N(x), N(r)});
  NodeId ln = call(g, "layer_norm", {N(a), Value::list({Value::of_int(768)}), N(w), N(b)});
  g.set_output(Value::tuple({N(call(g, "gelu", {N(ln)}))}));
  auto m = render(g);
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].strategy, cuda::Strategy::RowBlock);
  EXPECT_NE(m.source.find("ff_bf16_to_f32"), std::string::npos);
  EXPECT_NE(m.source.find("ff_f32_to_bf16"), std::string::npos);
  expect_compiles(m);
}

// A column sum reads contiguously across rows: columns go to consecutive lanes, each column's rows
// to the threads of its block (ColumnBlock); a short one stays one thread per column.
TEST(CudaRender, ColumnSumSpreadsEachColumnOverAThreadColumn) {
  Graph g;
  NodeId x = input(g, "x", {512, 256});
  g.set_output(Value::tuple({N(call(g, "sum", {N(x), Value::list({Value::of_int(0)})}))}));
  auto m = render(g);
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].strategy, cuda::Strategy::ColumnBlock);
  ASSERT_EQ(m.kernels[0].variants.size(), 1u);
  const cuda::KernelVariant& v = m.kernels[0].variants[0];
  EXPECT_TRUE(v.fixed_block && v.rows_on_x);
  EXPECT_EQ(256 % v.block_x, 0);
  EXPECT_NE(m.source.find("ff_column_reduce<0, " + std::to_string(v.block_x) + ", " + std::to_string(v.block_y) + ">"),
            std::string::npos);
  expect_compiles(m);

  Graph small;
  NodeId y = input(small, "y", {16, 256});
  small.set_output(Value::tuple({N(call(small, "sum", {N(y), Value::list({Value::of_int(0)})}))}));
  EXPECT_EQ(render(small).kernels[0].strategy, cuda::Strategy::Serial);
}

// The channel mean of an NHWC tensor (squeeze-excite): the H and W loops are flattened and spread.
TEST(CudaRender, ChannelMeanOfChannelsLastIsAColumnBlock) {
  Graph g;
  TensorMeta t = TensorMeta::contiguous({8, 32, 56, 56}, DType::Float32);
  t.strides = {56 * 56 * 32, 1, 56 * 32, 32};
  NodeId x = g.add_placeholder("x", ValueMeta::of_tensor(t));
  g.set_output(Value::tuple({N(call(g, "mean", {N(x), Value::list({Value::of_int(2), Value::of_int(3)})}))}));
  auto m = render(g);
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].strategy, cuda::Strategy::ColumnBlock);
  expect_compiles(m);
}

TEST(CudaRender, MixedDtypesBroadcastAndTranspose) {
  Graph g;
  NodeId x = input(g, "x", {32, 48}, DType::Float16);
  NodeId y = input(g, "y", {48, 32}, DType::Float64);
  NodeId i = input(g, "i", {48}, DType::Int64);
  NodeId t = call(g, "t", {N(y)});
  NodeId a = call(g, "add", {N(x), N(t)});
  NodeId c = call(g, "mul", {N(a), N(i)});
  NodeId mx = call(g, "amax", {N(c), Value::list({Value::of_int(1)})});
  NodeId cmp = call(g, "gt", {N(c), Value::of_float(0.5)});
  NodeId w = call(g, "minimum", {N(c), N(call(g, "exp", {N(a)}))});
  g.set_output(Value::tuple({N(w), N(mx), N(cmp)}));
  auto m = render(g);
  EXPECT_GE(m.kernels.size(), 1u);
  EXPECT_NE(m.source.find("ff_f16_to_f32"), std::string::npos);
  expect_compiles(m);
}

TEST(CudaRender, CacheNamesAreStableContentHashes) {
  EXPECT_NE(cuda::content_hash("a"), cuda::content_hash("b"));
  EXPECT_EQ(cuda::content_hash("a"), cuda::content_hash(std::string("a")));
  EXPECT_EQ(cuda::content_hash("a").size(), 32u);
}

TEST(CudaApi, MissingDriverIsAnExplainedError) {
  std::string why;
  const cuda::DriverApi* d = cuda::driver_api(&why);
  if (d) {
    EXPECT_GT(d->version, 0);
  } else {
    EXPECT_NE(why.find("libcuda.so.1"), std::string::npos) << why;
    EXPECT_THROW(cuda::driver(), UserError);
  }
}

}  // namespace
}  // namespace ff
