"""lower-graph with data-movement ops: Reshape, Transpose, Concat, Slice, Gather, Pad,
DepthToSpace and SpaceToDepth as DMA segments, end to end.

Each case compiles a graph module with the `vpuc compile` pipeline, simulates the
program and compares with the graph reference executor (``run_graph``).  DMA
moves bytes without arithmetic, so the results are bit-exact; an Exp after the
op checks that the DDR tensor a DMA segment writes is what the next segment
reads.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fusion.dpu_testlib import compile_text, module, run_both
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.fusion.lower_dma_plan import runs


def check(body: str):
    graph, mod, ctx = compile_text(module(body))
    result, pairs = run_both(graph, ctx.artifacts["program"])
    for got, expected in pairs:
        assert got.shape == expected.shape
        assert np.array_equal(got, expected)
    return mod, result


def dma_tasks(mod):
    return [t for tl in mod.task_lists if tl.executor.name == "DMA" for t in tl.tasks]


CASES = {
    "reshape": ("1x4x6x8xf16 NCHW", "Reshape{shape = [1, 24, 8]}(%x)"),
    "reshape_flatten": ("2x3x5xf32", "Reshape{shape = [30]}(%x)"),
    "transpose_nhwc": ("1x4x6x8xf16 NCHW", "Transpose{order = [0, 2, 3, 1]}(%x)"),
    "transpose_heads": ("1x6x3x8xf16", "Transpose{order = [0, 2, 1, 3]}(%x)"),
    "transpose_square": ("1x8x8xf16", "Transpose{order = [0, 2, 1]}(%x)"),
    "transpose_identity": ("2x3xf16", "Transpose{order = [0, 1]}(%x)"),
    "transpose_big": ("1x64x32x48xf16", "Transpose{order = [0, 3, 1, 2]}(%x)"),
    "slice": ("1x8x10x12xf16", "Slice{begin = [0, 1, 2, 0], end = [1, 7, 9, 12], "
              "step = [1, 2, 3, 1]}(%x)"),
    "slice_reversed": ("1x3x5xf16", "Slice{begin = [0, 0, 4], end = [1, 3, -6], "
                       "step = [1, 1, -1]}(%x)"),
    "gather": ("1x6x5xf16", "Gather{axis = 1, indices = [0, 2, 4, 5, 5, -1, 1]}(%x)"),
    "pad": ("1x3x5x6xf16", "Pad{pads_begin = [0, 1, 2, 0], pads_end = [0, 0, 1, 3], "
            "value = 0.5}(%x)"),
    "pad_nothing": ("1x3x4xf16", "Pad{pads_begin = [0, 0, 0], pads_end = [0, 0, 0]}(%x)"),
    "depth_to_space": ("1x8x3x4xf16", "DepthToSpace{block_size = 2}(%x)"),
    "depth_to_space_crd": ("1x18x2x3xf16", "DepthToSpace{block_size = 3, mode = depth_first}(%x)"),
    "space_to_depth": ("1x3x6x4xf16", "SpaceToDepth{block_size = 2}(%x)"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_then_exp(name):
    """The op writes DDR, a fused Exp reads it: both segments and their order."""
    xt, op = CASES[name]
    mod, _ = check(f"  %x = Parameter() : {xt}\n  %y = {op}\n  %e = Exp(%y)\n  Result(%e)\n")
    assert dma_tasks(mod)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_alone(name):
    """Parameter -> op -> Result: one DMA segment between the network's buffers."""
    xt, op = CASES[name]
    mod, _ = check(f"  %x = Parameter() : {xt}\n  %y = {op}\n  Result(%y)\n")
    assert not [tl for tl in mod.task_lists if tl.executor.name != "DMA"]


def test_concat_of_three_with_an_nhwc_operand():
    mod, _ = check("  %a = Parameter() : 1x2x3x4xf16\n"
                   "  %b = Parameter() : 1x5x3x4xf16 NHWC\n"
                   "  %ea = Exp(%a)\n"
                   "  %c = Concat{axis = 1}(%ea, %b, %a)\n"
                   "  Result(%c)\n")
    modes = sorted(t.mode.name for t in dma_tasks(mod) if t.label.startswith("c."))
    assert modes == ["COPY", "COPY", "PERMUTE"]


def test_chain_of_movements_between_layers():
    """Attention's head split: MatMul-free chain Reshape -> Transpose -> Slice -> Concat."""
    check("  %x = Parameter() : 1x6x12xf16\n"
          "  %r = Reshape{shape = [1, 6, 3, 4]}(%x)\n"
          "  %t = Transpose{order = [0, 2, 1, 3]}(%r)\n"
          "  %s = Slice{begin = [0, 1, 0, 0], end = [1, 3, 6, 4], step = [1, 1, 1, 1]}(%t)\n"
          "  %e = Sigmoid(%s)\n"
          "  %c = Concat{axis = 1}(%e, %s)\n"
          "  Result(%c)\n")


def test_large_copies_use_both_channels():
    mod, _ = check("  %x = Parameter() : 1x64x32x48xf16\n"
                   "  %y = Transpose{order = [0, 3, 1, 2]}(%x)\n  Result(%y)\n")
    channels = {t.channel for t in dma_tasks(mod)}
    assert channels == {0, 1}


def test_transpose_of_odd_dims_splits_over_both_channels():
    """A ViT's head split (197 tokens, 3 heads: every dim but the innermost odd): the two
    pieces split the largest axis unevenly (98 and 99 tokens), bit-exact."""
    mod, _ = check("  %x = Parameter() : 1x197x3x8xf16\n"
                   "  %y = Transpose{order = [0, 2, 1, 3]}(%x)\n  Result(%y)\n")
    tasks = [t for t in dma_tasks(mod) if t.mode.value == "permute"]
    assert len(tasks) == 2 and {t.channel for t in tasks} == {0, 1}


def test_integer_pad_and_gather_are_exact():
    check("  %x = Parameter() : 2x5xi16\n"
          "  %p = Pad{pads_begin = [1, 0], pads_end = [0, 2], value = 7.0}(%x)\n"
          "  %g = Gather{axis = 0, indices = [2, 0]}(%p)\n"
          "  Result(%g)\n")


def test_runs_of_indices():
    assert runs([0, 2, 4, 5, 5, 1]) == [((0, 5, 2), 0), ((5, 6, 1), 3), ((5, 6, 1), 4),
                                        ((1, 2, 1), 5)]
    assert runs([3, 2, 1]) == [((3, 4, 1), 0), ((2, 3, 1), 1), ((1, 2, 1), 2)]


def test_reshape_of_a_non_identity_order_is_an_error_at_the_op(tmp_path):
    path = tmp_path / "bad.vir"
    path.write_text(module("  %x = Parameter() : 1x4x2x2xf16 NHWC\n"
                           "  %y = Reshape{shape = [1, 16]}(%x)\n  Result(%y)\n"))
    with pytest.raises(VpucError) as exc:
        compile_text(path.read_text(), str(path))
    assert "Reshape %y of a NHWC tensor" in str(exc.value)
    assert main(["compile", str(path), "-o", str(tmp_path / "bad.blob")]) == 1


def test_golden_case_runs_exactly():
    """tests/golden/fusion/lower_dma.vir (its lowered task list is the golden)."""
    graph, mod, ctx = compile_text(open("tests/golden/fusion/lower_dma.vir").read())
    _, pairs = run_both(graph, ctx.artifacts["program"])
    for got, expected in pairs:
        assert np.array_equal(got, expected)
