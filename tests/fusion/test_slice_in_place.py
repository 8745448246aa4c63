"""Slices read where they lie in their source (``vpuc/fusion/slice_in_place.py``): no
DDR -> DDR copy, the readers' loads take the box, the results unchanged."""

from __future__ import annotations

import numpy as np

from vpuc import api
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaTask, SwKernelTask

# an LSTM step's shape: a row of the input projection, then each gate's columns of it
GRAPH = """module @step arch NPU37XX
graph @main {
  %p = Parameter() : 4x256xf16
  %c = Parameter() : 1x64xf16
  %q = Sigmoid(%p) : 4x256xf16
  %row = Slice{begin = [2, 0], end = [3, 256], step = [1, 1]}(%q) : 1x256xf16
  %i = Slice{begin = [0, 0], end = [1, 64], step = [1, 1]}(%row) : 1x64xf16
  %f = Slice{begin = [0, 64], end = [1, 128], step = [1, 1]}(%row) : 1x64xf16
  %g = Slice{begin = [0, -64], end = [1, 256], step = [1, 1]}(%row) : 1x64xf16
  %a = Multiply(%f, %c) : 1x64xf16
  %b = Multiply(%i, %g) : 1x64xf16
  %r = Add(%a, %b) : 1x64xf16
  Result(%r)
}
"""

STEPPED = GRAPH.replace("begin = [0, 64], end = [1, 128], step = [1, 1]",
                        "begin = [0, 64], end = [1, 192], step = [1, 2]")


def _run(text: str, schedule: str = "default"):
    program = api.compile_text(text, "<step>", schedule=schedule)
    rng = np.random.default_rng(3)
    feeds = {"p": rng.uniform(-3, 3, (4, 256)).astype(np.float16),
             "c": rng.uniform(-2, 2, (1, 64)).astype(np.float16)}
    sim = api.simulate(program, feeds, reference=True)
    assert not sim.races
    # Sigmoid in f32 stored f16, then two products and a sum of values below 2 in f16:
    # a few f16 ulps of 2 (2^-10 each)
    np.testing.assert_allclose(sim.outputs["r"].astype(np.float32),
                               sim.reference["r"].astype(np.float32), rtol=0, atol=6 * 2.0 ** -10)
    return program.module


def _slice_copies(module) -> list[str]:
    return sorted(t.label.split(".")[0] for tl in module.task_lists for t in tl.tasks
                  if isinstance(t, DmaTask) and ".dma" in t.label)


def test_unit_step_slices_are_not_copied():
    module = _run(GRAPH)
    assert _slice_copies(module) == []
    assert any(isinstance(t, SwKernelTask) for tl in module.task_lists for t in tl.tasks)
    # the gates are boxes of the row, a box of %q: views of %q's buffer, which the
    # Slices' readers alone read, so %q stays in CMX (resident.resident_values)
    views = {v.name: v for v in module.views}
    assert {views[n].base for n in ("row", "i", "f", "g")} == {"q"}
    assert [(sl.start, sl.stop) for sl in views["g"].slices] == [(2, 3), (192, 256)]
    assert next(b for b in module.buffers if b.name == "q").kind == BufferKind.CMX


def test_naive_schedule_and_stepped_slices_still_copy():
    assert _slice_copies(_run(GRAPH, schedule="naive")) == ["f", "g", "i", "row"]
    # a step of 2 is no box: that Slice copies, the unit-step ones do not
    assert _slice_copies(_run(STEPPED)) == ["f"]
