// The verifier: well-formed graphs pass; each invariant's violation is reported verbatim.
#include "graph/parser.h"
#include "graph/verifier.h"
#include "graph_test_util.h"

namespace ff {
namespace {

using namespace ff::testing;
using Lines = std::vector<std::string>;

const char* kWellFormed =
    "def forward(self, x: \"f32[4, 8]\", w: \"f32[16, 8]\", t: \"(f32[2], int)\"):\n"
    "    linear: \"f32[4, 16]\" = torch.nn.functional.linear(x, w)\n"
    "    add: \"f32[4, 16]\" = linear + 1.0\n"
    "    relu: \"f32[4, 16]\" = torch.relu(add)\n"
    "    view: \"f32[64]\" = relu.view([64])\n"
    "    getitem: \"f32[2]\" = t[0]\n"
    "    sum_1: \"f32[1, 1]\" = torch.sum(relu, dim=None, keepdim=True)\n"
    "    return (view, getitem, sum_1)\n";

TEST(Verifier, WellFormedGraphsPass) {
  EXPECT_EQ(verify(parse_graph(kWellFormed)), Lines{});
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    Graph g = random_graph(rng);
    EXPECT_EQ(verify(g), Lines{}) << graph_code(g);
  }
}

TEST(Verifier, MetaMustMatchTheRule) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\", i: \"i32[4]\"):\n"
      "    relu: \"f64[4]\" = torch.relu(x)\n"
      "    exp: \"i32[4]\" = torch.exp(i)\n"
      "    view: \"f32[3]\" = x.view([3])\n"
      "    add: \"float\" = 1 + 2\n"  // the rule answers only for tensors: the annotation stands
      "    return (relu, exp, view, add)\n");
  EXPECT_EQ(verify(g), (Lines{
                           "meta_matches_rule: 'relu' carries f64[4]; the meta rule gives f32[4]",
                           "meta_matches_rule: 'exp' carries i32[4]; the meta rule gives f32[4]",
                           "meta_matches_rule: 'view' its meta rule rejects the operands: shape '[3]' is invalid for "
                           "input of size 4",
                       }));
}

TEST(Verifier, RequiresGradMayBeClearedByGradMode) {
  // Captured under torch.no_grad(): results of a parameter carry no requires_grad though the rule,
  // which does not know the mode, gives it. The converse is a violation.
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\", w: \"f32[4] rg\"):\n"
      "    mul: \"f32[4]\" = x * w\n"
      "    relu: \"f32[4] rg\" = torch.relu(x)\n"
      "    return (mul, relu)\n");
  EXPECT_EQ(verify(g), (Lines{"meta_matches_rule: 'relu' carries f32[4] rg; the meta rule gives f32[4]"}));
}

TEST(Verifier, Structure) {
  Graph g = parse_graph(kWellFormed);
  // An operand that comes later, one that does not exist, and a second Output.
  g.mutable_node(4).args[0] = N(5);   // add uses relu
  g.mutable_node(5).args[0] = N(99);  // relu uses a node that does not exist
  Graph h = parse_graph(kWellFormed);
  h.mutable_node(3).kind = NodeKind::Output;  // linear
  h.mutable_node(3).op = kNoOp;
  h.mutable_node(3).args = {N(0)};
  EXPECT_EQ(verify(g), (Lines{
                           "operands_defined_before_use: 'add' uses 'relu', which comes later",
                           "operands_defined_before_use: 'relu' uses node #99, which does not exist",
                       }));
  EXPECT_EQ(verify(h), (Lines{
                           "one_output_last: 'linear' is an Output that is not the last node",
                           "one_output_last: the graph has 2 Output nodes",
                           "operands_defined_before_use: 'add' uses the Output node",
                       }));
}

TEST(Verifier, PlaceholdersFirstAndOutputPresent) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\"):\n"
      "    relu: \"f32[4]\" = torch.relu(x)\n");
  std::swap(g.mutable_node(0), g.mutable_node(1));
  g.mutable_node(0).args[0] = N(0);
  EXPECT_EQ(verify(g), (Lines{
                           "placeholders_first: 'x' is a placeholder after the first non-placeholder node",
                           "one_output_last: the graph has no Output node",
                           "operands_defined_before_use: 'relu' uses 'relu', which comes later",
                       }));
}

