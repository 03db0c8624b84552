// Pass tests: before/expected golden text, one file per pass (tests/cpp/golden/<pass>.txt), and
// properties every pass keeps on random graphs. FF_ACCEPT=1 rewrites the expected text.
#include <fstream>

#include "graph/parser.h"
#include "graph/passes/channels_last.h"
#include "graph/passes/attention_masks.h"
#include "graph/passes/eliminate_common_subexpressions.h"
#include "graph/passes/eliminate_dead_code.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/functionalize.h"
#include "graph/passes/fold_conv_batch_norm.h"
#include "graph/passes/fuse_attention.h"
#include "graph/pipeline.h"
#include "graph/verifier.h"
#include "graph_test_util.h"

namespace ff {
namespace {

using namespace ff::testing;
using PassFn = Graph (*)(const Graph&);

Graph run_pipeline_verified(const Graph& g) {
  PipelineOptions options;
  options.verify = true;
  return run_graph_passes(g, options);
}

void run_golden(const std::string& file, PassFn pass) {
  std::vector<GoldenCase> cases = read_golden(file);
  ASSERT_FALSE(cases.empty()) << file;
  for (GoldenCase& c : cases) {
    SCOPED_TRACE(file + ": " + c.intent);
    Graph before = parse_graph(c.before);
    ASSERT_EQ(verify(before), std::vector<std::string>{});
    Graph after = pass(before);
    EXPECT_EQ(verify(after), std::vector<std::string>{});
    std::string got = graph_code(after);
    if (accept_mode()) {
      c.expected = got;
      continue;
    }
    EXPECT_EQ(got, c.expected);
    // Passes reach a fixed point in one run.
    EXPECT_EQ(graph_code(pass(after)), got);
  }
  if (accept_mode()) write_golden(file, cases);
}

TEST(Passes, EliminateDeadCode) { run_golden("eliminate_dead_code.txt", eliminate_dead_code); }
TEST(Passes, EliminateCommonSubexpressions) {
  run_golden("eliminate_common_subexpressions.txt", eliminate_common_subexpressions);
}
TEST(Passes, Functionalize) {
  run_golden("functionalize.txt", [](const Graph& g) { return functionalize(g); });
}
TEST(Passes, FoldConstants) {
  run_golden("fold_constants.txt", [](const Graph& g) { return fold_constants(g); });
}
TEST(Passes, AttentionMasks) { run_golden("attention_masks.txt", attention_masks); }
TEST(Passes, FuseAttention) {
  run_golden("fuse_attention.txt", [](const Graph& g) { return fuse_attention(g, AttentionSupport{true, true}, nullptr); });
}

TEST(Passes, FuseAttentionNeedsSdpaAndTheScaleKeyword) {
  std::vector<GoldenCase> cases = read_golden("fuse_attention.txt");
  ASSERT_GE(cases.size(), 3u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.intent);
    Graph g = parse_graph(c.before);
    std::vector<std::string> fired;
    // Without SDPA (torch 1.13) nothing is rewritten.
    EXPECT_EQ(graph_code(fuse_attention(g, AttentionSupport{false, false}, &fired)), graph_code(g));
    EXPECT_TRUE(fired.empty());
    // Without `scale=` (torch 2.0) only SDPA's default scale 1/sqrt(E) is rewritten.
    Graph no_kw = fuse_attention(g, AttentionSupport{true, false}, &fired);
    EXPECT_EQ(graph_code(no_kw).find("scale="), std::string::npos);
  }
  // The nanoGPT case scales by 1/sqrt(8) (the default); the float-mask case by 1/2 (not).
  std::vector<std::string> fired;
  fuse_attention(parse_graph(cases[0].before), AttentionSupport{true, false}, &fired);
  fuse_attention(parse_graph(cases[1].before), AttentionSupport{true, false}, &fired);
  EXPECT_EQ(fired, std::vector<std::string>{"softmax"});
}

TEST(Passes, ChannelsLast) {
  run_golden("channels_last.txt", [](const Graph& g) {
    std::string why;
    auto cl = to_channels_last(g, &why);
    return cl ? cl->graph : g;
  });
}
TEST(Passes, FoldConvBatchNorm) {
  run_golden("fold_conv_batch_norm.txt", [](const Graph& g) {
    std::string why;
    auto f = fold_conv_batch_norm(g, /*relu_ops=*/true, &why);
    return f ? f->graph : g;
  });
}
TEST(Passes, Pipeline) { run_golden("pipeline.txt", run_pipeline_verified); }

TEST(Passes, FoldConstantsReportsWhichRulesFired) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\"):\n"
      "    add: \"int\" = 2 + 2\n"
      "    view: \"f32[4]\" = x.view([add])\n"
      "    getitem: \"f32[4]\" = [view, x][0]\n"
      "    truediv: \"float\" = 1 / 0\n"
      "    relu: \"f32[4]\" = torch.relu(getitem)\n"
      "    return (relu, truediv)\n");
  std::vector<std::string> fired;
  Graph folded = fold_constants(g, &fired);
  EXPECT_EQ(fired, (std::vector<std::string>{"python_scalar_arith: add", "noop_view: view", "getitem_of_constant: getitem"}));
  EXPECT_EQ(graph_code(folded),
            "def forward(self, x: \"f32[4]\"):\n"
            "    truediv: \"float\" = 1 / 0\n"
            "    relu: \"f32[4]\" = torch.relu(x)\n"
            "    return (relu, truediv)\n");
  EXPECT_EQ(fold_rules().size(), 3u);
  EXPECT_TRUE(fold_rules()[0].starts_with("python_scalar_arith: "));
}

