// Loop pass tests: graph code in, the loop IR after ONE loop pass out, one golden file per pass
// (tests/cpp/golden/loop_passes/<pass>.txt; format in graph_test_util.h). A case's graph is
// lowered and run through the passes listed before the pass under test (schedule_passes(), then
// cpu_loop_passes(): what the pass sees in a compile), then through the pass. The expected text
// is the program, the memory plan when there is one, and the lines the pass logged.
// FF_ACCEPT=1 rewrites the expected text (review the diff).
#include <algorithm>

#include "graph/parser.h"
#include "graph_test_util.h"
#include "inductor/loop_passes/loop_passes.h"
#include "inductor/loop_passes/plan_memory.h"
#include "inductor/lower.h"

namespace ff {
namespace {

using namespace ff::testing;

constexpr int64_t kMinRootExtent = 256;  // the CPU runtime's

std::vector<inductor::LoopPass> all_passes() {
  std::vector<inductor::LoopPass> passes = inductor::schedule_passes();
  for (auto& p : inductor::cpu_loop_passes(kMinRootExtent)) passes.push_back(p);
  return passes;
}

std::string program_text(const loop::Program& p, const std::vector<std::string>& log) {
  std::string out = loop::program_str(p);
  for (size_t b = 0; b < p.slot.size(); ++b)
    if (p.slot[b] >= 0)
      out += "# buf" + std::to_string(b) + " in slot " + std::to_string(p.slot[b]) + " (" +
             std::to_string(p.slot_bytes[static_cast<size_t>(p.slot[b])]) + " bytes)\n";
  for (const std::string& l : log) out += "# " + l + "\n";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out + "\n";
}

void run_golden(const std::string& pass_name) {
  const std::string file = "loop_passes/" + pass_name + ".txt";
  std::vector<GoldenCase> cases = read_golden(file);
  ASSERT_FALSE(cases.empty()) << file;
  std::vector<inductor::LoopPass> passes = all_passes();
  auto it = std::find_if(passes.begin(), passes.end(), [&](const auto& p) { return p.name == pass_name; });
  ASSERT_NE(it, passes.end()) << "no loop pass " << pass_name;
  std::vector<inductor::LoopPass> before(passes.begin(), it);
  for (GoldenCase& c : cases) {
    SCOPED_TRACE(file + ": " + c.intent);
    Graph g = parse_graph(c.before);
    std::vector<std::string> notes;
    loop::Program input = inductor::run_loop_passes(inductor::lower_graph(g, &notes), before);
    ASSERT_EQ(loop::verify_program(input), "");
    std::vector<std::string> log;
    loop::Program after = it->run(input, &log);
    EXPECT_EQ(loop::verify_program(after), "");
    std::string got = program_text(after, log);
    if (accept_mode()) {
      c.expected = got;
      continue;
    }
    EXPECT_EQ(got, c.expected);
  }
  if (accept_mode()) write_golden(file, cases);
}

TEST(LoopPasses, FuseKernels) { run_golden("fuse_kernels"); }
TEST(LoopPasses, EliminateDeadStores) { run_golden("eliminate_dead_stores"); }
TEST(LoopPasses, PlanMemory) { run_golden("plan_memory"); }
TEST(LoopPasses, ReuseReducedValues) { run_golden("reuse_reduced_values"); }
TEST(LoopPasses, WriteEpiloguesInPlace) { run_golden("write_epilogues_in_place"); }
TEST(LoopPasses, CollapseOuterLoops) { run_golden("collapse_outer_loops"); }

// Every pass has a golden file, and the list is the pipeline's order.
// The lifetimes and the per-step allocations the CUDA runtime follows (plan_memory.h), on a chain
// of kernels that cannot fuse and an extern call in the middle.
TEST(LoopPasses, StepAllocations) {
  Graph g = parse_graph(R"(def forward(self, x: "f32[8, 16]", w: "f32[16, 4]"):
    sum_1: "f32[8, 1]" = torch.sum(x, [-1], True)
    truediv: "f32[8, 16]" = x / sum_1
    mm: "f32[8, 4]" = torch.mm(truediv, w)
    relu: "f32[8, 4]" = torch.relu(mm)
    sum_2: "f32[]" = torch.sum(relu, [0, 1])
    return (sum_2, relu)
)");
  std::vector<std::string> notes;
  loop::Program p = inductor::run_loop_passes(inductor::lower_graph(g, &notes), all_passes());
  inductor::BufferLifetimes life = inductor::buffer_lifetimes(p);
  inductor::StepAllocations plan = inductor::step_allocations(p, life);
  ASSERT_EQ(plan.alloc_at.size(), p.steps.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    SCOPED_TRACE("buf" + std::to_string(b));
    loop::BufferRole role = p.buffers[b].role;
    bool output = std::any_of(p.outputs.begin(), p.outputs.end(), [&](const auto& o) { return o.second.buf == static_cast<int>(b); });
    EXPECT_LE(life.first[b], life.last[b]);
    bool touched = life.first[b] >= 0;  // NB: the row sums' buffer is dead once the kernels fuse
    int allocs = 0, frees = 0;
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (int x : plan.alloc_at[s]) allocs += x == static_cast<int>(b) && static_cast<int>(s) == life.first[b];
      for (int x : plan.free_after[s]) frees += x == static_cast<int>(b) && static_cast<int>(s) == life.last[b];
    }
    bool made = role == loop::BufferRole::Intermediate || role == loop::BufferRole::Output;
    EXPECT_EQ(allocs, touched && made ? 1 : 0);
    EXPECT_EQ(frees, touched && !output && (role == loop::BufferRole::Intermediate || role == loop::BufferRole::ExternResult) ? 1 : 0);
  }
  // the extern's result is read after it is written: its life spans the mm step and the reads after
  bool extern_result = false;
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].role == loop::BufferRole::ExternResult) {
      extern_result = true;
      EXPECT_LT(life.first[b], life.last[b]);
    }
  EXPECT_TRUE(extern_result);
  EXPECT_TRUE(plan.unstored_outputs.empty());
}

TEST(LoopPasses, ListIsThePipelineOrder) {
  std::vector<std::string> names;
  for (const auto& p : all_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"fuse_kernels", "eliminate_dead_stores", "plan_memory",
                                             "reuse_reduced_values", "write_epilogues_in_place", "collapse_outer_loops"}));
  for (const std::string& n : names)
    EXPECT_TRUE(std::filesystem::exists(golden_path("loop_passes/" + n + ".txt"))) << n;
}

}  // namespace
}  // namespace ff
