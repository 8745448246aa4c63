"""lower-graph with layers: Convolution, MatMul and MaxPool as DPU tasks, end to end.

Every numeric test compiles a graph module with the `vpuc compile` pipeline,
simulates the blob's program and compares with the graph reference executor
(``run_graph``).  The DPU accumulates, adds the bias and applies the activation
in f32 and rounds once; the reference rounds after every op, so float results
agree within a couple of f16 ulps (``assert_close``); max-pools are exact.
"""

from __future__ import annotations

from vpuc.cost import MODE_NAMES

import numpy as np
import pytest

import vpuc.fusion.lower_dpu as lower_dpu
from tests.fusion.dpu_testlib import assert_close, compile_text, constant, module, run_both
from vpuc.fusion.lower_dpu_support import DPU_ACTIVATIONS, eltwise_anchor
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.fusion.targets.shave import DPU_POST_OPS
from vpuc.fusion.tokenizer import Reason
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DpuOp, PostOpKind
from vpuc.vir.parser import parse_text


def tasks(mod, executor: str):
    return [t for tl in mod.task_lists if tl.executor.name == executor for t in tl.tasks]


def check(text: str, ulps: float = 2.0, seed: int = 0, cmx_budget: int | None = None):
    graph, mod, ctx = compile_text(text, cmx_budget=cmx_budget)
    result, pairs = run_both(graph, ctx.artifacts["program"], seed)
    for got, expected in pairs:
        if got.dtype.kind in "iu":
            assert np.array_equal(got, expected)
        else:
            assert_close(got, expected, ulps)
    return mod, result


def conv_graph(x, oc, kernel, attrs="", order="NCHW", post="", elem="f16", bias_first=False):
    n, c, h, w = x
    body = f"  %x = Parameter() : {n}x{c}x{h}x{w}x{elem} {order}\n"
    body += constant("w", (oc, c) + kernel, 1, elem) + constant("bias", (1, oc, 1, 1), 2, elem)
    body += f"  %conv = Convolution{attrs}(%x, %w)\n"
    body += "  %b = Add(%bias, %conv)\n" if bias_first else "  %b = Add(%conv, %bias)\n"
    last = "b"
    if post:
        body += f"  %p = {post}(%b)\n"
        last = "p"
    return module(body + f"  Result(%{last})\n")


# ------------------------------------------------------------------ the example

def test_example_graph_conv():
    text = open("examples/graph_conv.vir").read()
    mod, result = check(text)
    dpu = _after_permutes(tasks(mod, "DPU"))
    # blocks of rows alternating over the tiles (the count the cost model's pipeline
    # estimate finds fastest, tests/cost/test_lowering_asks_the_cost_model.py, counting the
    # fused epilogue's ACT SHAVE time per block: fuse_epilogue.with_epilogue), each after the
    # NCE permute that lays its NCHW rows out NHWC (lower_dpu_permute)
    assert len(dpu) >= 2 and [t.tile for t in dpu] == [k % 2 for k in range(len(dpu))]
    assert all(t.op is DpuOp.CONV for t in dpu)
    # each block pads only at the image border; bias and relu are the task's post-ops
    assert [t.pad for t in dpu] == ([(1, 0, 1, 1)] + [(0, 0, 1, 1)] * (len(dpu) - 2)
                                    + [(0, 1, 1, 1)])
    assert all(t.bias is not None and t.post.kind is PostOpKind.RELU for t in dpu)
    # the cost model splits each task's rows into variants and picks their modes
    for t in dpu:
        assert t.variants[0].start[1] == 0 and all(v.mode in MODE_NAMES for v in t.variants)
        assert all(a.end[1] + 1 == b.start[1] for a, b in zip(t.variants, t.variants[1:]))
    generated = [k for k in mod.kernels if str(k.source) == "generated"]
    # the subgraph runs on the convolution's output blocks in CMX (fuse_epilogue), each
    # block's rows halved over the tile's ACT SHAVEs: one kernel per half-block height
    assert generated and all(k.name.startswith("main.sg0") for k in generated)
    assert result.cycles < 200_000


def _after_permutes(dpu: list) -> list:
    """The DPU tasks other than NCE permutes, checking that each permute is followed on its
    tile by the layer task that reads what it wrote (an NCHW input's block, lower_dpu_permute)."""
    layer = []
    for i, t in enumerate(dpu):
        if t.op is DpuOp.PERMUTE:
            reader = next(u for u in dpu[i + 1:] if u.tile == t.tile)
            assert reader.op is not DpuOp.PERMUTE and t.output in reader.inputs
        else:
            layer.append(t)
    return layer


# ------------------------------------------------------------------ convolution