// Folding Python scalar arithmetic against Python's own results (golden/python_scalar_arith.txt,
// written by golden/gen_python_scalar_arith.py): a folded value is always Python's value, and
// nothing folds where Python raises or leaves int64. Refusing to fold is allowed, not wrong.
TEST(Passes, FoldConstantsPythonScalarArithMatchesPython) {
  std::ifstream in(golden_path("python_scalar_arith.txt"));
  ASSERT_TRUE(in.good());
  std::string line;
  int cases = 0, folded = 0, computable = 0;
  while (std::getline(in, line)) {
    size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    ASSERT_NE(t2, std::string::npos) << line;
    std::string expr = line.substr(0, t1), type = line.substr(t1 + 1, t2 - t1 - 1), expected = line.substr(t2 + 1);
    ++cases;
    bool raises = type == "raises";
    computable += !raises && !expected.starts_with("<");
    for (std::string annotation : raises ? std::vector<std::string>{"int", "float", "bool"} : std::vector<std::string>{type}) {
      std::string text = "def forward(self):\n    r: \"" + annotation + "\" = " + expr + "\n    return (r,)\n";
      Graph g = parse_graph(text);
      ASSERT_EQ(graph_code(g), text);
      Graph out = fold_constants(g);
      const Value& result = out.output_value().items.at(0);
      if (result.is_node()) continue;  // not folded
      std::string got = value_str(result, out);
      EXPECT_FALSE(raises) << expr << " folded to " << got << ", Python raises";
      EXPECT_EQ(got, expected) << expr;
      ++folded;
    }
  }
  EXPECT_GT(cases, 4000);
  // Refusals are for the corners (results past int64, int / int past 2**53, inf/nan in powers),
  // about a tenth of this table, which leans on such operands on purpose.
  EXPECT_GT(folded, computable * 85 / 100) << folded << " of " << computable;
}

TEST(Passes, PipelinePrintsTheGraphAfterEachPass) {
  Graph g = parse_graph(
      "def forward(self, x: \"f32[4]\"):\n"
      "    add: \"int\" = 1 + 1\n"
      "    mul: \"f32[4]\" = x * add\n"
      "    mul_1: \"f32[4]\" = x * 2\n"
      "    neg: \"f32[4]\" = torch.neg(x)\n"
      "    return (mul, mul_1)\n");
  EXPECT_EQ(graph_pass_trace(g),
            "# input\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    add: \"int\" = 1 + 1\n"
            "    mul: \"f32[4]\" = x * add\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    neg: \"f32[4]\" = torch.neg(x)\n"
            "    return (mul, mul_1)\n"
            "# after fold_constants\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    mul: \"f32[4]\" = x * 2\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    neg: \"f32[4]\" = torch.neg(x)\n"
            "    return (mul, mul_1)\n"
            "# after fuse_attention\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    mul: \"f32[4]\" = x * 2\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    neg: \"f32[4]\" = torch.neg(x)\n"
            "    return (mul, mul_1)\n"
            "# after attention_masks\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    mul: \"f32[4]\" = x * 2\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    neg: \"f32[4]\" = torch.neg(x)\n"
            "    return (mul, mul_1)\n"
            "# after eliminate_common_subexpressions\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    mul: \"f32[4]\" = x * 2\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    neg: \"f32[4]\" = torch.neg(x)\n"
            "    return (mul, mul_1)\n"
            "# after eliminate_dead_code\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    mul: \"f32[4]\" = x * 2\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    return (mul, mul_1)\n"
            "# after functionalize\n"
            "def forward(self, x: \"f32[4]\"):\n"
            "    mul: \"f32[4]\" = x * 2\n"
            "    mul_1: \"f32[4]\" = x * 2\n"
            "    return (mul, mul_1)\n");
  std::vector<std::string> names;
  PipelineOptions options;
  options.after_pass = [&](std::string_view pass, const Graph&) { names.emplace_back(pass); };
  run_graph_passes(g, options);
  EXPECT_EQ(names, (std::vector<std::string>{"fold_constants", "fuse_attention", "attention_masks", "eliminate_common_subexpressions",
                                             "eliminate_dead_code",
                                             "functionalize"}));
}

TEST(Passes, PipelineVerifiesBetweenPasses) {
  Graph bad = parse_graph(
      "def forward(self, x: \"f32[4]\"):\n"
      "    relu: \"f64[4]\" = torch.relu(x)\n"
      "    return (relu,)\n");
  PipelineOptions options;
  options.verify = true;
  try {
    run_graph_passes(bad, options);
    FAIL() << "expected an InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("graph verification failed before the graph passes:\n"
                                         "  meta_matches_rule: 'relu' carries f64[4]; the meta rule gives f32[4]\n"),
              std::string::npos)
        << e.what();
  }
}

// On random graphs every pass keeps the graph valid, never grows it, and keeps the signature.
TEST(Passes, RandomGraphsStayValid) {
  std::mt19937 rng(99);
  const PassFn passes[] = {eliminate_dead_code, eliminate_common_subexpressions,
                           [](const Graph& g) { return fold_constants(g); }, run_pipeline_verified};
  for (int i = 0; i < 200; ++i) {
    Graph g = random_graph(rng);
    for (PassFn pass : passes) {
      Graph out = pass(g);
      ASSERT_EQ(verify(out), std::vector<std::string>{}) << graph_code(g);
      EXPECT_LE(out.size(), g.size());
      EXPECT_EQ(out.placeholders().size(), g.placeholders().size());
      EXPECT_EQ(graph_code(parse_graph(graph_code(out))), graph_code(out));
    }
  }
}

}  // namespace
}  // namespace ff
