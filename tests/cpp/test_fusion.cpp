// Fusion decisions as golden loop IR: pointwise chains inline, reductions fuse with their
// prologue and epilogue, dead intermediates disappear.
#include <gtest/gtest.h>

#include "graph/op_registry.h"
#include "inductor/lower.h"
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
  EXPECT_TRUE(meta.has_value());
  return g.add_call(d.id, *bound, *meta, op);
}

Value N(NodeId n) { return Value::of_node(n); }

std::string program(const Graph& g) { return loop::program_str(inductor::compile_to_loop_ir(g)); }

// Two pointwise ops over one input become one kernel with one loop.
TEST(Fusion, PointwiseChainIsOneKernel) {
  Graph g;
  NodeId x = input(g, "x", {1024});
  NodeId s = call(g, "sin", {N(x)});
  NodeId c = call(g, "cos", {N(x)});
  NodeId a = call(g, "add", {N(s), N(c)});
  g.set_output(Value::tuple({N(a)}));
  EXPECT_EQ(program(g),
            "buf0: f32[1024] strides [1] Input #0 (x)\n"
            "buf1: f32[1024] strides [1] Output (add)\n"
            "kernel k0 (buf0: f32[1024], buf1: f32[1024] out)\n"
            "  for v0 in 0..1024 parallel:\n"
            "    buf1[v0] = (sin(buf0[v0]) + cos(buf0[v0]))\n");
}

// softmax(x * 0.125, -1): max, sum of exp and the division share one loop over rows.
TEST(Fusion, SoftmaxIsOneKernelPerRow) {
  Graph g;
  NodeId x = input(g, "x", {8, 16});
  NodeId m = call(g, "mul", {N(x), Value::of_float(0.125)});
  NodeId s = call(g, "softmax", {N(m), Value::of_int(-1)});
  g.set_output(Value::tuple({N(s)}));
  auto p = inductor::compile_to_loop_ir(g);
  ASSERT_EQ(p.kernels.size(), 1u) << loop::program_str(p);
  EXPECT_EQ(loop::kernel_str(p.kernels[0], p),
            "kernel k0_k1_k2 (buf0: f32[8, 16], buf3: f32[8, 16] out)\n"
            "  t0: f32\n"
            "  t1: f32\n"
            "  for v0 in 0..8 parallel:\n"
            "    t0 = max_init\n"
            "    for v1 in 0..16:\n"
            "      t0 = max(t0, (buf0[v0*16 + v1] * 0.125))\n"
            "    t1 = sum_init\n"
            "    for v2 in 0..16:\n"
            "      t1 = sum(t1, exp(((buf0[v0*16 + v2] * 0.125) - t0)))\n"
            "    for v3 in 0..16:\n"
            "      buf3[v0*16 + v3] = (exp(((buf0[v0*16 + v3] * 0.125) - t0)) / t1)\n");
}

// layer_norm: mean, variance and the normalized output in one kernel.
TEST(Fusion, LayerNormIsOneKernel) {
  Graph g;
  NodeId x = input(g, "x", {4, 32});
  NodeId r = input(g, "r", {4, 32});
  NodeId w = input(g, "w", {32});
  NodeId b = input(g, "b", {32});
  NodeId a = call(g, "add", {N(x), N(r)});
  NodeId ln = call(g, "layer_norm", {N(a), Value::list({Value::of_int(32)}), N(w), N(b)});
  NodeId ge = call(g, "gelu", {N(ln)});
  g.set_output(Value::tuple({N(ge)}));
  auto p = inductor::compile_to_loop_ir(g);
  EXPECT_EQ(p.kernels.size(), 1u) << loop::program_str(p);
  EXPECT_EQ(p.externs.size(), 0u);
}

// A reduction read at other elements than it writes (a transpose) stays a separate kernel.
TEST(Fusion, TransposedReadIsNotFused) {
  Graph g;
  NodeId x = input(g, "x", {8, 8});
  NodeId s = call(g, "sum", {N(x), Value::list({Value::of_int(1)})}, {{"keepdim", Value::of_bool(true)}});
  NodeId e = call(g, "expand", {N(s), Value::of_int(8), Value::of_int(8)});
  NodeId t = call(g, "t", {N(e)});
  NodeId a = call(g, "add", {N(t), N(x)});
  g.set_output(Value::tuple({N(a)}));
  auto p = inductor::compile_to_loop_ir(g);
  EXPECT_EQ(p.kernels.size(), 2u) << loop::program_str(p);
}