CONVS = {
    "stride2_pad1_relu": conv_graph((1, 16, 15, 13), 32, (3, 3),
                                    "{strides = [2, 2], pads_begin = [1, 1], pads_end = [1, 1]}",
                                    post="Relu"),
    "1x1_odd_channels_sigmoid": conv_graph((1, 5, 7, 9), 7, (1, 1), post="Sigmoid"),
    "3x3_nhwc_batch2_clamp": conv_graph((2, 3, 10, 8), 20, (3, 3), order="NHWC",
                                        post="Clamp{min = -0.5, max = 0.75}"),
    "dilated_asymmetric_tanh": conv_graph((1, 4, 12, 12), 8, (3, 3),
                                          "{dilations = [2, 2], pads_begin = [2, 1], "
                                          "pads_end = [0, 2]}", post="Tanh"),
    "5x3_stride2x1_bias_only": conv_graph((1, 6, 11, 10), 9, (5, 3),
                                          "{strides = [2, 1], pads_begin = [0, 1], "
                                          "pads_end = [2, 0]}"),
    "bf16_bias_first": conv_graph((1, 8, 8, 8), 16, (3, 3),
                                  "{pads_begin = [1, 1], pads_end = [1, 1]}", elem="bf16",
                                  post="Relu", bias_first=True),
}


@pytest.mark.parametrize("name", CONVS)
def test_convolutions_match_numpy(name):
    mod, _ = check(CONVS[name])
    dpu = _after_permutes(tasks(mod, "DPU"))
    assert dpu and all(t.op is DpuOp.CONV and t.bias is not None for t in dpu)
    assert not tasks(mod, "ACT_SHAVE"), "bias and activation are DPU post-ops, not kernels"


def test_conv_without_post_ops_and_weights_from_an_input():
    body = ("  %x = Parameter() : 1x4x9x9xf16 NCHW\n  %w = Parameter() : 6x4x3x3xf16\n"
            "  %c = Convolution{strides = [2, 2]}(%x, %w)\n  Result(%c)\n")
    mod, _ = check(module(body))
    dpu = tasks(mod, "DPU")
    assert all(t.bias is None and t.post is None for t in dpu)
    # 6 x 4 channels: padded to 16 x 16 in CMX, the real weights permuted into its corner
    views = {v.name: v.base for v in mod.views}
    assert any(t.mode.value == "permute" and views.get(t.src, t.src) == "w" for t in tasks(mod, "DMA"))


# Channels are DPU multiples of 16 (else the layer is padded per block, lower_dpu_channels).
# 20 blocks: 4672 bytes of weights and bias + 2 blocks of 1 row (1536 each) fit 8000, 2 rows
# (2304 each) do not; 10 blocks: 4608 + 2 * 3072 fit 11000, 2 rows (5376 each) do not.
@pytest.mark.parametrize("budget, blocks", [(8000, 20), (11000, 10)])
def test_conv_rows_in_double_buffered_blocks_when_cmx_is_short(budget, blocks):
    text = conv_graph((1, 16, 20, 12), 16, (3, 3), "{pads_begin = [1, 1], pads_end = [1, 1]}",
                      post="Relu") if blocks == 20 else conv_graph(
        (2, 16, 21, 12), 16, (3, 3), "{strides = [2, 2], pads_begin = [1, 1], pads_end = [0, 1]}")
    mod, _ = check(text, cmx_budget=budget)
    # the NCHW input's NCE permute needs its rows staged in CMX, which these budgets do not
    # leave: a permuting DMA lays it out instead (lower_dpu_window.emit_window falls back)
    assert not any(t.op is DpuOp.PERMUTE for t in tasks(mod, "DPU"))
    dpu = tasks(mod, "DPU")
    assert len(dpu) == blocks and {t.tile for t in dpu} == {0, 1}
    # block k reuses the CMX of block k - 4: its DPU task waits for that block's store
    assert any(w.startswith("conv.stored") for w in dpu[4].waits)
    rows = [t.variants[-1].end[1] + 1 for t in dpu]
    assert sum(rows) == (20 if blocks == 20 else 10)          # OH of the stride-2 conv: 10


# ------------------------------------------------------------------ matmul and maxpool

def matmul_graph(a, b, ta=False, tb=False, const_b=True, bias=None, post="", order_a=""):
    body = f"  %a = Parameter() : {'x'.join(map(str, a))}xf16{' ' + order_a if order_a else ''}\n"
    body += constant("b", b, 3) if const_b else \
        f"  %b = Parameter() : {'x'.join(map(str, b))}xf16\n"
    body += (f"  %m = MatMul{{transpose_a = {str(ta).lower()}, transpose_b = {str(tb).lower()}}}"
             "(%a, %b)\n")
    last = "m"
    if bias:
        body += constant("bias", bias, 4) + "  %bb = Add(%m, %bias)\n"
        last = "bb"
    if post:
        body += f"  %p = {post}(%{last})\n"
        last = "p"
    return module(body + f"  Result(%{last})\n")


