"""``lower_dpu_scale_weights``: a squeeze-excite product ``x * e[c]`` folded into the 1x1
projection after it, ``P(x * e) = conv(x, W * e)``: each tile scales the projection's
weights by one depthwise 1x1 over their bytes and the projection reads ``x``."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.cost.timing import default_timing
from vpuc.fusion import lower_graph_segments
from vpuc.fusion.blocked_program import ProgramText
from vpuc.fusion.lower_dpu_scale_weights import choose_fold
from vpuc.ir.graph import GraphIndex
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DpuOp, DpuTask
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.reference.graph import constant_value, run_graph_values

from tests.fusion.dpu_testlib import se_model
from tests.tolerances import assert_within_bound, stored_sum_bound, unit_roundoff


def _dpu_tasks(program, op: DpuOp) -> list[DpuTask]:
    return [t for tl in program.module.task_lists for t in tl.tasks
            if isinstance(t, DpuTask) and t.op is op]


def _products(program) -> list[DpuTask]:
    """The depthwise 1x1 tasks over an activation's pixels (a product's blocks)."""
    symbols = SymbolTable(program.module)
    return [t for t in _dpu_tasks(program, DpuOp.DWCONV)
            if tuple(t.kernel) == (1, 1) and symbols.region(t.inputs[0]).type.dims[2:] != (1, 1)]


def _run(program, x: np.ndarray) -> np.ndarray:
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    return next(iter(sim.outputs.values()))


@pytest.mark.parametrize("channels", [32, 24])
def test_the_product_folds_into_the_projections_weights(tmp_path, monkeypatch, channels):
    """No product task over ``x``; on each tile one depthwise 1x1 writes the weights every
    projection task there reads, over the ``[O, I, 1, 1]`` weights (24 channels: padded to
    32, the excitation's pads its first channels, the weights there zeros).  The output
    against the unfolded program's (the product on the DPU, rounded ``x * e``) within the
    bound of two roundings of each of the C exact terms ``W x e`` (each at most u = 2^-11
    relative, f16's unit roundoff), the f32 sums of C terms and the outputs' roundings
    (``tests/tolerances.py``); |x e| from the graph's f16 product, within u of it."""
    se = se_model(tmp_path, channels=channels, excite_on_act=False)
    x = np.random.default_rng(5).standard_normal((1, 16, 10, 10)).astype(np.float16)
    program = api.compile(se)
    assert not _products(program)
    symbols = SymbolTable(program.module)
    scales = {t.tile: t for t in _dpu_tasks(program, DpuOp.DWCONV)}
    assert sorted(scales) == [0, 1]
    projections = [t for t in _dpu_tasks(program, DpuOp.CONV) if tuple(t.kernel) == (1, 1)
                   and symbols.region(t.inputs[0]).type.dims[2:] != (1, 1)]   # not the pool's
    assert projections
    for conv in projections:
        weights = symbols.region(conv.weights)
        scale = scales[conv.tile]
        assert symbols.region(scale.output).root is weights.root
        assert symbols.region(scale.inputs[0]).type.dims == weights.type.dims == (16, 32, 1, 1)
    folded = _run(program, x)
    monkeypatch.setattr(lower_graph_segments, "chosen_folds", lambda *a, **k: {})
    unfolded_program = api.compile(se)
    assert _products(unfolded_program)
    unfolded = _run(unfolded_program, x)

    graph = program.source_graph
    index = GraphIndex(graph)
    mul = next(op for op in graph.ops if op.kind == "Multiply")
    proj = next(index.consumers(mul.result))
    w = constant_value(index.producer(proj.operands[1])).astype(np.float64)[:, :, 0, 0]
    y = run_graph_values(graph, {"x": x})[0][mul.result].astype(np.float64)[0]
    u = unit_roundoff(np.float16)
    magnitude = np.einsum("oc,chw->ohw", np.abs(w), np.abs(y))[None] / (1 - u)
    bound = stored_sum_bound(folded, unfolded, magnitude * (1 + u), channels, np.float32,
                             np.float16) + 2 * u * magnitude
    assert_within_bound(folded, unfolded, bound)
    # and onnxruntime's f32 result within test_import_models.py's whole-model tolerance
    want = ort.InferenceSession(se, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    got = folded.astype(np.float32).reshape(want.shape)
    assert float(np.dot(got.ravel(), want.ravel())
                 / (np.linalg.norm(got) * np.linalg.norm(want))) >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


def test_the_fold_is_faster(tmp_path, monkeypatch):
    se = se_model(tmp_path, excite_on_act=False)
    folded = api.simulate(api.compile(se), timing_only=True).cycles
    monkeypatch.setattr(lower_graph_segments, "chosen_folds", lambda *a, **k: {})
    unfolded = api.simulate(api.compile(se), timing_only=True).cycles
    assert folded < unfolded


def test_an_excitation_on_act_keeps_the_product(tmp_path):
    """An excitation computed in the product's ACT segment writes the product's weights
    there: that product is ``lower_dpu_scale``'s, not folded."""
    assert _products(api.compile(se_model(tmp_path, excite_on_act=True)))


@pytest.mark.parametrize("c, hw, outs, folds", [(240, 14, 40, True), (16, 56, 16, True),
                                                (288, 7, 96, True), (576, 7, 96, False)])
def test_the_cost_model_chooses(c, hw, outs, folds):
    """MobileNetV3-Small's blocks: on a 14 x 14 or 56 x 56 map the scale of the O x C
    weights costs a tile's DPU less than its share of the product over H x W x C; on a
    7 x 7 map of 288 channels more than the product's DPU tasks but less than its segment
    (loads, tasks, stores); with 576 channels the 110,592-byte scaled copy is past the
    cap (``DEEP_BYTES_PER_ACT_TASK``) though the scale is cheaper than the segment too."""
    nhwc = DimsOrder(NAMED_ORDERS["NHWC"])
    x = TensorType((1, c, hw, hw), ElemType.F16, nhwc)
    prog = ProgramText(timing=default_timing("NPU37XX"))
    assert choose_fold(prog, x, x, outs, 2, None) is folds


def test_the_cap_alone_refuses_the_576_channel_fold():
    """The 7 x 7 x 576 block's scale (O x C = 96 x 576) costs less than its product's
    segment: only the scaled copy's size keeps the product."""
    from vpuc.cost.blocks import pipeline_cycles
    from vpuc.fusion.lower_dpu import split_rows_cost
    from vpuc.fusion.lower_dpu_channels import aligned
    from vpuc.fusion.lower_dpu_scale import product_blocks, product_stages
    from vpuc.fusion.lower_dpu_scale_weights import scale_workload
    from vpuc.fusion.schedule_room import DEEP_BYTES_PER_ACT_TASK
    nhwc = DimsOrder(NAMED_ORDERS["NHWC"])
    x = TensorType((1, 576, 7, 7), ElemType.F16, nhwc)
    prog = ProgramText(timing=default_timing("NPU37XX"))
    scale = split_rows_cost(1, scale_workload(96, 576, x.elem), prog.timing)[1]
    blocks = product_blocks(prog, x, x, 2, None, 0.0)
    stages = product_stages(prog, x, x)
    segment = pipeline_cycles([stages(b - a) for a, b in blocks], 2, channels=2)
    assert scale < segment
    assert aligned(96) * aligned(576) * 2 > DEEP_BYTES_PER_ACT_TASK


def test_naive_folds_nothing(tmp_path):
    """The layer-by-layer schedule keeps the product (on ACT SHAVE): no weights scaled."""
    program = api.compile(se_model(tmp_path, excite_on_act=False), schedule="naive")
    symbols = SymbolTable(program.module)
    assert not [t for t in _dpu_tasks(program, DpuOp.DWCONV)
                if symbols.region(t.inputs[0]).type.dims[2:] == (1, 1)]