// Matrix products are extern calls; the bias is added by a kernel after them.
TEST(Fusion, LinearIsExternPlusEpilogue) {
  Graph g;
  NodeId x = input(g, "x", {4, 8});
  NodeId w = input(g, "w", {16, 8});
  NodeId b = input(g, "b", {16});
  NodeId l = call(g, "linear", {N(x), N(w), N(b)});
  NodeId r = call(g, "relu", {N(l)});
  g.set_output(Value::tuple({N(r)}));
  auto p = inductor::compile_to_loop_ir(g);
  ASSERT_EQ(p.steps.size(), 2u) << loop::program_str(p);
  EXPECT_EQ(p.steps[0].kind, loop::Step::Kind::Extern);
  EXPECT_TRUE(p.externs[0].args[2].is_none());
  EXPECT_EQ(p.steps[1].kind, loop::Step::Kind::Kernel);
}

}  // namespace
}  // namespace ff

namespace ff {
namespace {

// Independent reductions over the same rows share one loop (horizontal fusion).
TEST(Fusion, HorizontalReductionsShareTheOuterLoop) {
  Graph g;
  NodeId x = input(g, "x", {16, 32});
  NodeId s = call(g, "sum", {N(x), Value::list({Value::of_int(1)})});
  NodeId m = call(g, "amax", {N(x), Value::list({Value::of_int(1)})});
  g.set_output(Value::tuple({N(s), N(m)}));
  auto p = inductor::compile_to_loop_ir(g);
  ASSERT_EQ(p.kernels.size(), 1u) << loop::program_str(p);
  EXPECT_EQ(p.kernels[0].stored_buffers().size(), 2u);
}

// An intermediate dead before another is created shares its storage (memory planning).
TEST(Fusion, MemoryPlanReusesDeadIntermediates) {
  loop::Program p;
  auto buf = [&](loop::BufferRole role) {
    loop::Buffer b;
    b.sizes = {64};
    b.strides = {1};
    b.role = role;
    b.input = role == loop::BufferRole::Input ? 0 : -1;
    p.buffers.push_back(b);
  };
  buf(loop::BufferRole::Input);         // buf0
  buf(loop::BufferRole::Intermediate);  // buf1: k0 -> k1
  buf(loop::BufferRole::Intermediate);  // buf2: k1 -> k2
  buf(loop::BufferRole::Intermediate);  // buf3: k2 -> k3 (buf1 is dead by then)
  buf(loop::BufferRole::Output);        // buf4
  for (int k = 0; k < 4; ++k) {
    loop::Kernel kern;
    kern.num_vars = 1;
    kern.root = loop::loop_stmt(0, 64, {loop::store_stmt(k + 1, loop::var(0), loop::load(k, loop::var(0), loop::ScalarType::F32))}, true);
    p.kernels.push_back(kern);
    p.steps.push_back({loop::Step::Kind::Kernel, k});
  }
  std::vector<std::string> log;
  auto planned = inductor::plan_memory(p, &log);
  EXPECT_EQ(planned.slot, (std::vector<int>{-1, 0, 1, 0, -1}));
  EXPECT_EQ(planned.slot_bytes, (std::vector<int64_t>{256, 256}));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "buf3 reuses the storage of slot 0");
}

// The CPU passes after scheduling: softmax's second exp becomes a read of the value stored
// while summing; a [1, 4, 16] epilogue's outer loops collapse into one loop of 64 rows.
TEST(Fusion, SoftmaxReusesStoredExpAndSmallOuterLoopsCollapse) {
  Graph g;
  NodeId x = input(g, "x", {1, 4, 16});
  NodeId s = call(g, "softmax", {N(x), Value::of_int(-1)});
  g.set_output(Value::tuple({N(s)}));
  auto p = inductor::collapse_outer_loops(inductor::reuse_reduced_values(inductor::compile_to_loop_ir(g)), 64);
  ASSERT_EQ(p.kernels.size(), 1u) << loop::program_str(p);
  std::string k = loop::kernel_str(p.kernels[0], p);
  EXPECT_NE(k.find("for v0 in 0..4 parallel:"), std::string::npos) << k;  // rows already flat; body is not a single loop
  EXPECT_EQ(k.find("exp", k.find("exp") + 1), std::string::npos) << "exp computed twice:\n"
                                                                 << k;
  EXPECT_NE(k.find("= t"), std::string::npos) << k;

  Graph h;
  NodeId y = input(h, "y", {1, 4, 16});
  h.set_output(Value::tuple({N(call(h, "sin", {N(y)}))}));
  auto q = inductor::collapse_outer_loops(inductor::compile_to_loop_ir(h), 64);
  std::string kq = loop::kernel_str(q.kernels[0], q);
  EXPECT_NE(kq.find("in 0..4 parallel:"), std::string::npos) << kq;  // [1, 4] collapsed
  EXPECT_NE(kq.find("in 0..16:"), std::string::npos) << kq;           // the innermost loop kept
}

}  // namespace
}  // namespace ff
