"""MatMul, Gemm and Conv whose reduction is too long for one row and 16 output channels of
CMX (``vpuc/fusion/lower_dpu_ksplit*.py``): K (the input channels) cut into chunks, the DPU
writing f32 partial sums, ACT SHAVE adding them, the activation and the conversion to f16
once.

Tolerance (``tests/tolerances.py``): inputs and weights are f16 values (onnxruntime gets
the weights rounded to f16, ``rounded_to_f16``), so vpuc and onnxruntime compute the same
sums of K products plus the bias, both accumulated in f32 (in different orders and
blockings: ``2 gamma_{K+1}(f32) * sum |t_i|``), and vpuc rounds once to f16
(``u_f16 (|got| + |want|)``): ``stored_sum_bound``.  Relu and Clip do not widen the gap.
Against vpuc's own f16 graph reference the blob agrees within a few f16 ulps
(``assert_close``), and the task-level reference of ``vpuc run --reference`` agrees
with the simulator.  Compiling runs the pipeline's proofs (barrier replay on the
physical barriers, CMX liveness in allocate-cmx); the simulation reports no races.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from onnx_testlib import rounded_to_f16
from tests.fusion.dpu_testlib import assert_close
from tests.tolerances import assert_within_bound, conv_magnitude, stored_sum_bound
from vpuc import api
from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.fusion import lower_dpu_ksplit_matmul
from vpuc.fusion.blocked_program import sanitize
from vpuc.ir.tasks import DpuOp
from vpuc.ir.types import ElemType
from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.reference.graph import run_graph
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float32)


def gemm_relu(m, rng, k=600):
    """Gemm with transB and a bias, then Relu: x [4, K] by W [40, K]."""
    w, b = _f16(rng, (40, k), k ** -0.5), _f16(rng, (40,), 0.1)
    y = m.node("Relu", [m.node("Gemm", [m.input("x", [4, k]), m.init(w), m.init(b)], transB=1)])
    return y, (4, k), lambda x: np.abs(x) @ np.abs(w).T + np.abs(b)


def matmul_clip(m, rng, k=600):
    """MatMul by W [K, 24] (a column slice of the DDR weights per chunk), then Clip(0, 6)."""
    w = _f16(rng, (k, 24), k ** -0.5)
    lo, hi = m.init(np.array(0.0, np.float32)), m.init(np.array(6.0, np.float32))
    y = m.node("Clip", [m.node("MatMul", [m.input("x", [5, k]), m.init(w)]), lo, hi])
    return y, (5, k), lambda x: np.abs(x) @ np.abs(w)


def batched_matmul_tanh(m, rng, k=400):
    """A batched activation [2, 3, K] by W [K, 20], then Tanh: one series of blocks per batch
    item."""
    w = _f16(rng, (k, 20), k ** -0.5)
    y = m.node("Tanh", [m.node("MatMul", [m.input("x", [2, 3, k]), m.init(w)])])
    return y, (2, 3, k), lambda x: np.abs(x) @ np.abs(w)


def gemm_trans_a(m, rng, k=500):
    """Gemm with transA: x [K, 3] read column-wise, W [K, 18], no activation."""
    w = _f16(rng, (k, 18), k ** -0.5)
    y = m.node("Gemm", [m.input("x", [k, 3]), m.init(w)], transA=1)
    return y, (k, 3), lambda x: np.abs(x).T @ np.abs(w)


CASES = {"gemm_relu": gemm_relu, "matmul_clip": matmul_clip,
         "batched_matmul_tanh": batched_matmul_tanh, "gemm_trans_a": gemm_trans_a}
BUDGET = 6000          # bytes: one row with 16 columns of the whole K needs over 20000


def compile_ksplit(tmp_path, case, cmx_budget=BUDGET, seed=0, **sizes):
    """Compile ``case`` under ``cmx_budget``, simulate it, check it against onnxruntime and
    vpuc's graph reference; (program, simulated cycles)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder(seed=seed, opset=17)
    out, shape, magnitude = BUILDS[case](m, rng, **sizes)
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, cmx_budget=cmx_budget)
    x = rng.standard_normal(shape).astype(np.float16)
    sim = api.simulate(program, {"x": x}, reference=True)
    assert not sim.races
    got = sim.outputs[sanitize(out)]
    np.testing.assert_allclose(got.astype(np.float32),
                               sim.reference[sanitize(out)].astype(np.float32),
                               rtol=4e-3, atol=1e-4)
    want = ort.InferenceSession(rounded_to_f16(path, tmp_path / "r.onnx"),
                                providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    k = CONVS[case][2] if case in CONVS else shape[0] if case == "gemm_trans_a" else shape[-1]
    bound = stored_sum_bound(got, want, magnitude(x.astype(np.float64)), k + 1,
                             np.float32, np.float16)
    assert_within_bound(got.astype(np.float32), want, bound)
    imported = import_onnx(path)
    write_import(imported, tmp_path / "m.vir")
    assert_close(got, run_graph(imported.module.graphs[0], {"x": x}, tmp_path)[0], ulps=3)
    return program, sim.cycles


def conv_relu(m, rng, c=200):
    """3x3 Conv over C input channels (weights 24 x C x 3 x 3), bias, Relu."""
    w, b = _f16(rng, (24, c, 3, 3), (9 * c) ** -0.5), _f16(rng, (24,), 0.1)
    y = m.node("Relu", [m.node("Conv", [m.input("x", [1, c, 6, 7]), m.init(w), m.init(b)],
                               kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    return y, (1, c, 6, 7), conv_magnitude(w, b, [1, 1, 1, 1], [1, 1])


def conv_grouped(m, rng, c=160):
    """A 2-group strided Conv (80 input channels and 4 output channels per group): each
    group's input channels split, its weights a constant the lowering rearranged."""
    w, b = _f16(rng, (8, c // 2, 3, 3), (9 * c / 2) ** -0.5), _f16(rng, (8,), 0.1)
    y = m.node("Conv", [m.input("x", [1, c, 5, 5]), m.init(w), m.init(b)], kernel_shape=[3, 3],
               group=2, strides=[2, 2], pads=[1, 1, 1, 1])
    return y, (1, c, 5, 5), conv_magnitude(w, b, [1, 1, 1, 1], [2, 2], groups=2)


def conv_transpose(m, rng, c=200):
    """A stride-2 ConvTranspose from C channels (a convolution over the zero-upsampled
    input, ``lower_dpu_deconv``, its rearranged weights a constant)."""
    w, b = _f16(rng, (c, 24, 3, 3), (9 * c) ** -0.5), _f16(rng, (24,), 0.1)
    y = m.node("ConvTranspose", [m.input("x", [1, c, 4, 5]), m.init(w), m.init(b)],
               kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return y, (1, c, 4, 5), conv_magnitude(w, b, [1, 1, 1, 1], [2, 2], op="ConvTranspose")


CONVS = {"conv_relu": (conv_relu, 20000, 9 * 200), "conv_grouped": (conv_grouped, 16000, 9 * 80),
         "conv_transpose": (conv_transpose, 24000, 9 * 200)}
BUILDS = {**CASES, **{name: build for name, (build, _, _) in CONVS.items()}}


def _dpu_tasks(program):
    return [t for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks]


def _calls(program, kernel: str) -> set[str]:
    """The library kernel runs of ``kernel``: each is one invocation per ACT SHAVE of the
    tile (labels ``NAME.0``, ``NAME.1``), counted once."""
    return {t.label.rsplit(".", 1)[0] for tl in program.module.task_lists
            if tl.executor.name == "ACT_SHAVE" for t in tl.tasks if t.kernel == kernel}


def _elem(program, ref) -> ElemType:
    buffers = {b.name: b for b in program.module.buffers}
    return buffers[ref].type.elem


@pytest.mark.parametrize("case", sorted(CASES))
def test_k_split_matches_onnxruntime(case, tmp_path):
    program, _ = compile_ksplit(tmp_path, case)
    tasks = _dpu_tasks(program)
    assert {t.op for t in tasks} == {DpuOp.MATMUL}
    assert {_elem(program, t.output) for t in tasks} == {ElemType.F32}     # partial sums
    assert {t.tile for t in tasks} == {0, 1}
    depths = {t.weights for t in tasks}
    assert len(depths) == len(tasks)        # every task its own chunk of the weights
    adds, converts = _calls(program, "ksplit_add_f32"), _calls(program, "ksplit_convert_f32_f16")
    # one add per chunk after a block's first, one conversion per block
    assert len(adds) == len(tasks) - len(converts) and converts


@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_input_channel_split_matches_onnxruntime(case, tmp_path):
    """Weights of 16 output channels with one output row exceed the budget (200 input
    channels x 3 x 3: 2 x 59904 bytes; a group of 80: 2 x 23040), so the input channels are
    cut into chunks, each a conv writing f32 partials."""
    program, _ = compile_ksplit(tmp_path, case, cmx_budget=CONVS[case][1])
    tasks = _dpu_tasks(program)
    assert {t.op for t in tasks} == {DpuOp.CONV}
    assert {_elem(program, t.output) for t in tasks} == {ElemType.F32}
    assert {t.tile for t in tasks} == {0, 1}
    blocks = len(_calls(program, "ksplit_convert_f32_f16"))
    assert len(tasks) > blocks                       # more than one chunk per block
    assert sum(t.bias is not None for t in tasks) == blocks


def test_bias_is_added_once_by_the_first_chunk(tmp_path):
    program, _ = compile_ksplit(tmp_path, "gemm_relu")
    tasks = _dpu_tasks(program)
    blocks = len(_calls(program, "ksplit_convert_f32_f16"))
    assert sum(t.bias is not None for t in tasks) == blocks
    assert all(t.post is None for t in tasks)          # the activation runs on the total


def test_k_of_200000_compiles_under_the_default_budget(tmp_path):
    """The issue's example: a 1 x 200,000 by 200,000 x 16 MatMul (6.4 MB of weights) under
    the default 1 MiB budget."""
    program, _ = compile_ksplit(tmp_path, "matmul_clip", cmx_budget=None, k=200_000)
    assert len(_dpu_tasks(program)) > 6


def test_chosen_split_is_faster_than_smaller_chunks(tmp_path, monkeypatch):
    """The cost model's pick against the candidate with the smallest K chunks (twice as
    many), in simulated cycles."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, chosen = compile_ksplit(tmp_path / "a", "gemm_relu")
    monkeypatch.setattr(lower_dpu_ksplit_matmul.MatmulKSplit, "choose", lambda self: min(
        self.candidates(), key=lambda s: (s.depth, -s.rows, -s.cols)))
    _, smaller = compile_ksplit(tmp_path / "b", "gemm_relu")
    assert chosen < smaller


def test_budget_below_one_minimal_tile_is_a_located_error(tmp_path):
    m = ModelBuilder(seed=0, opset=17)
    out, _, _ = gemm_relu(m, np.random.default_rng(0))
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    with pytest.raises(VpucError) as info:
        api.compile(path, cmx_budget=2000)
    text = str(info.value)
    assert "m.onnx (imported):" in text and "Gemm" in text
    assert ("does not fit a tile's CMX: 2464 bytes with one matrix row, 16 output columns and "
            "16 of K per block (K split into f32 partial sums) over a budget of 2000") in text


def test_lowering_golden(tmp_path):
    """The lowered program of a small Gemm + Relu split over K (2 chunks of 32 and 8) and
    over N (16 + 4 columns), before allocation: DMA, DPU (f32 partials, the bias with the
    first chunk) and ACT SHAVE (add, relu, convert) tasks and their barriers."""
    rng = np.random.default_rng(0)
    m = ModelBuilder(seed=0, opset=17)
    w, b = _f16(rng, (20, 40), 0.2), _f16(rng, (20,), 0.1)
    m.output(m.node("Relu", [m.node("Gemm", [m.input("x", [2, 40]), m.init(w), m.init(b)],
                                    transB=1)]))
    text, name, _ = onnx_as_vir(m.save(tmp_path / "m.onnx", "m"), None, "f16")
    mod = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(
        mod, PassContext(load_arch(mod.arch), cmx_budget=3000))
    lowered = print_module(mod)
    golden = GOLDEN / "lowered_gemm_ksplit.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


def test_k_split_between_other_layers(tmp_path):
    """A split Gemm after an ACT SHAVE layer and before a DPU MatMul: its first loads wait
    for the segment before, the next segment for its last store; the blob agrees with
    vpuc's graph reference and the task-level reference, without races."""
    rng = np.random.default_rng(5)
    m = ModelBuilder(seed=5, opset=17)
    w1, w2 = _f16(rng, (40, 600), 600 ** -0.5), _f16(rng, (40, 10), 40 ** -0.5)
    h = m.node("Sigmoid", [m.input("x", [4, 600])])
    y = m.node("MatMul", [m.node("Relu", [m.node("Gemm", [h, m.init(w1)], transB=1)]),
                          m.init(w2)])
    m.output(y)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, cmx_budget=BUDGET)
    x = rng.standard_normal((4, 600)).astype(np.float16)
    sim = api.simulate(program, {"x": x}, reference=True)
    assert not sim.races
    got = sim.outputs[sanitize(y)]
    np.testing.assert_allclose(got.astype(np.float32), sim.reference[sanitize(y)].astype(np.float32),
                               rtol=4e-3, atol=1e-4)
    imported = import_onnx(path)
    write_import(imported, tmp_path / "m.vir")
    assert_close(got, run_graph(imported.module.graphs[0], {"x": x}, tmp_path)[0], ulps=3)
    kernels = {t.kernel for tl in program.module.task_lists if tl.executor.name == "ACT_SHAVE"
               for t in tl.tasks}
    assert "ksplit_add_f32" in kernels and len(kernels) > 3     # the Sigmoid's kernel too


def test_conv_k_split_between_convs_under_both_schedules(tmp_path):
    """Conv (1x1, to 200 channels) -> split Conv (3x3 over 200 channels) + Clip -> Conv: the
    default schedule (NHWC values between DPU layers, prefetched weights) and the naive one
    give the same bits, without races, as the task-level reference."""
    rng = np.random.default_rng(5)
    m = ModelBuilder(seed=5, opset=17)
    w0, w2 = _f16(rng, (200, 16, 1, 1), 0.25), _f16(rng, (16, 24, 3, 3), 216 ** -0.5)
    w1, b1 = _f16(rng, (24, 200, 3, 3), 1800 ** -0.5), _f16(rng, (24,), 0.1)
    h = m.node("Relu", [m.node("Conv", [m.input("x", [1, 16, 6, 7]), m.init(w0)],
                               kernel_shape=[1, 1])])
    h = m.node("Clip", [m.node("Conv", [h, m.init(w1), m.init(b1)], kernel_shape=[3, 3],
                               pads=[1, 1, 1, 1]),
                        m.init(np.array(0.0, np.float32)), m.init(np.array(6.0, np.float32))])
    y = m.node("Conv", [h, m.init(w2)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m.output(y)
    path = m.save(tmp_path / "m.onnx", "m")
    x = rng.standard_normal((1, 16, 6, 7)).astype(np.float16)
    outputs = []
    for schedule in ("default", "naive"):
        program = api.compile(path, cmx_budget=20000, schedule=schedule)
        sim = api.simulate(program, {"x": x}, reference=True)
        assert not sim.races
        outputs.append(sim.outputs[sanitize(y)])
        np.testing.assert_allclose(outputs[-1].astype(np.float32),
                                   sim.reference[sanitize(y)].astype(np.float32),
                                   rtol=4e-3, atol=1e-4)
        assert "ksplit_clamp_f32" in {t.kernel for tl in program.module.task_lists
                                      if tl.executor.name == "ACT_SHAVE" for t in tl.tasks}
    # The schedules may cut blocks differently, and a block's f32 sums then go through
    # other BLAS shapes: the f16 results agree to the ulps this file allows the reference.
    assert_close(outputs[0], outputs[1], ulps=3)
