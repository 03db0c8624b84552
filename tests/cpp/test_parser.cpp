// parse_graph: print -> parse -> print round trips and error messages (verbatim).
#include <cmath>

#include "graph/parser.h"
#include "graph_test_util.h"

namespace ff {
namespace {

using namespace ff::testing;

void expect_round_trip(const std::string& text) {
  Graph g = parse_graph(text);
  EXPECT_EQ(graph_code(g), text);
  // And once more from the re-printed text (the parsed graph is a fixed point).
  EXPECT_EQ(graph_code(parse_graph(graph_code(g))), text);
}

TEST(Parser, RoundTripsHandWrittenGraphs) {
  const char* graphs[] = {
      // every print style, defaults omitted, keywords
      "def forward(self, x: \"f32[4, 8]\", w: \"f32[16, 8][1, 16]\", b: \"f32[16]cuda:0\"):\n"
      "    linear: \"f32[4, 16]\" = torch.nn.functional.linear(x, w, b)\n"
      "    add: \"f32[4, 16]\" = linear + 1.0\n"
      "    relu: \"f32[4, 16]\" = torch.relu(add)\n"
      "    view: \"f32[64]\" = relu.view([64])\n"
      "    getitem: \"f32[2, 16]\" = relu[0:2]\n"
      "    sum_1: \"f32[1, 1]\" = torch.sum(relu, dim=None, keepdim=True)\n"
      "    neg: \"f32[4, 16]\" = -relu\n"
      "    return (relu, getitem, sum_1, neg)\n",
      // tuple inputs and tuple getitem nodes, list output, scalar constants in the output
      "def forward(self, t: \"(f32[2], i32[3] rg)\", n: \"int\"):\n"
      "    getitem: \"i32[3] rg\" = t[1]\n"
      "    first: \"f32[2]\" = t[0]\n"
      "    return [first, getitem, 3, n, None]\n",
      // subscripts of every shape
      "def forward(self, x: \"f32[4, 5]\", n: \"int\"):\n"
      "    getitem: \"f32[4, 1, 5]\" = x[:, None, ...]\n"
      "    getitem_1: \"f32[2, 5]\" = x[1::2,]\n"
      "    getitem_2: \"f32[2, 5]\" = x[n:]\n"
      "    getitem_3: \"f32[4, 5]\" = x[()]\n"
      "    getitem_4: \"f32[5]\" = x[-1]\n"
      "    getitem_5: \"f32[2, 5]\" = x[[0, 2]]\n"
      "    getitem_6: \"f32[4]\" = x[:n:-1, 0]\n"
      "    return (getitem, getitem_1, getitem_2, getitem_3, getitem_4, getitem_5, getitem_6)\n",
      // constants of every kind
      "def forward(self, x: \"f32[4]\"):\n"
      "    sum_1: \"f64[]\" = torch.sum(x, dtype=torch.float64)\n"
      "    contiguous: \"f32[4]\" = x.contiguous(memory_format=torch.channels_last)\n"
      "    gelu: \"f32[4]\" = torch.nn.functional.gelu(x, approximate='tanh')\n"
      "    div: \"f32[4]\" = torch.div(x, float('-inf'), rounding_mode=\"it's\")\n"
      "    pow_1: \"f32[4]\" = (-2) ** x\n"
      "    mul: \"f32[4]\" = x * float('nan')\n"
      "    truediv: \"f32[4]\" = x / -1.5e-300\n"
      "    layer_norm: \"f32[4]\" = torch.nn.functional.layer_norm(x, [4], eps=0.001)\n"
      "    return (sum_1, contiguous, gelu, div, pow_1, mul, truediv, layer_norm)\n",
      // strides, devices, requires_grad, 0-dim and empty tensors, Python scalars
      "def forward(self, a: \"bf16[2, 3][1, 2]cuda:1 rg\", b: \"b8[]meta\", c: \"i64[0, 3]cpu:0\", f: \"float\", "
      "flag: \"bool\"):\n"
      "    mul: \"float\" = f * 2\n"
      "    return (a, b, c, mul, flag)\n",
      // no inputs, a single non-tuple result
      "def forward(self):\n"
      "    return None\n",
  };
  for (const char* text : graphs) expect_round_trip(text);
}

TEST(Parser, ReadsCommentsAndBlankLines) {
  Graph g = parse_graph(
      "# a comment\n"
      "def forward(self, x: \"f32[4]\"):  # inputs\n"
      "\n"
      "    relu: \"f32[4]\" = torch.relu(x)  # the only op\n"
      "    return (relu,)\n");
  EXPECT_EQ(graph_code(g),
            "def forward(self, x: \"f32[4]\"):\n"
            "    relu: \"f32[4]\" = torch.relu(x)\n"
            "    return (relu,)\n");
}

TEST(Parser, RebindsArgumentsAndTakesMetaFromAnnotations) {
  // Keyword spelling of a positional parameter binds to the same arguments; defaults are filled.
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4, 6]\"):\n"
      "    sum_1: \"f32[6]\" = torch.sum(input=x, dim=[0])\n"
      "    view: \"f32[24]\" = x.view(24)\n"
      "    return (sum_1, view)\n");
  const Node& sum = g.node(1);
  ASSERT_EQ(sum.args.size(), 4u);
  EXPECT_EQ(sum.args[1], L({I(0)}));
  EXPECT_EQ(sum.args[2], Value::of_bool(false));
  EXPECT_EQ(g.node(2).args[1], L({I(24)}));
  EXPECT_EQ(graph_code(g),
            "def forward(self, x: \"f32[4, 6]\"):\n"
            "    sum_1: \"f32[6]\" = torch.sum(x, [0])\n"
            "    view: \"f32[24]\" = x.view([24])\n"
            "    return (sum_1, view)\n");
  // A wrong annotation is kept as written (the verifier, not the parser, compares with the rule).
  Graph wrong = parse_graph(
      "def forward(self, x: \"f32[4]\"):\n"
      "    relu: \"f64[9]\" = torch.relu(x)\n"
      "    return (relu,)\n");
  EXPECT_EQ(tensor_meta_str(wrong.node(1).meta.tensor), "f64[9]");
}

