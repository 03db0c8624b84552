// The open registry without torch: ATen schema text -> OpDefs, run-time registration, and graph
// code of a registered op read back.
#include <gtest/gtest.h>

#include "graph/aten_schema.h"
#include "graph/parser.h"
#include "graph/printer.h"

namespace ff {
namespace {

AtenSchema parse(const char* text) {
  AtenSchema s;
  std::string error;
  EXPECT_TRUE(parse_aten_schema(text, &s, &error)) << text << ": " << error;
  return s;
}

std::vector<OpDef> defs(const char* target, PrintStyle style, std::vector<const char*> schemas,
                        std::vector<std::string>* skipped = nullptr) {
  OpenOpSpec spec;
  spec.target = target;
  spec.style = style;
  for (const char* s : schemas) spec.overloads.push_back(parse(s));
  std::vector<std::string> ignored;
  return open_op_defs(spec, skipped ? skipped : &ignored);
}

TEST(AtenSchema, ReadsArgumentsAliasAnnotationsAndReturns) {
  AtenSchema s = parse(
      "aten::sort.values_stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False, "
      "Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)");
  EXPECT_EQ(s.name, "sort");
  EXPECT_EQ(s.overload, "values_stable");
  ASSERT_EQ(s.args.size(), 6u);
  EXPECT_EQ(s.args[1].type, "bool?");
  EXPECT_TRUE(s.args[1].kwarg_only);
  EXPECT_EQ(s.args[2].default_text, "-1");
  EXPECT_EQ(s.args[4].alias, "a");
  EXPECT_TRUE(s.args[4].write);
  EXPECT_TRUE(s.is_out_overload());
  ASSERT_EQ(s.returns.size(), 2u);
  EXPECT_EQ(s.returns[1].name, "indices");

  AtenSchema split = parse("aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]");
  EXPECT_EQ(split.args[0].alias, "a");
  EXPECT_FALSE(split.args[0].write);
  EXPECT_EQ(split.returns[0].type, "Tensor[]");

  AtenSchema none = parse("aten::_foreach_add_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()");
  EXPECT_TRUE(none.returns.empty());
  EXPECT_EQ(none.args[0].type, "Tensor[]");

  AtenSchema s2;
  std::string error;
  EXPECT_FALSE(parse_aten_schema("add(int a, int b) -> int", &s2, &error));
  EXPECT_EQ(error, "no namespace");
}

TEST(AtenSchema, LibraryOperatorsKeepTheirNamespace) {
  // torch.library.custom_op("mylib::scale_add", mutates_args=()) and the like.
  AtenSchema s = parse("mylib::scale_add(Tensor x, Tensor y, float alpha) -> Tensor");
  EXPECT_EQ(s.ns, "mylib");
  EXPECT_EQ(s.name, "scale_add");
  EXPECT_EQ(parse("aten::sin(Tensor self) -> Tensor").ns, "aten");
  OpenOpSpec spec;
  spec.target = "torch.ops.mylib.dropout";
  spec.schema_names = true;
  spec.overloads.push_back(parse("mylib::dropout(Tensor x, float p) -> Tensor"));
  std::vector<std::string> skipped;
  auto d = open_op_defs(spec, &skipped);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].aten, "mylib::dropout");
  EXPECT_EQ(d[0].schema.str(), "dropout(Tensor x, float p)");
  EXPECT_FALSE(d[0].has(kRandom));  // ATen's dropout draws from the RNG; a library's op says so by its tag

  spec.overloads = {parse("mylib::inc_(Tensor(a0!) x) -> ()")};
  EXPECT_TRUE(open_op_defs(spec, &skipped).empty());
  EXPECT_EQ(skipped.back(), "mylib::inc_: it writes its argument 'x', which it does not return");
}

