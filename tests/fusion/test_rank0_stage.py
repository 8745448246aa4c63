"""A fused stage whose first output is rank 0 beside a blocked one (emit_blocks' parts).

The block pipeline gives each stage one invocation per ACT SHAVE, each on half of the
block; a rank-0 value has no halves.  When such a value was a stage's *first* output,
only part 0 ran, leaving the other half of every blocked output unwritten.
"""

from __future__ import annotations

import numpy as np

from vpuc import api
from vpuc.fusion.blocked_program import Stage, Value, build_program
from vpuc.ir.types import DimsOrder, ElemType, TensorType

GRAPH = """module @rank0 arch NPU37XX
graph @main {
  %s = Parameter() : f16
  %x = Parameter() : 64x64xf16
  %t = Multiply(%s, %s) : f16
  %y = Add(%x, %t) : 64x64xf16
  Result(%t)
  Result(%y)
}
"""


def test_rank0_parameters_beside_blocked_values():
    program = api.compile_text(GRAPH, "<rank0>")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    s = np.array(0.75, np.float16)
    sim = api.simulate(program, {"s": s, "x": x})
    np.testing.assert_array_equal(sim.outputs["t"], np.float16(s * s))
    # One f16 add, rounded once: exact against the f16 sum.
    np.testing.assert_array_equal(sim.outputs["y"], (x + np.float16(s * s)).astype(np.float16))


def test_stage_with_rank0_output_is_one_invocation():
    f16 = ElemType.F16
    values = [Value("s", TensorType((), f16, DimsOrder.identity(0)), "input"),
              Value("x", TensorType((8, 16), f16, DimsOrder.identity(2)), "input"),
              Value("t", TensorType((), f16, DimsOrder.identity(0)), "output"),
              Value("y", TensorType((8, 16), f16, DimsOrder.identity(2)), "output")]
    text = build_program("m", ['kernel @k(a: memref<*xf16>) from library "clamp"'], values,
                         [Stage("k", ["s", "x"], ["t", "y"])], axis=0, rank=2, extent=8,
                         blocks=4, tiles=2)
    calls = [line for line in text.splitlines() if ": sw @k" in line]
    # Every block's %y slot is written whole: by one invocation on the whole slot, or by
    # one per part covering every part (before the fix, part p1 was never written).
    for k in range(4):
        slot = f"%y.t{k % 2}s{(k // 2) % 2}"
        written = {c.split("outputs(")[1].split(")")[0].split(", ")[1].split(" as ")[0]
                   for c in calls if c.lstrip().startswith(f"s{k}.")}
        assert written in ({slot}, {slot + "p0", slot + "p1"}), (k, written)