TEST(Parser, Annotations) {
  EXPECT_EQ(meta_str(parse_meta("f32[4, 8][1, 4]cuda:0 rg")), "f32[4, 8][1, 4]cuda:0 rg");
  EXPECT_EQ(meta_str(parse_meta("(f32[2], (int, None), bool,)")), "(f32[2], (int, None), bool)");
  EXPECT_EQ(parse_meta("f16[3, 1][1, 1]").tensor.strides, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(parse_meta("f16[3, 1]").tensor.strides, (std::vector<int64_t>{1, 1}));
  try {
    parse_meta("f32[2, 3][1]");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_STREQ(e.what(), "line 1, column 10: 1 strides for 2 sizes\nf32[2, 3][1]\n         ^");
  }
}

TEST(Parser, RoundTripsRandomGraphs) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    Graph g = random_graph(rng);
    std::string text = graph_code(g);
    Graph back = parse_graph(text);
    ASSERT_EQ(graph_code(back), text);
    // Same nodes, not only the same text.
    ASSERT_EQ(back.size(), g.size()) << text;
    for (size_t k = 0; k < g.size(); ++k) {
      EXPECT_EQ(back.nodes()[k].args, g.nodes()[k].args) << text;
      EXPECT_EQ(back.nodes()[k].meta, g.nodes()[k].meta) << text;
      EXPECT_EQ(back.nodes()[k].op, g.nodes()[k].op) << text;
    }
  }
}

// An argument of parameter type `p` (for calls built only to be printed and parsed).
Value sample_argument(const ParamSpec& p, NodeId x) {
  switch (p.type) {
    case ParamType::Tensor:
    case ParamType::Any: return N(x);
    case ParamType::TensorList:
    case ParamType::TensorVarargs: return L({N(x), N(x)});
    case ParamType::Scalar: return F(2.0);
    case ParamType::Int: return I(0);
    case ParamType::IntList:
    case ParamType::IntVarargs: return L({I(4)});
    case ParamType::Float: return F(0.5);
    case ParamType::Bool: return Value::of_bool(true);
    case ParamType::Str: return Value::of_str("none");
    case ParamType::ScalarType: return Value::of_dtype(DType::Float32);
    case ParamType::Device: return Value::of_device(Device{});
    case ParamType::Layout: return Value::of_layout("strided");
    case ParamType::MemoryFormat: return Value::of_memory_format("contiguous_format");
    default: break;
  }
  return L({N(x), N(x)});  // types added since (tensor varargs ...): a list of tensors
}

