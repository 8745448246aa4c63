"""A global pool through DDR levels (``lower_dpu_global_pool.first_level``) takes as many
partials as the largest windows that fit make, each side then the smallest that makes as
many: its zero padding is less than one row (column) a window, so the DPU pools no window
of mostly padded cells and the tiles' bands of rows stay even (SqueezeNet's 13 x 13
pool over 1000 channels: 7 x 7 windows over bands of 7 and 6 rows, not 11 x 11 over 11
and 2)."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from tests.onnx_import.test_anysize_pools import _global_model, _partials
from tests.onnx_import.test_lower_dpu_nn import U
from vpuc import api
from vpuc.fusion.blocked_program import Value, sanitize
from vpuc.fusion.lower_dpu_global_pool import first_level
from vpuc.fusion.lower_dpu_nn_plan import Job, Plan
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.verifier.dpu import MAX_KERNEL

DEFAULT_BUDGET = 1 << 20         # NPU37XX's default CMX budget, as test_anysize_pools


def _first(op: str, shape: tuple[int, int, int, int], budget: int):
    n, c, h, w = shape
    plan = Plan(op, (h, w), (1, 1), (0, 0), (0, 0), (1, 1), [Job((0, c), (0, c))])
    value = Value("x", TensorType(shape, ElemType.F16, DimsOrder.identity(4)), "input")
    return first_level(plan, value, budget)


@pytest.mark.parametrize("op", ["avgpool", "maxpool"])
@pytest.mark.parametrize("shape, budget", [
    ((1, 1000, 13, 13), DEFAULT_BUDGET),      # SqueezeNet's pool: 13 is prime
    ((1, 64, 23, 17), DEFAULT_BUDGET),
    ((1, 16, 7, 101), 4096),
    ((1, 32, 24, 40), 4096),
])
def test_first_level_pads_less_than_a_cell_per_window(op, shape, budget):
    level, (nh, nw) = _first(op, shape, budget)
    h, w = shape[2:]
    (a, b), (pb, pr) = level.kernel, level.end
    assert (nh, nw) == (math.ceil(h / a), math.ceil(w / b))
    assert (pb, pr) == (nh * a - h, nw * b - w)
    assert pb < nh and pr < nw                  # every window holds a or a - 1 real rows
    assert a <= MAX_KERNEL and b <= MAX_KERNEL


def test_squeezenet_pool_takes_two_partials_a_side_of_seven_cells():
    level, out = _first("avgpool", (1, 1000, 13, 13), DEFAULT_BUDGET)
    assert out == (2, 2)                        # as few partials as 11 x 11 windows make
    assert level.kernel == (7, 7) and level.end == (1, 1)
    assert level.dpu_op == "dwconv"             # 13 is prime: no exact mean of means
    assert np.all(level.jobs[0].weights == np.float32(4 / 169))     # nh nw / (h w), f32


def test_prime_pool_in_even_windows_matches_onnxruntime(tmp_path):
    """End to end at 13 x 13: the dwconv level's f32 sums of at most 49 taps, rounded to
    f16 with its weight (two roundings of relative u, the weights' sum g = 4 * 49 / 169
    over the padding), then the mean of 4 partials and its rounding (``test_anysize_pools``
    derives the same bound)."""
    shape = (1, 48, 13, 13)
    path, out = _global_model(tmp_path, "GlobalAveragePool", shape)
    program = api.compile(path)
    labels = [t.label for tl in program.module.task_lists if tl.executor.name == "DPU"
              for t in tl.tasks]
    assert any(".l1." in label for label in labels)     # the levels through DDR
    x = (np.random.default_rng(3).standard_normal(shape) + 0.25).astype(np.float16)
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    got = sim.outputs[sanitize(out)].astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    level, _ = _first("avgpool", shape, DEFAULT_BUDGET)
    x32 = x.astype(np.float32)
    partial = _partials(x32, level)
    (a, b), g = level.kernel, level.kernel[0] * level.kernel[1] * 4 / 169
    err = 2 * U * np.max(np.abs(partial)) + 2.0 ** -24 * a * b * g * np.max(np.abs(x32))
    bound = U * np.abs(want) + err + 2.0 ** -24 * 4 * np.max(np.abs(partial))
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)
