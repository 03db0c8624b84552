// The loop IR: text form, checked factories, the verifier's named invariants.
#include <gtest/gtest.h>

#include "inductor/loop_ir.h"
#include "src/base/errors.h"

namespace ff::loop {
namespace {

Program two_buffers() {
  Program p;
  Buffer in;
  in.sizes = {4, 8};
  in.strides = {8, 1};
  in.role = BufferRole::Input;
  in.input = 0;
  in.name = "x";
  Buffer out = in;
  out.role = BufferRole::Output;
  out.name = "y";
  out.input = -1;
  p.buffers = {in, out};
  return p;
}

Kernel row_sum_kernel() {
  // for v0 in 0..4 parallel: t0 = sum_init; for v1 in 0..8: t0 = sum(t0, x[v0*8+v1]); y[v0*8] = t0
  Kernel k;
  k.name = "k0";
  k.num_vars = 2;
  k.locals = {ScalarType::F32};
  Expr idx = index_add(index_mul(var(0), 8), var(1));
  Stmt red = loop_stmt(1, 8, {reduce_stmt(0, ReduceOp::Sum, load(0, idx, ScalarType::F32))});
  k.root = loop_stmt(0, 4, {init_stmt(0, ReduceOp::Sum), red, store_stmt(1, index_mul(var(0), 8), local(0, ScalarType::F32))}, true);
  return k;
}

TEST(LoopIR, TextForm) {
  Program p = two_buffers();
  p.kernels = {row_sum_kernel()};
  p.steps = {{Step::Kind::Kernel, 0}};
  EXPECT_EQ(program_str(p),
            "buf0: f32[4, 8] strides [8, 1] Input #0 (x)\n"
            "buf1: f32[4, 8] strides [8, 1] Output (y)\n"
            "kernel k0 (buf0: f32[4, 8], buf1: f32[4, 8] out)\n"
            "  t0: f32\n"
            "  for v0 in 0..4 parallel:\n"
            "    t0 = sum_init\n"
            "    for v1 in 0..8:\n"
            "      t0 = sum(t0, buf0[v0*8 + v1])\n"
            "    buf1[v0*8] = t0\n");
  EXPECT_EQ(verify_program(p), "");
}

TEST(LoopIR, ExpressionText) {
  Expr x = load(0, var(0), ScalarType::F32);
  EXPECT_EQ(expr_str(select(binary(BinaryOp::Lt, x, const_float(0, ScalarType::F32)), const_float(0.5, ScalarType::F32), unary(UnaryOp::Exp, x))),
            "where((buf0[v0] < 0.0), 0.5, exp(buf0[v0]))");
  EXPECT_EQ(expr_str(cast(x, ScalarType::F64)), "f64(buf0[v0])");
  EXPECT_EQ(expr_str(binary(BinaryOp::Mod, binary(BinaryOp::FloorDiv, var(2), const_int(3)), const_int(5))), "((v2 // 3) % 5)");
  EXPECT_EQ(expr_str(index_add(index_mul(var(1), -2), const_int(7))), "-v1*2 + 7");
}

TEST(LoopIR, IndexFoldingAndAffine) {
  EXPECT_EQ(expr_str(index_add(const_int(0), index_mul(var(0), 1))), "v0");
  EXPECT_EQ(expr_str(index_mul(const_int(3), 4)), "12");
  Affine a;
  ASSERT_TRUE(as_affine(index_add(index_mul(var(1), 5), index_add(var(0), index_mul(var(1), 2))), &a));
  ASSERT_EQ(a.terms.size(), 2u);
  EXPECT_EQ(a.terms[1], (std::pair<int, int64_t>{1, 7}));
  EXPECT_FALSE(as_affine(binary(BinaryOp::FloorDiv, var(0), const_int(2)), &a));
}

TEST(LoopIR, FactoriesRejectTypeErrors) {
  Expr f = const_float(1.0, ScalarType::F32);
  Expr i = const_int(1, ScalarType::I32);
  EXPECT_THROW(binary(BinaryOp::Add, f, i), InternalError);
  EXPECT_THROW(unary(UnaryOp::Sin, i), InternalError);
  EXPECT_THROW(select(f, f, f), InternalError);
  EXPECT_THROW(load(0, f, ScalarType::F32), InternalError);
  EXPECT_EQ(binary(BinaryOp::Lt, f, f)->type, ScalarType::Bool);
  EXPECT_EQ(cast(const_float(2.7, ScalarType::F32), ScalarType::I64)->i, 2);
}

TEST(LoopIR, VerifierNamesTheBrokenInvariant) {
  Program p = two_buffers();
  Kernel k = row_sum_kernel();
  k.root.parallel = false;
  p.kernels = {k};
  p.steps = {{Step::Kind::Kernel, 0}};
  EXPECT_EQ(verify_program(p), "kernel k0: root_is_parallel_loop violated");

  k = row_sum_kernel();
  k.root.body.erase(k.root.body.begin());  // reduce without init
  p.kernels = {k};
  EXPECT_EQ(verify_program(p), "kernel k0: reduce_after_init violated by t0");

  k = row_sum_kernel();
  k.root.body.push_back(store_stmt(0, var(0), const_float(0, ScalarType::F32)));
  p.kernels = {k};
  EXPECT_EQ(verify_program(p), "kernel k0: inputs_read_only violated");
  p.buffers[0].mutated = true;  // an in-place op on the graph input may store into it
  EXPECT_EQ(verify_program(p), "");
  p.buffers[0].mutated = false;

  k = row_sum_kernel();
  k.root.body.push_back(store_stmt(1, var(1), const_float(0, ScalarType::F32)));  // v1 not bound here
  p.kernels = {k};
  EXPECT_EQ(verify_program(p), "kernel k0: vars_bound_by_enclosing_loop violated by v1");

  k = row_sum_kernel();
  k.root.body.push_back(store_stmt(1, var(0), const_float(0, ScalarType::F64)));
  p.kernels = {k};
  EXPECT_EQ(verify_program(p), "kernel k0: store_type_matches_buffer violated for buf1");

  p.kernels = {row_sum_kernel()};
  p.outputs = {{3, TensorRef{1, {4, 8}, {8, 1}, 0}}};
  p.steps.clear();
  EXPECT_EQ(verify_program(p), "output node 3: outputs_written violated by buf1");
  p.outputs = {{3, TensorRef{7, {4, 8}, {8, 1}, 0}}};
  EXPECT_EQ(verify_program(p), "output node 3: buffers_exist violated by buf7");

  p.outputs.clear();
  p.steps = {{Step::Kind::Kernel, 1}};  // one kernel only
  EXPECT_EQ(verify_program(p), "steps_in_range violated");

  k = row_sum_kernel();  // a rewrite that left an f32 index behind
  auto bad = std::make_shared<ExprNode>(*k.root.body.back().index);
  bad->type = ScalarType::F32;
  k.root.body.back().index = bad;
  p.kernels = {k};
  p.steps = {{Step::Kind::Kernel, 0}};
  EXPECT_EQ(verify_program(p), "kernel k0: indices_are_i64 violated by a store to buf1");
}

TEST(LoopIR, VerifierBuffersWrittenBeforeRead) {
  // A kernel may read an intermediate it stores itself; one stored by no earlier step is an error.
  Program p = two_buffers();
  Buffer mid = p.buffers[1];
  mid.role = BufferRole::Intermediate;
  mid.name = "t";
  p.buffers.push_back(mid);  // buf2
  Kernel k;
  k.name = "k0";
  k.num_vars = 2;
  Expr idx = index_add(index_mul(var(0), 8), var(1));
  Stmt fill = loop_stmt(1, 8, {store_stmt(2, idx, load(0, idx, ScalarType::F32))});
  Stmt copy = loop_stmt(1, 8, {store_stmt(1, idx, load(2, idx, ScalarType::F32))});
  k.root = loop_stmt(0, 4, {fill, copy}, true);
  p.kernels = {k};
  p.steps = {{Step::Kind::Kernel, 0}};
  EXPECT_EQ(verify_program(p), "");

  k.root = loop_stmt(0, 4, {copy}, true);
  p.kernels = {k};
  EXPECT_EQ(verify_program(p), "kernel k0: buffers_written_before_read violated by buf2");
}

}  // namespace
}  // namespace ff::loop