// Every op of the registry prints in a form the parser maps back to the same op: Method ops have
// torch.Tensor targets, symbols lex as one token, overloads sharing a target stay distinguishable.
TEST(Parser, EveryRegisteredOpRoundTrips) {
  for (const OpDef& op : all_ops()) {
    SCOPED_TRACE(op.name + " " + op.schema.str());
    if (op.style == PrintStyle::Method) {
      EXPECT_TRUE(op.target.starts_with("torch.Tensor.")) << op.target;
    }
    // Once with only the required arguments, once with every argument given.
    for (bool all : {false, true}) {
      Graph g;
      NodeId x = g.add_placeholder("x", T({4}));
      std::vector<Value> args;
      for (const ParamSpec& p : op.schema.params) args.push_back(p.has_default && !all ? p.default_value : sample_argument(p, x));
      NodeId call_id = g.add_call(op.id, args, T({4}), hint_for(op));
      g.set_output(Value::tuple({N(call_id)}));
      std::string text = graph_code(g);
      Graph back;
      try {
        back = parse_graph(text);
      } catch (const ParseError& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      EXPECT_EQ(graph_code(back), text);
      EXPECT_EQ(back.node(1).op, op.id) << text;
      EXPECT_EQ(back.node(1).args, g.node(1).args) << text;
    }
  }
}

std::string parse_error(const std::string& text) {
  try {
    parse_graph(text);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Parser, ErrorMessages) {
  const std::string head = "def forward(self, x: \"f32[4]\"):\n";
  EXPECT_EQ(parse_error(""), "line 1, column 1: expected 'def forward(self, ...):'");
  EXPECT_EQ(parse_error("def backward(self):\n"),
            "line 1, column 5: expected 'forward', found 'backward'\ndef backward(self):\n    ^");
  EXPECT_EQ(parse_error(head + "    relu: \"f32[4]\" = torch.relu(y)\n"),
            "line 2, column 33: name 'y' is not defined\n"
            "    relu: \"f32[4]\" = torch.relu(y)\n"
            "                                ^");
  EXPECT_EQ(parse_error(head + "    foo: \"f32[4]\" = torch.foo(x)\n"),
            "line 2, column 21: unknown function 'torch.foo'\n"
            "    foo: \"f32[4]\" = torch.foo(x)\n"
            "                    ^");
  EXPECT_EQ(parse_error(head + "    v: \"f32[4]\" = x.frobnicate()\n"),
            "line 2, column 21: unknown method 'frobnicate' (no op has the target torch.Tensor.frobnicate)\n"
            "    v: \"f32[4]\" = x.frobnicate()\n"
            "                    ^");
  EXPECT_EQ(parse_error(head + "    relu: \"f32[4]\" = torch.relu(x, x)\n"),
            "line 2, column 22: relu() takes 1 positional arguments but 2 were given\n"
            "    relu: \"f32[4]\" = torch.relu(x, x)\n"
            "                     ^");
  EXPECT_EQ(parse_error(head + "    s: \"f32[]\" = torch.sum(x, keep=True)\n"),
            "line 2, column 18: sum() got an unexpected keyword argument 'keep'\n"
            "    s: \"f32[]\" = torch.sum(x, keep=True)\n"
            "                 ^");
  EXPECT_EQ(parse_error(head + "    relu: \"f32[4]\" = torch.relu(x)\n    relu: \"f32[4]\" = torch.relu(x)\n"),
            "line 3, column 5: name 'relu' is already defined\n"
            "    relu: \"f32[4]\" = torch.relu(x)\n"
            "    ^");
  EXPECT_EQ(parse_error(head + "    sum: \"f32[]\" = torch.sum(x)\n"),
            "line 2, column 5: 'sum' is reserved and cannot name a node\n"
            "    sum: \"f32[]\" = torch.sum(x)\n"
            "    ^");
  EXPECT_EQ(parse_error(head + "    relu: \"f32[4\" = torch.relu(x)\n"),
            "line 2, column 17: expected ',' or ']'\n"
            "    relu: \"f32[4\" = torch.relu(x)\n"
            "                ^");
  EXPECT_EQ(parse_error(head + "    relu: \"q8[4]\" = torch.relu(x)\n"),
            "line 2, column 12: unknown dtype 'q8'\n"
            "    relu: \"q8[4]\" = torch.relu(x)\n"
            "           ^");
  EXPECT_EQ(parse_error(head + "    a: \"f32[4]\" = x ~ 2\n"),
            "line 2, column 21: unknown operator '~'\n"
            "    a: \"f32[4]\" = x ~ 2\n"
            "                    ^");
  EXPECT_EQ(parse_error(head + "    a: \"f32[4]\" = x\n"),
            "line 2, column 20: expected an operator, a method call or a subscript after the operand\n"
            "    a: \"f32[4]\" = x\n"
            "                   ^");
  EXPECT_EQ(parse_error(head + "    return (x,)\n    relu: \"f32[4]\" = torch.relu(x)\n"),
            "line 3, column 5: statement after return\n"
            "    relu: \"f32[4]\" = torch.relu(x)\n"
            "    ^");
  EXPECT_EQ(parse_error(head + "relu: \"f32[4]\" = torch.relu(x)\n"),
            "line 2, column 1: expected an indented statement of the body of forward()\n"
            "relu: \"f32[4]\" = torch.relu(x)\n"
            "^");
  EXPECT_EQ(parse_error("def forward(self, t: \"(f32[2],)\"):\n    a: \"f32[2]\" = t[1]\n"),
            "line 2, column 20: index 1 is out of range for 't', a tuple of 1\n"
            "    a: \"f32[2]\" = t[1]\n"
            "                   ^");
  EXPECT_EQ(parse_error(head + "    s: \"str\" = torch.relu(x)\n"),
            "line 2, column 9: unknown dtype 'str'\n"
            "    s: \"str\" = torch.relu(x)\n"
            "        ^");
  EXPECT_EQ(parse_error(head + "    r: \"f32[4]\" = torch.relu('abc)\n"),
            "line 2, column 30: unterminated string\n"
            "    r: \"f32[4]\" = torch.relu('abc)\n"
            "                             ^");
  EXPECT_EQ(parse_error(head + "    r: \"f32[4]\" = torch.relu(x) $\n"),
            "line 2, column 33: unexpected character '$'\n"
            "    r: \"f32[4]\" = torch.relu(x) $\n"
            "                                ^");
}

}  // namespace
}  // namespace ff
