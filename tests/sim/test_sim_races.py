"""The race detector's online happens-before equals the schedule's, pair for pair.

``runtime_sim.race_clock`` computes vector clocks while the run goes; the
reference is ``vpuc.analysis.schedule`` (clocks over the whole graph, plus a
graph search when a multi-engine queue's clock is inconclusive).  The program
below runs ACT kernels of alternating sizes on the two SHAVEs of a tile, so
they end out of order and the multi-engine clocks need their masks.
"""

from __future__ import annotations

import pytest

import runtime_sim.race_clock as race_clock
import runtime_sim.races as races
from runtime_sim.simulator import simulate
from tests.sim.simlib import NO_VERIFY, compile_vir


def _act_program(blocks: int, chained: bool) -> str:
    lines = ["module @act_order arch NPU37XX",
             'kernel @hswish(input: memref<*xf16>, output: memref<*xf16>) from library "hswish"',
             'kernel @runtime() from library "runtime"', "runtime @runtime stacks(16384, 16384)",
             f"input %in : {blocks}x16x16x16xf16 NHWC",
             f"output %out : {blocks}x16x16x16xf16 NHWC"]
    dma, act = [], []
    offset = 0
    for k in range(blocks):
        rows = 16 if k % 2 == 0 else 1          # long and short kernels alternate
        size = 16 * rows * 16 * 2
        lines += [f"cmx %a{k} : 1x16x{rows}x16xf16 NHWC tile 0 at {offset}",
                  f"cmx %b{k} : 1x16x{rows}x16xf16 NHWC tile 0 at {offset + size}",
                  f"view %in{k} = %in[{k}, :, 0:{rows}, :]",
                  f"view %out{k} = %out[{k}, :, 0:{rows}, :]",
                  f"barrier %l{k}", f"barrier %d{k}"]
        offset += 2 * size
        dma.append(f"  load{k}: dma %in{k} -> %a{k} channel 0 updates(%l{k})")
        dma.append(f"  store{k}: dma %b{k} -> %out{k} channel 1 waits(%d{k})")
        waits = f"%l{k}" + (f", %d{k - 3}" if chained and k >= 3 and k % 3 == 0 else "")
        act += [f"  act{k}: sw @hswish on tile 0 inputs(%a{k} as %i) outputs(%b{k} as %o) "
                f"waits({waits}) updates(%d{k}) {{", "    run(%i, %o)", "  }"]
    return "\n".join(lines + ["tasks DMA {"] + dma + ["}", "tasks ACT_SHAVE {"] + act
                     + ["}"]) + "\n"


@pytest.mark.parametrize("chained", [False, True])
def test_online_happens_before_matches_the_schedule_for_every_pair(tmp_path, monkeypatch, chained):
    path = tmp_path / "act_order.vir"
    path.write_text(_act_program(24, chained))
    program = compile_vir(path, NO_VERIFY)
    compared = {"pairs": 0, "ordered": 0, "masks": 0}
    original = races.RaceDetector.check
    union = race_clock._union

    def counted_union(a, b):
        compared["masks"] += bool(a[1] or b[1])
        return union(a, b)

    def check(self, unit):
        original(self, unit)
        schedule = self.plan.schedule
        clock = self.clock
        for other in self.started:
            expected = schedule.happens_before(other, unit)
            assert clock.before(other) == expected, (self.plan.names[other],
                                                     self.plan.names[unit])
            compared["pairs"] += 1
            compared["ordered"] += expected
        self.started.append(unit)

    monkeypatch.setattr(races, "PROVE_FIRST", False)      # the online clocks, every unit
    monkeypatch.setattr(races.RaceDetector, "started", [], raising=False)
    monkeypatch.setattr(races.RaceDetector, "check", check)
    monkeypatch.setattr(race_clock, "_union", counted_union)
    result = simulate(program, timing_only=True)
    assert compared["pairs"] == 72 * 71 // 2
    assert 0 < compared["ordered"] < compared["pairs"]
    assert compared["masks"] > 0      # clocks with ended positions past their prefix met
    ends = [result.timeline.end[u] for u in range(result.plan.size)
            if result.plan.names[u].startswith("act")]
    assert ends != sorted(ends)