MATMULS = {
    "2d_const_bias_relu": (matmul_graph((20, 24), (24, 12), bias=(1, 12), post="Relu"), 2),
    "transpose_b_bias_clamp": (matmul_graph((20, 24), (12, 24), tb=True, bias=(12,),
                                            post="Clamp{min = -1, max = 1}"), 2),
    "transpose_a": (matmul_graph((24, 20), (24, 12), ta=True), 2),
    "transpose_a_square_activation": (matmul_graph((16, 16), (16, 16), ta=True, const_b=False), 2),
    "activation_b": (matmul_graph((20, 24), (24, 12), const_b=False), 2),
    "activation_b_square": (matmul_graph((12, 24), (24, 24), const_b=False), 2),
    "activation_b_transposed_square": (matmul_graph((12, 24), (24, 24), tb=True,
                                                    const_b=False), 2),
    "batched_a": (matmul_graph((2, 3, 8, 16), (16, 8)), 6),
    "broadcast_batches": (matmul_graph((2, 1, 8, 16), (3, 16, 8), const_b=False), 6),
    "batched_both": (matmul_graph((3, 8, 16), (3, 8, 16), tb=True, const_b=False), 3),
    "cn_input": (matmul_graph((20, 24), (24, 12), order_a="CN"), 2),
}


@pytest.mark.parametrize("name", MATMULS)
def test_matmuls_match_numpy(name):
    text, count = MATMULS[name]
    mod, _ = check(text)
    dpu = tasks(mod, "DPU")
    assert len(dpu) == count and all(t.op is DpuOp.MATMUL for t in dpu)


def test_matmul_rows_in_blocks():
    """K = 24 and N = 12 are padded to 32 and 16 in CMX (the DPU's channel multiple): the
    weights and bias take 16 * (32 * 2 + 4) = 1088 bytes, a row of input and output 96, so
    two blocks fit 2048 bytes with at most 5 rows: 40 rows in 8 blocks."""
    mod, _ = check(matmul_graph((40, 24), (24, 12), bias=(1, 12), post="Relu"), cmx_budget=2048)
    assert len(tasks(mod, "DPU")) == 8


@pytest.mark.parametrize("shape, attrs, elem, order", [
    ((1, 16, 16, 16), "{kernel = [2, 2], strides = [2, 2]}", "f16", "NCHW"),
    ((1, 5, 9, 11), "{kernel = [3, 3], pads_begin = [1, 1], pads_end = [1, 1]}", "f16", "NHWC"),
    ((1, 4, 8, 8), "{kernel = [3, 2], strides = [2, 1], pads_begin = [1, 0], pads_end = [1, 1]}",
     "i8", "NCHW"),
    ((2, 4, 8, 8), "{kernel = [2, 2], strides = [2, 2]}", "u8", "NCHW"),
])
def test_maxpools_are_exact(shape, attrs, elem, order):
    dims = "x".join(map(str, shape))
    mod, _ = check(module(f"  %x = Parameter() : {dims}x{elem} {order}\n"
                          f"  %p = MaxPool{attrs}(%x)\n  Result(%p)\n"))
    assert all(t.op is DpuOp.MAXPOOL for t in _after_permutes(tasks(mod, "DPU")))


# ------------------------------------------------------------------ mixed pipelines

MIXED = module("  %x = Parameter() : 1x8x12x12xf16 NCHW\n"
               + constant("w", (16, 8, 3, 3), 1) + constant("bias", (1, 16, 1, 1), 2)
               + constant("w2", (16, 16, 1, 1), 5) + constant("k", (12, 6), 7) + """\
  %half = Constant(0.5) : f16
  %s = Multiply(%x, %half)
  %t = Tanh(%s)
  %conv = Convolution{pads_begin = [1, 1], pads_end = [1, 1]}(%t, %w)
  %b = Add(%conv, %bias)
  %r = Relu(%b)
  %e = Sigmoid(%r)
  %conv2 = Convolution(%e, %w2)
  %sum = Add(%conv2, %e)
  %mm = MatMul(%sum, %k)
  %cl = Clamp{min = -2, max = 2}(%mm)
  %pool = MaxPool{kernel = [2, 2], strides = [2, 2]}(%r)
  %y = Multiply(%pool, %half)
  Result(%cl)
  Result(%y)
  Result(%r)
""")