TEST(AtenSchema, OverloadsBecomePythonSignatures) {
  auto d = defs("torch.sort", PrintStyle::Function,
                {"aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
                 "aten::sort.values(Tensor self, int dim=-1, bool descending=False, *, Tensor(a!) values, Tensor(b!) indices) "
                 "-> (Tensor(a!) values, Tensor(b!) indices)",
                 "aten::sort.int(int[](a!) self, bool reverse=False) -> ()",
                 "aten::sort.dimname(Tensor self, Dimname dim, bool descending=False) -> (Tensor values, Tensor indices)"});
  ASSERT_EQ(d.size(), 1u);  // the list sort and the Dimname overload cannot be expressed
  EXPECT_EQ(d[0].name, "torch.sort");
  EXPECT_EQ(d[0].aten, "aten::sort");
  // self is `input` in torch.* functions; the out overload adds `out`.
  EXPECT_EQ(d[0].schema.str(), "sort(Tensor input, int dim=<default>, bool descending=<default>, *, Any? out=<default>)");
  EXPECT_EQ(d[0].schema.params[1].default_value, Value::of_int(-1));
  EXPECT_EQ(d[0].schema.params[2].default_value, Value::of_bool(false));
  EXPECT_EQ(d[0].traits, 0u);
}

TEST(AtenSchema, TraitsComeFromAliasAnnotations) {
  auto view = defs("torch.Tensor.diagonal", PrintStyle::Method,
                   {"aten::diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"});
  ASSERT_EQ(view.size(), 1u);
  EXPECT_TRUE(view[0].has(kView));
  EXPECT_EQ(view[0].schema.params[0].name, "self");

  auto inplace = defs("torch.Tensor.sin_", PrintStyle::Method, {"aten::sin_(Tensor(a!) self) -> Tensor(a!)"});
  ASSERT_EQ(inplace.size(), 1u);
  EXPECT_TRUE(inplace[0].has(kInplace));

  std::vector<std::string> skipped;
  auto foreach = defs("torch._foreach_add_", PrintStyle::Function,
                      {"aten::_foreach_add_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()"}, &skipped);
  EXPECT_TRUE(foreach.empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("writes its argument 'self'"), std::string::npos) << skipped[0];

  auto random = defs("torch.bernoulli", PrintStyle::Function,
                     {"aten::bernoulli(Tensor self, *, Generator? generator=None) -> Tensor"});
  ASSERT_EQ(random.size(), 1u);
  EXPECT_TRUE(random[0].has(kRandom));
  auto seeded = defs("torch.rand_like", PrintStyle::Function,
                     {"aten::rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
                      "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"});
  ASSERT_EQ(seeded.size(), 1u);
  EXPECT_TRUE(seeded[0].has(kRandom));
  EXPECT_GE(seeded[0].schema.index_of("requires_grad"), 0);  // Python's factory keyword
}

TEST(AtenSchema, MethodsTakeTheirTensorFirst) {
  auto d = defs("torch.Tensor.polygamma", PrintStyle::Method, {"aten::polygamma(int n, Tensor self) -> Tensor"});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].schema.str(), "polygamma(Tensor self, int n)");
}

TEST(AtenSchema, TensorOverloadsBindBeforeScalarOnes) {
  auto d = defs("torch.float_power", PrintStyle::Function,
                {"aten::float_power.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
                 "aten::float_power.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor"});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].aten, "aten::float_power.Tensor_Tensor");
}

TEST(OpenRegistry, RegisteredOpsPrintAndParseBack) {
  std::vector<OpId> ids;
  for (OpDef& d : defs("torch.resolve_neg", PrintStyle::Function, {"aten::resolve_neg(Tensor(a) self) -> Tensor(a)"}))
    ids.push_back(register_op(std::move(d)));
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_TRUE(is_op(ids[0]));
  EXPECT_GE(static_cast<size_t>(ids[0]), all_ops().size());  // after the hand-written ops
  EXPECT_EQ(op_def(ids[0]).target, "torch.resolve_neg");
  EXPECT_EQ(ops_with_target("torch.resolve_neg"), ids);
  EXPECT_EQ(op_with_positional(ids[0], 1), op_with_positional(ids[0], 1));
  EXPECT_THROW(register_op(op_def(ids[0])), InternalError);  // names are unique
  const char* text =
      "def forward(self, x: \"f32[4]\"):\n"
      "    resolve_neg: \"f32[4]\" = torch.resolve_neg(x)\n"
      "    return (resolve_neg,)\n";
  Graph g = parse_graph(text);
  // The node holds the variant replaying one positional argument, as written.
  const OpDef& replayed = op_def(g.node(1).op);
  EXPECT_EQ(replayed.name, "torch.resolve_neg/1");
  EXPECT_EQ(replayed.positional, 1);
  EXPECT_EQ(op_with_positional(ids[0], 1), g.node(1).op);  // registered once
  EXPECT_EQ(graph_code(g), text);
}

}  // namespace
}  // namespace ff
