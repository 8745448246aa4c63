"""The DPU's integer mode run end to end: examples/int8_conv.vir (a u8 conv requantized to
i8, then a depthwise conv dequantized to f16) through the simulator, both blob formats and
``--reference``; its cost at the int8 rate and with 1-byte operands."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.engines.dpu import workload
from tests.sim.simlib import REPO
from vpuc import api
from vpuc.cost.bound import ideal_dpu_cycles
from vpuc.cost.dpu import dpu_cost
from vpuc.cost.timing import load_timing

EXAMPLE = REPO / "examples" / "int8_conv.vir"


def _input():
    return np.random.default_rng(8).integers(0, 256, (1, 16, 16, 16), dtype=np.uint8)


def test_the_example_matches_the_int64_reference_bit_for_bit():
    sim = api.simulate(api.compile(str(EXAMPLE)), {"in": _input()}, reference=True)
    assert sim.outputs["mid"].dtype == np.int8 and sim.outputs["out"].dtype == np.float16
    for name in ("mid", "out"):
        np.testing.assert_array_equal(sim.outputs[name], sim.reference[name])
    # relu at the output zero point: nothing below it
    assert sim.outputs["mid"].min() == -5
    assert not sim.races


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_a_blob_keeps_the_integer_mode(fmt, tmp_path):
    program = api.compile(str(EXAMPLE))
    direct = api.simulate(program, {"in": _input()})
    path = tmp_path / f"int8.{fmt}"
    path.write_bytes(api.write_blob(program, fmt))
    read = api.read_blob(path)
    quant = [t.quant for tl in read.module.task_lists for t in tl.tasks
             if getattr(t, "quant", None) is not None]
    assert [(q.in_zero_point, q.out_zero_point) for q in quant] == [(128, -5), (-5, 0)]
    again = api.simulate(read, {"in": _input()})
    for name in direct.outputs:
        np.testing.assert_array_equal(again.outputs[name], direct.outputs[name])
    assert again.cycles == direct.cycles


def test_integer_workloads_cost_the_int8_rate_and_one_byte_operands():
    """The same conv in u8/i8 and in f16: the cost model's compute term is half (VPUNN's
    2048 int8 MACs/cycle against 1024), its weight and activation bytes half too."""
    program = api.compile(str(EXAMPLE))
    conv = program.module.task_lists[1].tasks[0]
    regions = {b.name: b.type for b in program.module.buffers}
    tensors = {"in0": regions["x"], "out": regions["y1"], "weights": regions["cw1"]}
    w8 = workload(conv, 0, tensors)
    assert (w8.elem, w8.in_bytes, w8.weight_bytes, w8.out_bytes) == ("u8", 1, 1, 1)
    w16 = w8.__class__(**{**w8.__dict__, "elem": "f16", "in_bytes": 2, "weight_bytes": 2,
                          "out_bytes": 2})
    params = load_timing("NPU37XX").dpu
    c8, c16 = dpu_cost(w8, params, "CUBOID_16x16"), dpu_cost(w16, params, "CUBOID_16x16")
    assert c8.compute == pytest.approx(c16.compute / 2)
    assert c8.activation == pytest.approx(c16.activation / 2)
    assert c8.output == pytest.approx(c16.output / 2)
    assert c8.weights < c16.weights
    assert ideal_dpu_cycles(w8, params) == pytest.approx(ideal_dpu_cycles(w16, params) / 2)
