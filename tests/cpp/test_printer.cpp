// graph_code / graph_table golden tests on graphs built call by call.
#include <cmath>

#include "graph/printer.h"
#include "graph_test_util.h"

namespace ff {
namespace {

using namespace ff::testing;

TEST(Printer, FxLikeCode) {
  Graph g;
  NodeId x = g.add_placeholder("x", T({4, 8}));
  TensorMeta wt = TensorMeta::contiguous({16, 8}, DType::Float32);
  wt.strides = {1, 16};
  NodeId w = g.add_placeholder("w", ValueMeta::of_tensor(wt));
  TensorMeta bt = TensorMeta::contiguous({16}, DType::Float32);
  NodeId b = g.add_placeholder("b", ValueMeta::of_tensor(bt));
  NodeId linear = call(g, "linear", {N(x), N(w), N(b)});
  NodeId add = call(g, "op_add", {N(linear), F(1.0)});
  NodeId relu = call(g, "relu", {N(add)});
  call(g, "view", {N(relu), L({I(64)})});
  NodeId sl = call_as(g, "op_getitem", {N(relu), Value::slice(I(0), I(2), Value::none())}, T({2, 16}));
  NodeId split = call_as(g, "split", {N(relu), I(2)}, ValueMeta::tuple({T({2, 16}), T({2, 16})}));
  NodeId first = g.add_getitem(split, 0);
  NodeId sum = call(g, "sum", {N(relu)}, {{"keepdim", Value::of_bool(true)}});
  g.set_output(Value::tuple({N(relu), N(sl), N(first), N(sum)}));
  EXPECT_EQ(graph_code(g),
            "def forward(self, x: \"f32[4, 8]\", w: \"f32[16, 8][1, 16]\", b: \"f32[16]\"):\n"
            "    linear: \"f32[4, 16]\" = torch.nn.functional.linear(x, w, b)\n"
            "    add: \"f32[4, 16]\" = linear + 1.0\n"
            "    relu: \"f32[4, 16]\" = torch.relu(add)\n"
            "    view: \"f32[64]\" = relu.view([64])\n"
            "    getitem: \"f32[2, 16]\" = relu[0:2]\n"
            "    split: \"(f32[2, 16], f32[2, 16])\" = torch.split(relu, 2)\n"
            "    getitem_1: \"f32[2, 16]\" = split[0]\n"
            "    sum_1: \"f32[1, 1]\" = torch.sum(relu, dim=None, keepdim=True)\n"
            "    return (relu, getitem, getitem_1, sum_1)\n");
}

TEST(Printer, MetaAnnotations) {
  TensorMeta t = TensorMeta::contiguous({2, 3}, DType::BFloat16);
  EXPECT_EQ(tensor_meta_str(t), "bf16[2, 3]");
  t.device = Device{Device::Type::CUDA, 0};
  t.requires_grad = true;
  EXPECT_EQ(tensor_meta_str(t), "bf16[2, 3]cuda:0 rg");
  t.strides = {1, 2};
  t.device = Device{Device::Type::CPU, 0};
  EXPECT_EQ(tensor_meta_str(t), "bf16[2, 3][1, 2]cpu:0 rg");
  EXPECT_EQ(tensor_meta_str(TensorMeta::contiguous({}, DType::Bool)), "b8[]");
  // Size-1 dims: torch calls any stride there contiguous, the text keeps the exact strides.
  TensorMeta one = TensorMeta::contiguous({1, 4}, DType::Int64);
  one.strides = {1, 1};
  EXPECT_EQ(tensor_meta_str(one), "i64[1, 4][1, 1]");
  EXPECT_EQ(meta_str(ValueMeta::tuple({T({2}), ValueMeta::of(ValueMeta::Kind::Int)})), "(f32[2], int)");
  EXPECT_EQ(meta_str(ValueMeta::tuple({T({2})})), "(f32[2],)");
  EXPECT_EQ(meta_str(ValueMeta::tuple({})), "()");
  EXPECT_EQ(meta_str(ValueMeta::of(ValueMeta::Kind::Float)), "float");
  EXPECT_EQ(meta_str(ValueMeta::of(ValueMeta::Kind::None)), "None");
}

TEST(Printer, Constants) {
  Graph g;
  EXPECT_EQ(value_str(F(1.0), g), "1.0");
  EXPECT_EQ(value_str(F(0.1), g), "0.1");
  EXPECT_EQ(value_str(F(1e-05), g), "1e-05");
  EXPECT_EQ(value_str(F(-2.5e300), g), "-2.5e+300");
  EXPECT_EQ(value_str(F(1.0 / 3.0), g), "0.3333333333333333");
  EXPECT_EQ(value_str(F(-0.0), g), "-0.0");
  // Laid out as Python's repr: positional for exponents -4 .. 15, scientific otherwise.
  EXPECT_EQ(value_str(F(123.0), g), "123.0");
  EXPECT_EQ(value_str(F(0.0001), g), "0.0001");
  EXPECT_EQ(value_str(F(0.00001), g), "1e-05");
  EXPECT_EQ(value_str(F(1234567890123456.0), g), "1234567890123456.0");
  EXPECT_EQ(value_str(F(1e16), g), "1e+16");
  EXPECT_EQ(value_str(F(-1.5e16), g), "-1.5e+16");
  EXPECT_EQ(value_str(F(5e-324), g), "5e-324");
  EXPECT_EQ(value_str(F(1.7976931348623157e308), g), "1.7976931348623157e+308");
  EXPECT_EQ(value_str(F(HUGE_VAL), g), "float('inf')");
  EXPECT_EQ(value_str(F(-HUGE_VAL), g), "float('-inf')");
  EXPECT_EQ(value_str(F(NAN), g), "float('nan')");
  EXPECT_EQ(value_str(I(-3), g), "-3");
  EXPECT_EQ(value_str(Value::of_bool(false), g), "False");
  EXPECT_EQ(value_str(Value::none(), g), "None");
  EXPECT_EQ(value_str(Value::of_str("tanh"), g), "'tanh'");
  EXPECT_EQ(value_str(Value::of_str("it's"), g), "\"it's\"");
  EXPECT_EQ(value_str(Value::of_str("a'b\"c\\"), g), "'a\\'b\"c\\\\'");
  EXPECT_EQ(value_str(Value::of_dtype(DType::Float16), g), "torch.float16");
  EXPECT_EQ(value_str(Value::of_device(Device{Device::Type::CUDA, 1}), g), "torch.device('cuda:1')");
  EXPECT_EQ(value_str(Value::of_memory_format("channels_last"), g), "torch.channels_last");
  EXPECT_EQ(value_str(Value::of_layout("strided"), g), "torch.strided");
  EXPECT_EQ(value_str(Value::tuple({I(1)}), g), "(1,)");
  EXPECT_EQ(value_str(Value::tuple({}), g), "()");
  EXPECT_EQ(value_str(L({I(1), F(2.0)}), g), "[1, 2.0]");
  EXPECT_EQ(value_str(Value::slice(Value::none(), I(2), Value::none()), g), "slice(None, 2, None)");
  EXPECT_EQ(value_str(Value::ellipsis(), g), "...");
}

TEST(Printer, EveryConstantReadsBackWithParseConstant) {
  Graph g;
  std::vector<Value> values = {F(1.0), F(0.1), F(1e-05), F(-2.5e300), F(1.0 / 3.0),
                               F(6.02e23), F(5e-324), F(HUGE_VAL), F(-HUGE_VAL), I(-7),
                               I(INT64_MAX), Value::of_dtype(DType::Int8), Value::of_device(Device{Device::Type::CUDA, 0}),
                               Value::of_memory_format("contiguous_format"), L({I(1), Value::none()})};
  for (const Value& v : values) {
    bool ok = false;
    Value back = parse_constant(value_str(v, g), &ok);
    EXPECT_TRUE(ok) << value_str(v, g);
    EXPECT_EQ(back, v) << value_str(v, g);
  }
  bool ok = false;
  Value nan = parse_constant(value_str(F(NAN), g), &ok);
  EXPECT_TRUE(ok && nan.kind == Value::Kind::Float && std::isnan(nan.f));
}

TEST(Printer, StylesAndSubscripts) {
  Graph g;
  NodeId x = g.add_placeholder("x", T({4, 5}));
  NodeId n = g.add_placeholder("n", ValueMeta::of(ValueMeta::Kind::Int));
  NodeId neg = call(g, "op_neg", {N(x)});
  NodeId p = call_as(g, "op_pow", {I(-2), N(x)}, T({4, 5}));
  NodeId i1 = call_as(g, "op_getitem", {N(x), Value::tuple({Value::slice(Value::none(), Value::none(), Value::none()), Value::none(), Value::ellipsis()})}, T({4, 1, 5}));
  NodeId i2 = call_as(g, "op_getitem", {N(x), Value::tuple({Value::slice(I(1), Value::none(), I(2))})}, T({2, 5}));
  NodeId i3 = call_as(g, "op_getitem", {N(x), Value::slice(N(n), Value::none(), Value::none())}, T({2, 5}));
  NodeId i4 = call_as(g, "op_getitem", {N(x), Value::tuple({})}, T({4, 5}));
  NodeId add_ = call(g, "add_", {N(neg), F(2.0)}, {{"alpha", I(3)}});
  NodeId gelu = call(g, "gelu", {N(add_)}, {{"approximate", Value::of_str("tanh")}});
  g.set_output(Value::tuple({N(p), N(i1), N(i2), N(i3), N(i4), N(gelu)}));
  EXPECT_EQ(graph_code(g),
            "def forward(self, x: \"f32[4, 5]\", n: \"int\"):\n"
            "    neg: \"f32[4, 5]\" = -x\n"
            "    pow_1: \"f32[4, 5]\" = (-2) ** x\n"
            "    getitem: \"f32[4, 1, 5]\" = x[:, None, ...]\n"
            "    getitem_1: \"f32[2, 5]\" = x[1::2,]\n"
            "    getitem_2: \"f32[2, 5]\" = x[n:]\n"
            "    getitem_3: \"f32[4, 5]\" = x[()]\n"
            "    add_: \"f32[4, 5]\" = neg.add_(2.0, alpha=3)\n"
            "    gelu: \"f32[4, 5]\" = torch.nn.functional.gelu(add_, approximate='tanh')\n"
            "    return (pow_1, getitem, getitem_1, getitem_2, getitem_3, gelu)\n");
}

TEST(Printer, TupleGetItemAndScalarOutputs) {
  Graph g;
  NodeId t = g.add_placeholder("t", ValueMeta::tuple({T({2}), T({3}, DType::Int32)}));
  NodeId a = g.add_getitem(t, 1);
  NodeId b = g.add_getitem(t, 0, "first");
  g.set_output(Value::list({N(b), N(a), I(3)}));
  EXPECT_EQ(graph_code(g),
            "def forward(self, t: \"(f32[2], i32[3])\"):\n"
            "    getitem: \"i32[3]\" = t[1]\n"
            "    first: \"f32[2]\" = t[0]\n"
            "    return [first, getitem, 3]\n");
}

TEST(Printer, ReservedNamesAreNeverHandedOut) {
  Graph g;
  NodeId x = g.add_placeholder("input", T({2}));
  NodeId s = call(g, "sum", {N(x)});
  NodeId torch_named = g.add_call(*op_by_name("relu"), {N(x)}, T({2}), "torch");
  EXPECT_EQ(g.node(x).name, "input_1");
  EXPECT_EQ(g.node(s).name, "sum_1");
  EXPECT_EQ(g.node(torch_named).name, "torch_1");
}

TEST(Printer, UniqueNamesCountUpPastTakenOnes) {
  Graph g;
  NodeId x = g.add_placeholder("x", T({2}));
  OpId relu = *op_by_name("relu");
  std::vector<std::string> names;
  for (const char* hint : {"relu", "relu", "relu_3", "relu", "relu", "relu_1_1", "relu_1", ""})
    names.push_back(g.node(g.add_call(relu, {N(x)}, T({2}), hint)).name);
  EXPECT_EQ(names, (std::vector<std::string>{"relu", "relu_1", "relu_3", "relu_2", "relu_4", "relu_1_1", "relu_1_2", "v"}));
}

TEST(Printer, Table) {
  Graph g;
  NodeId x = g.add_placeholder("x", T({4}));
  NodeId r = call(g, "relu", {N(x)});
  NodeId s = call(g, "sum", {N(r)}, {{"dim", L({I(0)})}});
  g.set_output(Value::tuple({N(s)}));
  EXPECT_EQ(graph_table(g),
            "kind         name    target      args         meta\n"
            "Placeholder  x                                f32[4]\n"
            "Call         relu    torch.relu  (x)          f32[4]\n"
            "Call         sum_1   torch.sum   (relu, [0])  f32[]\n"
            "Output       output              (sum_1,)\n");
}

TEST(Printer, MalformedGraphsStillPrint) {
  Graph g;
  NodeId x = g.add_placeholder("x", T({4}));
  NodeId r = call(g, "relu", {N(x)});
  g.mutable_node(r).args.push_back(I(1));              // too many arguments
  g.mutable_node(r).args[0] = Value::of_node(42);      // a node that does not exist
  g.set_output(Value::tuple({N(r)}));
  EXPECT_EQ(graph_code(g),
            "def forward(self, x: \"f32[4]\"):\n"
            "    relu: \"f32[4]\" = torch.relu(<bad node 42>, 1)\n"
            "    return (relu,)\n");
}

}  // namespace
}  // namespace ff
