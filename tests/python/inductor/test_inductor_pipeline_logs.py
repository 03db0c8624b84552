"""The compile pipeline's log artifacts (inductor/pipeline.h): `passes` names every pass with its
time, `pass_ir` prints the IR after the passes config `print_ir_after` names (every pass when empty)."""
import logging
import re

import pytest
import torch

import framefuse
from framefuse import _C
from framefuse.graph import Graph
from framefuse.inductor import compile_graph

pytestmark = pytest.mark.skipif(not _C.inductor.codegen_available(), reason="built without LLVM")


@pytest.fixture(autouse=True)
def _fresh():
    _C.inductor.clear_memory_cache()  # a cached program runs no passes
    yield
    framefuse.set_logs("")


def _softmax_graph():
    g = Graph()
    x = g.placeholder("x", torch.randn(8, 32))
    g.output((g.call(torch.softmax, x, -1),))
    return g


def _messages(caplog, artifact):
    return [r.getMessage() for r in caplog.records if r.name.endswith("." + artifact)]


def test_passes_lists_every_cpu_pass_in_order(caplog):
    framefuse.set_logs("passes")
    with caplog.at_level(logging.DEBUG, logger="framefuse"):
        fn = compile_graph(_softmax_graph())
    names = [re.sub(r"^\[[^\]]*\] ", "", m).split(":")[0] for m in _messages(caplog, "passes")]
    assert names[:13] == ["fold_constants", "fuse_attention", "attention_masks", "eliminate_common_subexpressions",
                          "eliminate_dead_code",
                          "functionalize", "lower_graph", "fuse_kernels", "eliminate_dead_stores", "plan_memory",
                          "reuse_reduced_values", "write_epilogues_in_place", "collapse_outer_loops"]
    x = torch.randn(8, 32)
    torch.testing.assert_close(fn(x)[0], torch.softmax(x, -1))


def test_pass_ir_prints_the_named_passes_only(caplog):
    framefuse.set_logs("pass_ir")
    with framefuse.config.patch(print_ir_after="fuse_kernels, collapse_outer_loops"), \
         caplog.at_level(logging.DEBUG, logger="framefuse"):
        compile_graph(_softmax_graph())
    heads = [re.sub(r"^\[[^\]]*\] ", "", m).split("\n")[0] for m in _messages(caplog, "pass_ir")]
    assert heads == ["loop IR after fuse_kernels:", "loop IR after collapse_outer_loops:"]
