"""The race proof before the run (``runtime_sim.race_proof``) agrees with the online checks.

Every program the tests and examples simulate, and random pipelines with
barriers dropped at random, run twice: with the proof first and with the
online checks only.  The proof holds exactly when the online checks find no
race, and the two runs give the same races, errors, cycles and timeline.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import runtime_sim.races as races
from runtime_sim.network import Network
from runtime_sim.plan import build_plan
from runtime_sim.simarch import sim_arch_for
from runtime_sim.simulator import simulate
from tests.sim.simlib import DATA, NO_VERIFY, REPO, compile_vir
from vpuc.diagnostics import VpucError

PROGRAMS = sorted([*DATA.glob("*.vir"), *(REPO / "examples").glob("*.vir"),
                   *(REPO / "tests" / "golden" / "errors").glob("race_*.vir")])


def _proven(program) -> bool:
    plan = build_plan(program, sim_arch_for(program.arch))
    return races.RaceDetector(plan, Network(program).memory).proven


def _run(program, monkeypatch, prove: bool, timing_only: bool, max_cycles=None):
    monkeypatch.setattr(races, "PROVE_FIRST", prove)
    try:
        result = simulate(program, timing_only=timing_only, max_cycles=max_cycles)
    except VpucError as exc:
        return "error", [str(d) for d in exc.diagnostics]
    timeline = result.timeline
    return ([str(d) for d in result.races], timeline.start, timeline.end, timeline.engine,
            timeline.stall, timeline.cause, result.cycles)


def _compiled(path: Path):
    """The full pipeline's program; without the verifier where it refuses (the races).
    Without the verifier a pass may fail on what it would have refused: any exception."""
    for pipeline in ("compile", NO_VERIFY, "allocate-cmx," + NO_VERIFY):
        try:
            return compile_vir(path, pipeline)
        except Exception:  # noqa: BLE001 -- see the docstring
            continue
    return None


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("timing_only", [True, False])
def test_proof_and_online_checks_give_the_same_run(path, timing_only, monkeypatch):
    program = _compiled(path)
    if program is None:
        pytest.skip("does not compile without the verifier")
    # spin.vir's kernel never ends: stopped by the cycle limit, as its own test does
    limit = 200_000 if path.name == "spin.vir" else None
    proved = _run(program, monkeypatch, True, timing_only, limit)
    online = _run(program, monkeypatch, False, timing_only, limit)
    assert proved == online
    monkeypatch.setattr(races, "PROVE_FIRST", True)
    if Network(program).memory.dynamic:
        assert not _proven(program)        # dims set during the run: the online checks decide
    elif online[0] != "error":
        assert _proven(program) == (online[0] == []), "the proof must hold iff no race"


def test_racy_programs_are_not_proven(monkeypatch):
    racy = [p for p in PROGRAMS if p.name.startswith("race") or p.name == "late_race.vir"]
    assert len(racy) >= 4
    for path in racy:
        program = _compiled(path)
        if program is not None and not Network(program).memory.dynamic:
            assert not _proven(program), path.name


def _random_pipeline(rng: random.Random, blocks: int) -> str:
    """Loads into two CMX slots, a kernel per block on one or two SHAVEs, stores out;
    each barrier edge kept with probability 0.9, so some runs race and some do not."""
    lines = ["module @random arch NPU37XX",
             'kernel @relu(input: memref<*xf16>, output: memref<*xf16>) from library "relu"',
             'kernel @runtime() from library "runtime"', "runtime @runtime stacks(16384, 16384)",
             f"input %in : {blocks}x64xf16", f"output %out : {blocks}x64xf16"]
    dma, act = [], []
    for k in range(blocks):
        slot = k % 2
        lines += [f"cmx %a{k} : 64xf16 tile 0 at {slot * 256}",
                  f"cmx %b{k} : 64xf16 tile 0 at {512 + slot * 256}",
                  f"view %in{k} = %in[{k}, :]", f"view %out{k} = %out[{k}, :]",
                  f"barrier %l{k}", f"barrier %d{k}", f"barrier %s{k}"]

        def keep(name: str) -> str:
            return name if rng.random() < 0.9 else ""
        load_waits = ",".join(b for b in [keep(f"%d{k - 2}") if k >= 2 else ""] if b)
        store_waits = keep(f"%d{k}")
        act_waits = ",".join(b for b in [keep(f"%l{k}"), keep(f"%s{k - 2}") if k >= 2 else ""]
                             if b)
        dma.append(f"  load{k}: dma %in{k} -> %a{k} channel 0"
                   + (f" waits({load_waits})" if load_waits else "") + f" updates(%l{k})")
        dma.append(f"  store{k}: dma %b{k} -> %out{k} channel 1"
                   + (f" waits({store_waits})" if store_waits else "") + f" updates(%s{k})")
        act.append(f"  act{k}: sw @relu on tile 0 inputs(%a{k} as %x) outputs(%b{k} as %y)"
                   + (f" waits({act_waits})" if act_waits else "") + f" updates(%d{k}) {{")
        act += ["    run(%x, %y)", "  }"]
    return "\n".join(lines + ["tasks DMA {"] + dma + ["}", "tasks ACT_SHAVE {"] + act
                     + ["}"]) + "\n"


@pytest.mark.parametrize("seed", range(12))
def test_random_pipelines_proof_matches_the_online_checks(seed, tmp_path, monkeypatch):
    path = tmp_path / "random.vir"
    path.write_text(_random_pipeline(random.Random(seed), 6))
    program = compile_vir(path, NO_VERIFY)
    proved = _run(program, monkeypatch, True, True)
    online = _run(program, monkeypatch, False, True)
    assert proved == online
    if online[0] != "error":
        monkeypatch.setattr(races, "PROVE_FIRST", True)
        assert _proven(program) == (online[0] == [])


ZOO_SMALL = {"resnet18": {"size": 32}, "mobilenet_v3_small": {"size": 32},
             "encoder_layer": {"seq": 24, "width": 32, "heads": 2}}


@pytest.mark.parametrize("model", sorted(ZOO_SMALL))
def test_zoo_models_are_proven_and_run_the_same(model, tmp_path, monkeypatch):
    """The small zoo models: proven race-free, the same timeline with the online checks,
    and timing-only (constants not copied, no per-unit hook) as the run with numerics."""
    from vpuc.api import compile
    from vpuc.onnx_import import zoo
    path = tmp_path / f"{model}.onnx"
    zoo.ZOO[model](seed=0, **ZOO_SMALL[model]).save(path, model)
    program = compile(str(path))
    assert _proven(program)
    proved = _run(program, monkeypatch, True, True)
    assert proved == _run(program, monkeypatch, False, True)
    assert proved[0] == []
    numerics = _run(program, monkeypatch, True, False)
    assert proved[1:] == numerics[1:]


def _footprints_agree(program) -> int:
    """The proof's footprints (rows computed lazily) against the online detector's groups:
    the same spans and rows for every access, the same shared bytes for every pair of
    accesses in one memory.  Returns how many pairs had a strided side."""
    from runtime_sim.race_access import Accesses
    from runtime_sim.race_live import LiveAccesses
    from runtime_sim.race_proof import Footprint, footprint_overlap
    plan = build_plan(program, sim_arch_for(program.arch))
    memory = Network(program).memory
    live = LiveAccesses()
    eager = Accesses(plan, memory, lambda span: live.group(*span))
    lazy = Accesses(plan, memory, lambda span: Footprint(*span), lazy=True)
    groups, prints = [], []
    for u in range(plan.size):
        for (group, write, name), (found, write2, name2) in zip(eager(u), lazy(u), strict=True):
            assert (write, name) == (write2, name2)
            assert (group.key, group.lo, group.hi) == (found.key, found.lo, found.hi), name
            groups.append(group)
            prints.append(found)
    strided = 0
    for i in range(len(groups)):
        for j in range(i):
            a, b = groups[i], groups[j]
            if a.key != b.key:
                continue
            strided += a.rows is not None or b.rows is not None
            assert footprint_overlap(prints[i], prints[j]) == live.overlap(a, b)
    for group, found in zip(groups, prints):
        assert (group.rows is None) == (found.rows is None)
        if group.rows is not None:
            assert (group.rows == found.rows).all()
    return strided


def test_lazy_footprints_match_the_online_groups(tmp_path):
    from vpuc.api import compile
    from vpuc.onnx_import import zoo
    path = tmp_path / "mobilenet_v3_small.onnx"
    zoo.ZOO["mobilenet_v3_small"](seed=0, size=32).save(path, "mobilenet_v3_small")
    assert _footprints_agree(compile(str(path))) > 100     # DPU boxes: strided regions
    for path in PROGRAMS:
        program = _compiled(path)
        if program is not None and not Network(program).memory.dynamic:
            _footprints_agree(program)


def _columns_agree(program) -> bool:
    """The proof's access columns (DPU boxes' spans in numpy) against the reference, the
    lazy ``Accesses`` of every unit: the same rows, and the same proof from both."""
    from runtime_sim.race_access import Accesses
    from runtime_sim.race_columns import access_columns, of_accesses
    from runtime_sim.race_proof import Footprint, race_free
    plan = build_plan(program, sim_arch_for(program.arch))
    memory = Network(program).memory
    try:
        reference = of_accesses([Accesses(plan, memory, lambda span: Footprint(*span),
                                          lazy=True)(u) for u in range(plan.size)])
    except VpucError:
        with pytest.raises(VpucError):
            access_columns(plan, memory)
        return False
    fast = access_columns(plan, memory)
    assert fast.unit.tolist() == reference.unit.tolist()
    assert ([fast.memories[k] for k in fast.key.tolist()]
            == [reference.memories[k] for k in reference.key.tolist()])
    for column in ("lo", "hi", "write"):
        assert getattr(fast, column).tolist() == getattr(reference, column).tolist(), column
    strided = 0
    for i in range(len(fast.unit)):
        rows, expected = fast.rows(i), reference.rows(i)
        assert (rows is None) == (expected is None)
        if rows is not None:
            strided += 1
            assert rows.tolist() == expected.tolist()
    assert race_free(plan, fast) == race_free(plan, reference)
    return strided > 0


def test_access_columns_match_the_reference_accesses(tmp_path):
    from vpuc.api import compile
    from vpuc.onnx_import import zoo
    path = tmp_path / "mobilenet_v3_small.onnx"
    zoo.ZOO["mobilenet_v3_small"](seed=0, size=32).save(path, "mobilenet_v3_small")
    assert _columns_agree(compile(str(path)))       # DPU boxes, some strided
    import sys
    sys.path.insert(0, str(REPO / "bench"))
    from gen_program import generate
    generated = tmp_path / "gen.vir"
    generated.write_text(generate(96))              # DPU variants repeated over a few buffers
    _columns_agree(compile_vir(generated))
    checked = 0
    for path in PROGRAMS:
        program = _compiled(path)
        if program is not None and not Network(program).memory.dynamic:
            _columns_agree(program)
            checked += 1
    assert checked > 20


def _random_columns(rng: random.Random, units: int):
    """Dense accesses of random sizes (a byte to 200 KiB) in a few memories."""
    import numpy as np
    from runtime_sim.race_columns import Columns
    rows = []
    for u in range(units):
        for _ in range(rng.randint(0, 3)):
            lo = rng.randrange(0, 1 << 20)
            size = rng.choice([1, rng.randint(1, 4096), rng.randint(1, 200_000)])
            rows.append((u, rng.randrange(3), lo, lo + size, rng.random() < 0.4))
    unit, key, lo, hi, write = (np.asarray(c, dtype) for c, dtype in zip(
        zip(*rows), (np.int64, np.int64, np.int64, np.int64, bool)))
    return Columns(unit, key, lo, hi, write, [None] * len(rows), [0, 1, 2]), rows


@pytest.mark.parametrize("seed", range(20))
def test_page_masks_keep_every_pair_sharing_a_written_byte(seed):
    """The page masks' filter drops only pairs that share no byte one of them writes, at
    every granule; ``_racing`` with it answers as access against access."""
    import numpy as np
    from runtime_sim.race_proof import MASK_PAGE_BITS, _racing, page_masks
    rng = random.Random(seed)
    units = 40
    columns, rows = _random_columns(rng, units)
    by_unit = {u: [r for r in rows if r[0] == u] for u in range(units)}

    def conflict(a: int, b: int) -> bool:
        return any(x[1] == y[1] and x[2] < y[3] and y[2] < x[3] and (x[4] or y[4])
                   for x in by_unit[a] for y in by_unit[b])
    pairs = [(a, b) for a in range(units) for b in range(units) if a != b]
    expected = [conflict(a, b) for a, b in pairs]
    assert 0 < sum(expected) < len(pairs)
    for page_bits in MASK_PAGE_BITS:
        touched, written = page_masks(columns, units, page_bits)
        kept = [bool((written[a] & touched[b]) | (touched[a] & written[b])) for a, b in pairs]
        assert all(k for k, e in zip(kept, expected) if e)
        assert not all(kept)                  # it does drop some
    for (a, b), racing in zip(pairs, expected):
        assert _racing(columns, units, np.asarray([a]), np.asarray([b])) == racing


def _reference_order(plan):
    """The order and start clocks by ``HappensBefore.start`` and ``end`` a unit at a time
    (the online detector's clocks), as the proof computed them before they were inlined."""
    from runtime_sim.race_clock import HappensBefore
    clock = HappensBefore(plan)
    producers_left = list(plan.producer_count)
    head = [0] * len(plan.queue_units)
    order, starts = [], [None] * plan.size
    progress = True
    while progress:
        progress = False
        for q, units in enumerate(plan.queue_units):
            while head[q] < len(units) and not any(producers_left[b]
                                                   for b in plan.waits[units[head[q]]]):
                u = units[head[q]]
                clock.start(u)
                starts[u] = clock.current
                clock.end(u)
                order.append(u)
                head[q] += 1
                progress = True
                for b in plan.updates[u]:
                    producers_left[b] -= 1
    return order, starts


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_inlined_clocks_match_the_online_clocks(path):
    """``happens_before_order``'s start clocks are ``HappensBefore``'s, unit by unit (the
    topological orders may differ: a start clock depends only on the graph)."""
    from runtime_sim.race_proof import happens_before_order
    program = _compiled(path)
    if program is None:
        pytest.skip("does not compile without the verifier")
    plan = build_plan(program, sim_arch_for(program.arch))
    found = happens_before_order(plan)
    order, starts = _reference_order(plan)
    if found is None:
        assert len(order) < plan.size           # the barriers form a cycle
        return
    multi, proof_order, proof_starts = found
    assert sorted(proof_order) == sorted(order) == list(range(plan.size))
    assert multi == [engines > 1 for engines in plan.queue_engines]
    assert proof_starts == [_as_sets(clock, multi) for clock in starts]


def _as_sets(clock: list, multi: list[bool]) -> list[int]:
    """A ``HappensBefore`` clock as the proof writes it: per queue the positions known
    ended as the bits of an int (a one-engine queue's entry: 0..last; a multi-engine
    queue's: 0..prefix and bit i of the mask for prefix + 1 + i)."""
    sets = []
    for entry, several in zip(clock, multi):      # the last item, a flag, has no queue
        prefix, mask = entry if several else (entry, 0)
        sets.append((1 << (prefix + 1)) - 1 | mask << (prefix + 1))
    return sets
