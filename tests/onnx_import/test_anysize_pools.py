"""Channelwise layers (depthwise convolution, max and average pools) whose one output row of
16 channels does not fit a tile's CMX: the row's columns cut into blocks with their halo
columns (``lower_dpu_nn.emit_jobs``), padding only at the image's left and right border.
Compiled under a reduced budget, simulated, compared with onnxruntime within
``test_lower_dpu_nn.compile_and_compare``'s derived f16 bound (a pool or a depthwise tap sum
is computed as unsplit: the cut moves no arithmetic), and with vpuc's graph reference.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from tests.onnx_import.test_lower_dpu_nn import U, _x, compile_and_compare
from runtime_sim.report import summary_data
from vpuc import api
from vpuc.fusion.blocked_program import sanitize
from vpuc.ir.tasks import DpuOp
from vpuc.fusion.lower_dpu import NHWC
from vpuc.onnx_import.zoo import ModelBuilder

SHAPE = (1, 32, 6, 96)      # a 3x3 window's row of 16 channels: 2 * 2 * 16 * 3 * 96 > 4096 bytes
BUDGET = 4096

CASES = {
    "depthwise": (lambda m: m.node("Conv", [_x(m, SHAPE), m.weight((32, 1, 3, 3)),
                                            m.weight((32,), 0.1)],
                                   kernel_shape=[3, 3], group=32, pads=[1, 1, 1, 1]),
                  DpuOp.DWCONV),
    # 16 channels: one job, its weights resident per tile, blocks of rows x columns
    "depthwise_16": (lambda m: m.node("Conv", [_x(m, (1, 16) + SHAPE[2:]), m.weight((16, 1, 3, 3)),
                                               m.weight((16,), 0.1)],
                                      kernel_shape=[3, 3], group=16, pads=[1, 1, 1, 1]),
                     DpuOp.DWCONV),
    "depthwise_strided_dilated": (lambda m: m.node("Conv", [_x(m, SHAPE), m.weight((32, 1, 3, 3))],
                                                   kernel_shape=[3, 3], group=32, strides=[1, 2],
                                                   dilations=[1, 2], pads=[1, 2, 1, 1]),
                                  DpuOp.DWCONV),
    "maxpool_s2": (lambda m: m.node("MaxPool", [_x(m, SHAPE)], kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1]), DpuOp.MAXPOOL),
    "avgpool_exclude_pad": (lambda m: m.node("AveragePool", [_x(m, SHAPE)], kernel_shape=[3, 3],
                                             pads=[1, 1, 1, 1]), DpuOp.AVGPOOL),
    "avgpool_count_pad": (lambda m: m.node("AveragePool", [_x(m, SHAPE)], kernel_shape=[3, 3],
                                           pads=[1, 1, 1, 1], count_include_pad=1),
                          DpuOp.DWCONV),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_row_too_wide_is_cut_into_column_blocks(case, tmp_path):
    build, dpu_op = CASES[case]
    tasks = compile_and_compare(tmp_path, build, seed=sorted(CASES).index(case),
                                cmx_budget=BUDGET)
    program = api.compile(tmp_path / "m.onnx", cmx_budget=BUDGET)
    shape = (1, 16) + SHAPE[2:] if case == "depthwise_16" else SHAPE
    sim = api.simulate(program, {"x": np.zeros(shape, np.float16)}, timing_only=True)
    summary = summary_data(sim.result.plan, sim.result.timeline, exact=True)
    assert 0 < summary["bound"]["cycles"] <= summary["cycles"]
    assert {t.op for t in tasks} == {dpu_op}
    assert {t.tile for t in tasks} == {0, 1}
    if case == "depthwise_16":         # one job: each tile loads the weights once
        weights = {(t.tile, t.weights) for t in tasks}
        assert len(weights) == 2
    widths = {t.variants[0].end[0] + 1 for t in tasks}
    ow = 48 if case in ("depthwise_strided_dilated", "maxpool_s2") else 96
    assert max(widths) < ow, "blocks of columns, not whole rows"
    # every block's input and output fit the budget twice over (double-buffered)
    assert all(2 * (t_in + t_out) <= BUDGET for t_in, t_out in _block_bytes(tmp_path))


def _block_bytes(tmp_path):
    from vpuc.ir.symbols import SymbolTable
    program = api.compile(tmp_path / "m.onnx", cmx_budget=BUDGET)
    symbols = SymbolTable(program.module)
    for tl in program.module.task_lists:
        if tl.executor.name == "DPU":
            for t in tl.tasks:
                yield (symbols.region(t.inputs[0]).root.type.nbytes,
                       symbols.region(t.output).root.type.nbytes)


# Global pools whose window of 16 channels does not fit even for one output element: two
# levels of pooling (vpuc/fusion/lower_dpu_global_pool.py).  (shape, budget): the 128 x 128
# average pool did not fit NPU37XX's default budget (1048640 bytes over 1048576).
GLOBAL = {
    "gap_exact": ("GlobalAveragePool", (1, 32, 24, 40), 4096),       # 1 x 40 windows: divide
    "gap_ragged": ("GlobalAveragePool", (1, 16, 7, 101), 4096),      # 101 is prime: a dwconv
    "gap_default_budget": ("GlobalAveragePool", (1, 16, 128, 128), None),
    "avgpool_whole": ("AveragePool", (1, 16, 7, 101), 4096),
    "maxpool_whole": ("MaxPool", (1, 16, 7, 101), 4096),
}


def _global_model(tmp_path, kind, shape):
    m = ModelBuilder(seed=0, opset=17)
    x = m.input("x", list(shape))
    attrs = {} if kind.startswith("Global") else {"kernel_shape": list(shape[2:])}
    out = m.node(kind, [x], **attrs)
    m.output(out)
    return m.save(tmp_path / "m.onnx", "m"), out


def _partials(x32, plan):
    """A level's partial results in f32 (before their rounding to f16); ``plan.end``: the
    zero (or never-winning) padding at the bottom and right."""
    (a, b), (pb, pr) = plan.kernel, plan.end
    n, c, h, w = x32.shape
    fill = -np.inf if plan.dpu_op == "maxpool" else 0.0
    padded = np.full((n, c, h + pb, w + pr), fill, np.float32)
    padded[:, :, :h, :w] = x32
    nh, nw = (h + pb) // a, (w + pr) // b
    cells = padded.reshape(n, c, nh, a, nw, b)
    if plan.dpu_op == "maxpool":
        return cells.max(axis=(3, 5))
    if plan.dpu_op == "avgpool":
        return cells.mean(axis=(3, 5))
    weight = np.float32(np.float16(plan.jobs[0].weights.flat[0]))
    return weight * cells.sum(axis=(3, 5))


@pytest.mark.parametrize("case", sorted(GLOBAL))
def test_global_pool_too_large_for_cmx_runs_in_two_levels(case, tmp_path):
    kind, shape, budget = GLOBAL[case]
    path, out = _global_model(tmp_path, kind, shape)
    program = api.compile(path, cmx_budget=budget)
    tasks = [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]
    assert any(".l1." in t.label for t in tasks) and any(".l2." in t.label for t in tasks)
    x = (np.random.default_rng(1).standard_normal(shape) + 0.25).astype(np.float16)
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    summary = summary_data(sim.result.plan, sim.result.timeline, exact=True)
    assert 0 < summary["bound"]["cycles"] <= summary["cycles"]      # no run beats its bound
    got = sim.outputs[sanitize(out)].astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    assert got.shape == want.shape
    if kind == "MaxPool":            # max of maxes of f16 values: exact
        np.testing.assert_array_equal(got, want)
        return
    # Levels through DDR until the last window fits CMX and the NCE's 11 x 11 limit
    # (_levels).  Each level's partials are rounded to f16 once (relative u), a dwconv's
    # weight too (u); its f32 sum of a b taps errs by at most a b 2**-24 of its terms'
    # largest magnitude, times g; a dwconv level weighs the error of its input by its
    # weights' sum g = a b nh nw / (h w) (>= 1: its zero padding), a mean by 1.  The last
    # mean adds 2**-24 cells max|partial| and the result's rounding, u |want|.
    levels = _levels(kind, shape, budget or 1 << 20)
    values, err = x.astype(np.float32), 0.0
    for level in levels:
        (a, b), (h, w) = level.kernel, values.shape[2:]
        partial = _partials(values, level)
        g = a * b * partial.shape[2] * partial.shape[3] / (h * w) if level.dpu_op == "dwconv" \
            else 1.0
        err = err * g + U * (1 + (level.dpu_op == "dwconv")) * np.max(np.abs(partial)) \
            + 2.0 ** -24 * a * b * g * np.max(np.abs(values))
        values = partial
    cells = values.shape[2] * values.shape[3]
    bound = U * np.abs(want) + err + 2.0 ** -24 * cells * np.max(np.abs(values))
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)
    assert levels[0].dpu_op == ("dwconv" if case in ("gap_ragged", "avgpool_whole")
                                else "avgpool")


def _levels(kind, shape, budget):
    """The plans of the levels through DDR ``lower_dpu_global_pool`` emits, first to last
    but the final pool."""
    from vpuc.fusion.lower_dpu_global_pool import first_level, needs_split
    from vpuc.fusion.blocked_program import Value
    from vpuc.fusion.lower_dpu_nn_plan import Job, Plan
    from vpuc.ir.types import DimsOrder, ElemType, TensorType
    op = "maxpool" if kind == "MaxPool" else "avgpool"
    n, c, h, w = shape
    plan = Plan(op, (h, w), (1, 1), (0, 0), (0, 0), (1, 1), [Job((0, c), (0, c))])
    value = Value("x", TensorType(shape, ElemType.F16, DimsOrder.identity(4)), "input")
    levels = []
    while needs_split(plan, value, budget):
        level, (h, w) = first_level(plan, value, budget)
        levels.append(level)
        value = Value("p", TensorType((n, c, h, w), ElemType.F16, NHWC), "ddr")
        plan = Plan(op, (h, w), (1, 1), (0, 0), (0, 0), (1, 1), plan.jobs)
    return levels


def test_global_max_pool_runs_on_the_dpu_at_any_size(tmp_path):
    """GlobalMaxPool imports as ReduceMax over H and W with keep_dims: the DPU's maxpool of
    the whole H x W (it was an ACT SHAVE library reduction, which cannot cut a reduced
    axis: a block of 16386 bytes did not fit a 16 KiB budget); under 4 KiB in two levels.
    A max of f16 values is exact: equal to onnxruntime's."""
    shape = (1, 16, 16, 512)
    m = ModelBuilder(seed=0, opset=17)
    out = m.node("GlobalMaxPool", [m.input("x", list(shape))])
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, cmx_budget=4096)
    tasks = [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]
    assert {t.op for t in tasks} == {DpuOp.MAXPOOL}
    assert not [t for tl in program.module.task_lists if tl.executor.name == "ACT_SHAVE"
                for t in tl.tasks]
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float16)
    got = api.simulate(program, {"x": x}).outputs[sanitize(out)]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    np.testing.assert_array_equal(got.astype(np.float32), want)


