// The compile pipelines (inductor/pipeline.h): the passes in order, the same loop IR as the
// scheduler's own entry point, and the CUDA pipeline on device-neutral loop IR.
#include <gtest/gtest.h>

#include "graph/parser.h"
#include "inductor/pipeline.h"
#include "inductor/schedule.h"
#include "src/base/errors.h"

namespace ff {
namespace {

std::vector<std::string> passes_of(const std::string& trace) {
  std::vector<std::string> names;
  size_t at = 0;
  while ((at = trace.find("# after ", at)) != std::string::npos) {
    size_t end = trace.find('\n', at);
    names.push_back(trace.substr(at + 8, end - at - 8));
    at = end;
  }
  return names;
}

const char* kSoftmax = R"(def forward(self, x: "f32[8, 32]"):
    softmax: "f32[8, 32]" = torch.softmax(x, -1)
    return (softmax,)
)";

const char* kConv = R"(def forward(self, x: "f32[2, 3, 8, 8]", w: "f32[4, 3, 3, 3]"):
    conv2d: "f32[2, 4, 6, 6]" = torch.nn.functional.conv2d(x, w)
    relu: "f32[2, 4, 6, 6]" = torch.relu(conv2d)
    return (relu,)
)";

// The graph stage of graph/pipeline.h (fuse_attention is off in these options).
const std::vector<std::string> kGraphStage = {"fold_constants", "attention_masks", "eliminate_common_subexpressions",
                                              "eliminate_dead_code",
                                              "functionalize"};

TEST(InductorPipeline, CpuRunsEveryPassInOrder) {
  std::vector<std::string> expected = kGraphStage;
  expected.insert(expected.end(), {"lower_graph", "fuse_kernels", "eliminate_dead_stores", "plan_memory",
                                   "reuse_reduced_values", "write_epilogues_in_place", "collapse_outer_loops"});
  EXPECT_EQ(passes_of(inductor::cpu_pass_trace(parse_graph(kSoftmax), /*channels_last=*/true)), expected);
}

TEST(InductorPipeline, CpuRewritesConvolutionsChannelsLastFirst) {
  std::vector<std::string> names = passes_of(inductor::cpu_pass_trace(parse_graph(kConv), /*channels_last=*/true));
  const size_t n = kGraphStage.size();
  ASSERT_GT(names.size(), n + 1);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(n)), kGraphStage);
  EXPECT_EQ(names[n], "channels_last");
  EXPECT_EQ(names[n + 1], "lower_graph");
  names = passes_of(inductor::cpu_pass_trace(parse_graph(kConv), /*channels_last=*/false));
  ASSERT_GT(names.size(), n);
  EXPECT_EQ(names[n], "lower_graph");
}

TEST(InductorPipeline, CpuLoopIrIsTheSchedulersAfterThePasses) {
  Graph g = parse_graph(kSoftmax);
  inductor::CpuPipelineOptions options;
  options.render = false;
  inductor::CpuCompiled c = inductor::compile_for_cpu(g, options);
  loop::Program scheduled = inductor::compile_to_loop_ir(g);
  EXPECT_EQ(loop::program_str(c.program),
            loop::program_str(inductor::collapse_outer_loops(
                inductor::write_epilogues_in_place(inductor::reuse_reduced_values(scheduled), nullptr), 256)));
}

TEST(InductorPipeline, CudaLowersTheGraphAsItIs) {
  Graph g = parse_graph(kSoftmax);
  inductor::CudaPipelineOptions options;
  options.render = false;
  EXPECT_THROW(inductor::compile_for_cuda(g, options), Unsupported);  // no CUDA tensor
  options.assume_cuda = true;
  inductor::CudaCompiled c = inductor::compile_for_cuda(g, options);
  EXPECT_EQ(c.device, 0);
  EXPECT_EQ(loop::program_str(c.program), loop::program_str(inductor::compile_to_loop_ir(g)));
  EXPECT_FALSE(c.channels_last.has_value());
}

// Two pointwise nests over one input under a short outer loop (a rotary embedding's query and key
// halves): one kernel on CPU, where threads share the outer loop; two on CUDA, whose blocks would
// have had only the 4 iterations of the shared loop.
TEST(InductorPipeline, CudaKeepsShortOuterLoopsApart) {
  Graph g = parse_graph(R"(def forward(self, q: "f32[4, 512, 16, 64]", k: "f32[4, 512, 4, 64]", c: "f32[512, 1, 64]"):
    mul: "f32[4, 512, 16, 64]" = torch.mul(q, c)
    mul_1: "f32[4, 512, 4, 64]" = torch.mul(k, c)
    return (mul, mul_1)
)");
  inductor::CpuPipelineOptions cpu;
  cpu.render = false;
  EXPECT_EQ(inductor::compile_for_cpu(g, cpu).program.kernels.size(), 1u);
  inductor::CudaPipelineOptions cuda;
  cuda.render = false;
  cuda.assume_cuda = true;
  EXPECT_EQ(inductor::compile_for_cuda(g, cuda).program.kernels.size(), 2u);
}

}  // namespace
}  // namespace ff
