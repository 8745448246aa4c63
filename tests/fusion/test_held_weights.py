"""A recurrence's constant weights loaded once (``lower_dpu_matmul``: ``prog.held_weights``)
and its state kept in CMX though a Concat reads it (``resident.CMX_READING_DMA``): two
steps of ``h' = tanh(h @ R)`` stacked by a Concat, as an unrolled RNN (``convert_rnn``)."""

from __future__ import annotations

import numpy as np

from vpuc import api
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask

H = 64
R = np.random.default_rng(5).integers(-4, 5, (H, H)) / 64


def _graph(steps: int) -> str:
    values = ", ".join(repr(float(v)) for v in R.ravel())
    body = [f"  %h0 = Parameter() : 1x{H}xf16", f"  %r = Constant([{values}]) : {H}x{H}xf16"]
    for s in range(1, steps + 1):
        body += [f"  %m{s} = MatMul(%h{s - 1}, %r) : 1x{H}xf16",
                 f"  %h{s} = Tanh(%m{s}) : 1x{H}xf16"]
    stacked = ", ".join(f"%h{s}" for s in range(1, steps + 1))
    body += [f"  %y = Concat{{axis = 0}}({stacked}) : {steps}x{H}xf16", "  Result(%y)"]
    return "module @rnn arch NPU37XX\ngraph @main {\n" + "\n".join(body) + "\n}\n"


def _run(steps: int, schedule: str = "default"):
    program = api.compile_text(_graph(steps), "<rnn>", schedule=schedule)
    h0 = np.random.default_rng(7).uniform(-1, 1, (1, H)).astype(np.float16)
    sim = api.simulate(program, {"h0": h0}, reference=True)
    assert not sim.races
    # per step a dot of 64 products of |h| <= 1 by multiples of 1/64 below 1/16, summed
    # in f32 and rounded to f16, then tanh in f32 rounded to f16: the reference rounds the
    # same values, a few f16 ulps of 1 (2^-11) apart each step, carried by tanh' <= 1 and
    # |R|'s row sums (at most 1)
    np.testing.assert_allclose(sim.outputs["y"].astype(np.float32),
                               sim.reference["y"].astype(np.float32),
                               rtol=0, atol=4 * steps * 2.0 ** -11)
    return program.module


def _weight_loads(module) -> list[str]:
    """The labels of DMAs into a CMX buffer a DPU task reads as its weights."""
    weights = {t.weights for tl in module.task_lists for t in tl.tasks
               if isinstance(t, DpuTask) and getattr(t, "weights", None)}
    symbols = SymbolTable(module)
    roots = {symbols.region(w).root.name for w in weights if symbols.region(w) is not None}
    return [t.label for tl in module.task_lists for t in tl.tasks
            if isinstance(t, DmaTask) and symbols.region(t.dst) is not None
            and symbols.region(t.dst).root.name in roots]


def test_recurrent_weights_load_once():
    assert len(_weight_loads(_run(4))) == 1


def test_state_read_by_a_concat_stays_in_cmx():
    # every step's h is read by the next MatMul and by the Concat, from CMX
    kinds = {b.name: b.kind for b in _run(4).buffers}
    assert [kinds.get(f"h{s}") for s in range(1, 4)] == [BufferKind.CMX] * 3


def test_naive_schedule_loads_the_weights_per_step():
    module = _run(3, schedule="naive")
    assert len(_weight_loads(module)) >= 3