# Which channelwise layers lower at which sizes: every one of these compiles (before the
# column split and the two-level pools, every 4 KiB case and the 1x16x4x4096
# count_include_pad average pool, depthwise and global average pool at the default
# budget failed with "does not fit a tile's CMX").  Compile only: the cases above check
# the numerics of each kind of split.
MATRIX_OPS = {
    "dw5": lambda m, x, c: m.node("Conv", [x, m.weight((c, 1, 5, 5))], kernel_shape=[5, 5],
                                  group=c, pads=[2, 2, 2, 2]),
    "max3s2": lambda m, x, c: m.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2],
                                     pads=[1, 1, 1, 1]),
    "avg3_count_pad": lambda m, x, c: m.node("AveragePool", [x], kernel_shape=[3, 3],
                                             pads=[1, 1, 1, 1], count_include_pad=1),
    "gap": lambda m, x, c: m.node("GlobalAveragePool", [x]),
    "gmp": lambda m, x, c: m.node("GlobalMaxPool", [x]),
}


@pytest.mark.parametrize("budget", [4096, None], ids=["4KiB", "default"])
@pytest.mark.parametrize("shape", [(1, 16, 4, 4096), (1, 48, 64, 64)], ids=["wide", "square"])
@pytest.mark.parametrize("op", sorted(MATRIX_OPS))
def test_channelwise_layers_lower_at_any_size(op, shape, budget, tmp_path):
    m = ModelBuilder(seed=0, opset=17)
    m.output(MATRIX_OPS[op](m, m.input("x", list(shape)), shape[1]))
    program = api.compile(m.save(tmp_path / "m.onnx", "m"), cmx_budget=budget)
    ops = _dpu_ops(program)
    if op == "gap":                     # a ragged first level is a dwconv
        assert ops - {DpuOp.DWCONV} == {DpuOp.AVGPOOL}
    else:
        assert ops == {"dw5": {DpuOp.DWCONV}, "max3s2": {DpuOp.MAXPOOL},
                       "avg3_count_pad": {DpuOp.DWCONV}, "gmp": {DpuOp.MAXPOOL}}[op]
    if op in ("gap", "gmp") and budget:                # two levels of pooling
        labels = {t.label.split(".")[1] for tl in program.module.task_lists
                  if tl.executor.name == "DPU" for t in tl.tasks}
        assert labels == {"l1", "l2"}


def _dpu_ops(program):
    """The layer's DPU ops, without the NCE permutes that lay an NCHW model input out NHWC
    when the layer reads it whole (``lower_dpu_permute``)."""
    return {t.op for tl in program.module.task_lists if tl.executor.name == "DPU"
            for t in tl.tasks} - {DpuOp.PERMUTE}