def test_mixed_pipeline_orders_segments_through_ddr():
    mod, _ = check(MIXED, ulps=3)
    kinds = {b.name: str(b.kind) for b in mod.buffers}
    # values between segments are DDR tensors, or whole tensors in CMX between DPU layers and
    # ACT segments (resident.py: %t, %e); %r (relu as a post-op) is also an output
    assert kinds["r"] == "output" and kinds["t"] == "cmx" and kinds["e"] == "cmx"
    assert "conv" not in kinds and "b" not in kinds           # folded into the DPU task
    dpu = _after_permutes(tasks(mod, "DPU"))
    layers = {}
    for t in dpu:
        layers.setdefault(t.label.split(".")[0], []).append(t.op)
    # in condensed order; the 1x16 batch of 12x12 @ 12x6 matmuls is one task per batch item;
    # %sum adds two activations of one shape, one from the DPU: a DPU eltwise add, run on
    # conv2's output blocks in CMX after each block's convolution (fuse_epilogue)
    assert layers == {"conv": [DpuOp.CONV] * 2, "conv2": [DpuOp.CONV, DpuOp.ADD] * 2,
                      "mm": [DpuOp.MATMUL] * 16, "pool": [DpuOp.MAXPOOL] * 2}
    dma = {t.label: t for t in tasks(mod, "DMA")}
    finished = [label for label, t in dma.items() if any(u.endswith("finished") for u in t.updates)]
    # 7 segments (sg0 conv sg1 conv2+sum mm pool sg2); a gate no segment waits on any more
    # (each waits on the one two back when both fit CMX: schedule_deps) is dropped
    assert 0 < len(finished) <= 6
    for label in finished:
        barrier = next(u for u in dma[label].updates if u.endswith("finished"))
        assert any(barrier in t.waits for t in tasks(mod, "DMA"))
    # each load of a computed value waits for a store that wrote it (schedule_deps), or for
    # its slot (``done``)
    symbols = SymbolTable(mod)
    dma = tasks(mod, "DMA")
    kept = {"t", "e"}
    loads = 0
    for t in dma:
        src, dst = symbols.region(t.src), symbols.region(t.dst)
        if not (src.kind is BufferKind.DDR or src.root.name in kept) \
                or dst.kind is not BufferKind.CMX or dst.root.name in kept:
            continue
        loads += 1
        stored = {u for w in dma if symbols.region(w.dst).root is src.root for u in w.updates}
        assert stored & set(t.waits) or any(".done" in w for w in t.waits), t.label
    assert loads >= 6              # 7 segments: sg0 conv sg1 conv2+sum mm pool sg2


# ------------------------------------------------------------------ marking and post-ops

def test_marked_activations_are_exactly_the_dpu_post_ops():
    assert DPU_POST_OPS.activations == frozenset(DPU_ACTIVATIONS)
    assert set(DPU_ACTIVATIONS.values()) <= set(PostOpKind)


@pytest.mark.parametrize("x, elem", [("1x8x8x8", "f32"), ("1x8x?<=8x8", "f16")])
def test_no_post_ops_marked_behind_a_layer_the_dpu_cannot_run(x, elem):
    graph = parse_text(module(f"  %x = Parameter() : {x}x{elem}\n"
                              f"  %w = Constant(splat 0.5) : 8x8x1x1x{elem}\n"
                              f"  %bias = Constant(splat 1) : 1x8x1x1x{elem}\n"
                              "  %c = Convolution(%x, %w)\n  %b = Add(%c, %bias)\n"
                              "  %r = Relu(%b)\n  Result(%r)\n"), "<t>").graphs[0]
    tok = tokenize(graph, get_target("shave"))
    assert not any(d.reason is Reason.SKIPPED_BY_PLUGIN for d in tok.left_out.values())
    assert [[graph.ops[i].result for i in sub.ops] for sub in tok.subgraphs] == [["b", "r"]]


def test_every_marked_op_is_folded_into_its_layer():
    graph = parse_text(MIXED, "<t>").graphs[0]
    tok = tokenize(graph, get_target("shave"))
    marked = {graph.ops[i].result for i, d in tok.left_out.items()
              if d.reason is Reason.SKIPPED_BY_PLUGIN}
    index = graph.index()
    folded, eltwise = set(), set()
    for op in graph.ops:
        if op.kind in ("Convolution", "MatMul", "MaxPool") or eltwise_anchor(op):
            folded |= {link.result for link in lower_dpu.dpu_layer(graph, index, op).chain}
        if eltwise_anchor(op):
            eltwise.add(op.result)
    assert marked == folded | eltwise and folded == {"b", "r", "cl"} and eltwise == {"sum"}