TEST(Verifier, CallsMatchTheirSchema) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4, 6]\"):\n"
      "    relu: \"f32[4, 6]\" = torch.relu(x)\n"
      "    sum_1: \"f32[6]\" = torch.sum(x, [0])\n"
      "    layer_norm: \"f32[4, 6]\" = torch.nn.functional.layer_norm(x, [6])\n"
      "    neg: \"f32[4, 6]\" = torch.neg(x)\n"
      "    return (relu, sum_1, layer_norm, neg)\n");
  g.mutable_node(1).args.push_back(I(1));                // too many arguments
  g.mutable_node(2).args[2] = I(1);                      // keepdim must be a bool
  g.mutable_node(3).args[4] = I(1);                      // eps: 1 where bind_call gives 1.0
  g.mutable_node(4).op = 12345;                          // not a registered op
  EXPECT_EQ(verify(g), (Lines{
                           "call_matches_schema: 'relu' has 2 arguments; relu takes 1",
                           "call_matches_schema: 'sum_1' sum(): argument 'keepdim' must be a bool",
                           "call_matches_schema: 'layer_norm' holds argument 'eps' as 1; bind_call gives 1.0",
                           "call_matches_schema: 'neg' calls op #12345, which is not registered",
                       }));
}

TEST(Verifier, GetItems) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\", t: \"(f32[2], int)\"):\n"
      "    getitem: \"f32[2]\" = t[0]\n"
      "    getitem_1: \"int\" = t[1]\n"
      "    getitem_2: \"f32[]\" = x[0]\n"
      "    getitem_3: \"float\" = t[1]\n"
      "    return (getitem, getitem_1, getitem_2, getitem_3)\n");
  EXPECT_EQ(verify(g), Lines{"getitem_on_tuple: 'getitem_3' carries float; element 1 of 't' is int"});
  g.mutable_node(2).args[1] = I(2);  // out of range
  g.mutable_node(3).args[0] = N(0);  // getitem_1: x is not a tuple
  g.mutable_node(4).args[0] = N(1);  // getitem_2: operator.getitem of a tuple with an int

  EXPECT_EQ(verify(g), (Lines{
                           "getitem_on_tuple: 'getitem' takes element 2 of 't', a tuple of 2",
                           "getitem_on_tuple: 'getitem_1' takes an element of 'x', which produces f32[4], not a tuple",
                           "getitem_on_tuple: 'getitem_3' carries float; element 1 of 't' is int",
                           "tuple_subscript_is_getitem: 'getitem_2' subscripts tuple-producing 't' with an int; use a "
                           "GetItem node",
                       }));
}

TEST(Verifier, Names) {
  Graph g = parse_graph(kWellFormed);
  g.mutable_node(4).name = "linear";
  g.mutable_node(5).name = "sum";
  g.mutable_node(6).name = "2x";
  EXPECT_EQ(verify(g), (Lines{
                           "unique_names: 'linear' names two nodes",
                           "unique_names: 'sum' is a reserved name",
                           "unique_names: '2x' is not a Python identifier",
                       }));
}

TEST(Verifier, VerifyOrThrowShowsTheGraph) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\"):\n"
      "    relu: \"f64[4]\" = torch.relu(x)\n"
      "    return (relu,)\n");
  try {
    verify_or_throw(g, "after cse");
    FAIL() << "expected an InternalError";
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_TRUE(what.starts_with("framefuse internal error at graph/verifier.cpp:")) << what;
    EXPECT_TRUE(what.ends_with(
        ": graph verification failed after cse:\n"
        "  meta_matches_rule: 'relu' carries f64[4]; the meta rule gives f32[4]\n"
        "def forward(self, x: \"f32[4]\"):\n"
        "    relu: \"f64[4]\" = torch.relu(x)\n"
        "    return (relu,)\n"))
        << what;
  }
  EXPECT_NO_THROW(verify_or_throw(parse_graph(kWellFormed)));
}

}  // namespace
}  // namespace ff
