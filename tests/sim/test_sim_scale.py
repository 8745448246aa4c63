"""A mid-size generated program (bench/gen_program.py, 2000 tasks = 2500 units), pinned.

The figures were recorded before the plan, the event loop and the race checker
were optimized (issue 5, benchmark 1), and re-recorded when the SHAVE timing
model became VLIW (issue 6) and when the calibrated cost model came (issue 12:
DDR read/write latencies and the DPU mechanisms); any change to them is a change in the simulator's
semantics, not an optimization.  The timeline digest covers every
unit's start, end, engine, stall and cause.
"""

from __future__ import annotations

import hashlib
import sys

import pytest

from runtime_sim.simulator import simulate
from tests.sim.simlib import NO_VERIFY, REPO, compile_vir

sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402

CYCLES = 611916.666666667
EVENTS = 3516
DIGEST = "46ad6794900940a87d6b17fbe766c9db73fb00c7406226956b4267cc15174b71"


def _digest(timeline) -> str:
    state = (timeline.start, timeline.end, timeline.engine, timeline.stall, timeline.cause)
    return hashlib.sha256(repr(state).encode()).hexdigest()


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("scale") / "gen2000.vir"
    path.write_text(generate(2000))
    return compile_vir(path)


@pytest.mark.parametrize("races", [False, True])
def test_generated_program_cycles_events_and_timeline_are_pinned(program, races):
    result = simulate(program, timing_only=True, races=races)
    assert result.plan.size == 2500
    assert result.cycles == CYCLES
    assert result.timeline.events == EVENTS
    assert sum(result.timeline.start) == 760491206.0000005
    assert len(result.timeline.ddr_samples) == 1985
    assert _digest(result.timeline) == DIGEST
    assert result.races == []


def test_generated_program_with_numerics_has_the_same_timeline(program):
    result = simulate(program, races=True)
    assert result.cycles == CYCLES and _digest(result.timeline) == DIGEST
    assert result.outputs["out"].shape == (500, 16, 8, 16)


def _racy_source() -> str:
    """The generated program with some buffer-reuse barriers dropped: every 7th load
    no longer waits for the conv that read its buffer 4 blocks earlier, every 11th
    activation no longer waits for the store that read its output buffer."""
    source = generate(2000)
    for k in range(4, 500, 7):
        x = f"%x{k % 2}_{(k // 2) % 2}"
        source = source.replace(f"  load{k}: dma %in{k} -> {x} channel 0 waits(%c{k - 4})",
                                f"  load{k}: dma %in{k} -> {x} channel 0")
    for k in range(4, 500, 11):
        source = source.replace(f"waits(%c{k}, %s{k - 4}) updates(%a{k})",
                                f"waits(%c{k}) updates(%a{k})")
    return source


def test_racy_generated_program_reports_the_same_races(tmp_path):
    path = tmp_path / "racy.vir"
    path.write_text(_racy_source())
    result = simulate(compile_vir(path, NO_VERIFY), timing_only=True)
    assert result.cycles == CYCLES and result.timeline.events == EVENTS
    messages = [d.message for d in result.races]
    assert len(messages) == 21 and messages[-1] == "168 more races not shown"
    assert messages[0] == ("race on CMX of tile 0 bytes 0x1200..0x1bff: conv0.v0 (DPU tile 0) "
                           "reads %x0_0 and load4 (DMA channel 0) writes %x0_0, and no barrier "
                           "orders the two tasks")
    assert messages[8] == ("race on CMX of tile 1 bytes 0x1200..0x1bff: conv21.v0 (DPU tile 1) "
                           "reads %x1_0 and load25 (DMA channel 0) writes %x1_0, and no barrier "
                           "orders the two tasks")
    digest = hashlib.sha256("\n".join(messages).encode()).hexdigest()
    assert digest == "24151eac726e6b7e529cecc86e1790cd767174a7d27317d534a2cb5baeebbd4c"
    first = result.races[0]
    assert (first.loc.line, first.loc.col) == (3034, 3)        # load4
    assert [(loc.line, note) for loc, note in first.notes] == [(4030, "conv0.v0 is here")]
