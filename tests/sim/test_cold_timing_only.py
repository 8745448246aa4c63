"""What a cold timing-only simulation skips, each checked against the work it skips:
loop bodies refused from their words, the path walk's ops shared per word and its
step over vector arithmetic, and the collector never examining what a simulation made
at its end (``vpuc.perf.to_oldest_generation``), which needs a simulation to leave no
reference cycles behind.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import runtime_sim.engines.shave as shave
from runtime_sim.isa.cycles_slice import analyse
from runtime_sim.isa.interpreter import Program
from tests.sim.test_sim_cycles_only import _library_and_zoo_programs
from tests.sim.test_sim_cycles_only import SMALL, program  # noqa: F401 -- the fixture
from vpuc.api import compile, simulate
from vpuc.onnx_import import zoo


@pytest.fixture(scope="module")
def encoder_program(tmp_path_factory):
    """The encoder layer: its LayerNorm and Softmax are library kernels with row loops."""
    path = tmp_path_factory.mktemp("cold_walks") / "encoder_layer.onnx"
    zoo.ZOO["encoder_layer"](seed=0, **SMALL["encoder_layer"]).save(path, "encoder_layer")
    return compile(str(path))


def test_early_refusals_are_the_plans_own(program):
    """Every backward branch of the library's and the model's kernels: a body refused from
    its words alone (``_refused_early``) is refused by the plan with the same reason."""
    from runtime_sim.isa.cycles_only_loops import _refused_early, plan_timing_loop
    from runtime_sim.isa.loop_plan import NotBatchable
    from runtime_sim.isa.semantics import operand_access
    early = 0
    for kernel in _library_and_zoo_programs(program):
        critical = analyse(kernel.decoded).critical_at or (0,) * len(kernel.decoded)
        for branch, dec in enumerate(kernel.decoded):
            offset = operand_access(dec).branch
            if offset is None or offset > 0 or offset % 8:
                continue
            head = branch + offset // 8
            if head < 0:
                continue
            found = _refused_early(kernel, head, branch)
            try:
                plan_timing_loop(kernel, head, branch, critical[head])
                why = None
            except NotBatchable as exc:
                why = str(exc)
            if found is not None:
                early += 1
                assert found == why, (kernel.name, head, branch)
    assert early > 10               # the driver's loops with calls and branches


def test_the_walks_of_programs_sharing_code_share_each_words_op():
    """The library kernels share their driver's words: the path walk's ``_Op`` of a word
    is worked out once for all of them, and is what the word alone gives."""
    from runtime_sim.isa.path_ops import _make_op, instructions
    from vpuc.kernel_library import load_library_kernel
    mvn, softmax = (Program(load_library_kernel(name).text, 0, name)
                    for name in ("mvn", "softmax"))
    a, b = instructions(mvn), instructions(softmax)
    shared = [i for i in range(min(len(a), len(b))) if mvn.decoded[i] is softmax.decoded[i]]
    assert len(shared) > 300                    # the driver
    for i in shared:
        assert a[i] is b[i]
        assert a[i] == _make_op(mvn.decoded[i])
    other = next(i for i in range(len(b)) if b[i] != a[i])
    assert b[other] == _make_op(softmax.decoded[other])


def _cyclic_garbage_of(run) -> list:
    """The objects ``run`` made that only the cyclic collector frees, once its result is
    dropped: whether they became garbage during the run or with the result."""
    import gc
    gc.collect()
    gc.disable()
    # What exists before the run is held until it ends: a process-wide bounded cache that
    # fills up during the run (after the rest of a test session's kernels) and is emptied
    # drops what earlier runs made, not what this one made.
    earlier = gc.get_objects()
    try:
        result = run()
        del result
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        del earlier
        gc.enable()


@pytest.mark.parametrize("timing_only", [True, False])
def test_a_simulation_leaves_no_cycles_of_its_own(program, timing_only):
    """What a simulation made goes to the collector's oldest generation unexamined
    (``vpuc.perf.to_oldest_generation``), so none of it may need the cyclic collector
    to be freed: a dropped result's memory, plan and engines go by reference counting."""
    simulate(program, timing_only=timing_only)              # the process's caches made
    garbage = _cyclic_garbage_of(lambda: simulate(program, timing_only=timing_only))
    ours = [type(o).__qualname__ for o in garbage
            if type(o).__module__.startswith(("runtime_sim", "vpuc"))
            or isinstance(o, np.ndarray)
            or getattr(o, "__module__", "").startswith(("runtime_sim", "vpuc"))]
    assert ours == []


def test_objects_moved_to_the_oldest_generation_stay_collectable():
    import gc

    from vpuc.perf import to_oldest_generation

    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a                 # a cycle, then dropped
    alive = [Node() for _ in range(100)]
    probe = weakref.ref(a)
    del a, b
    gc.disable()
    try:
        to_oldest_generation()
        assert gc.get_count()[0] == 0 and gc.get_freeze_count() == 0
        assert probe() is not None and all(gc.is_tracked(x) for x in alive)
        assert any(x is alive[0] for x in gc.get_objects(2))
    finally:
        gc.enable()
    gc.collect()
    assert probe() is None                  # the cycle was kept for a full collection only
    gc.freeze()                             # objects someone froze on purpose stay frozen
    try:
        frozen = gc.get_freeze_count()
        to_oldest_generation()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_walks_step_over_vector_arithmetic_as_they_walk_it(encoder_program, monkeypatch):
    """The walk notes only the registers of an operation with no scalar or mask result
    (``_Op.plain``): every walk of a timing-only run, and every refusal, is the same when
    it works such operations out as any other."""
    import copy
    import dataclasses

    from runtime_sim.isa import path_batch, path_ops
    from runtime_sim.isa.path_records import PathRefused
    from runtime_sim.isa.path_walk import walk
    calls = []
    real = path_batch.walk

    def recording(prog, head, branch, R, memory, steps=None):
        calls.append((prog, head, branch, list(R), copy.deepcopy(memory), copy.deepcopy(steps)))
        return real(prog, head, branch, R, memory, steps)
    monkeypatch.setattr(path_batch, "walk", recording)
    from runtime_sim.isa import cycles_only, cycles_only_loops
    assert "mvn_f16" in encoder_program.kernels
    # nothing remembered from the other tests: every loop is walked afresh
    monkeypatch.setattr(shave, "cycles_only_results", cycles_only.Results())
    monkeypatch.setattr(cycles_only, "_TIMING", weakref.WeakKeyDictionary())
    monkeypatch.setattr(cycles_only_loops, "_PLANS", weakref.WeakKeyDictionary())
    simulate(encoder_program, timing_only=True)
    assert calls

    def walks() -> list:
        found = []
        for prog, head, branch, R, memory, steps in calls:
            try:
                w = walk(prog, head, branch, list(R), copy.deepcopy(memory), copy.deepcopy(steps))
            except PathRefused as why:
                found.append(str(why))
                continue
            found.append(([(s.index, s.op.mnemonic, s.role, s.values, s.address, s.size,
                            s.taken) for s in w.path], w.guards, w.footprints, w.promoted,
                          w.carried, w.end, w.back, w.read_words, w.bases))
        return found
    plain = walks()
    assert any(not isinstance(w, str) for w in plain)
    vector_steps = sum(path_ops._BY_WORD[id(dec)][1].plain for prog, *_ in calls
                       for dec in prog.decoded if id(dec) in path_ops._BY_WORD)
    assert vector_steps                 # the walks met vector arithmetic
    made = path_ops._make_op
    monkeypatch.setattr(path_ops, "_make_op",
                        lambda dec: dataclasses.replace(made(dec), plain=False))
    monkeypatch.setattr(path_ops, "_BY_WORD", {})
    monkeypatch.setattr(path_ops, "_OPS", weakref.WeakKeyDictionary())
    assert walks() == plain


def _reference_operand_access(dec):
    """``register_access._operand_access`` as it was, operand by operand of the word."""
    from runtime_sim.isa.register_access import U32, Access, register_key
    reads, writes, branch = [], [], None
    for op in dec.info.operands:
        kind = op.kind
        if kind == "mem":
            reads += [("reg", register_key("s", dec.fields[op.field])), ("imm", U32(dec.imm))]
        elif kind in ("imm", "f32", "f16", "sym"):
            reads.append(("imm", U32(dec.imm)))
        elif kind == "label":
            branch = int(np.int32(np.uint32(dec.imm)))
        else:
            key = register_key(kind[0], dec.fields[op.field])
            keys = [key, key + 1] if kind in ("sa2", "sd2") else [key]
            if kind in ("sa", "va", "ma", "su", "vu", "sa2"):
                reads += [("reg", k) for k in keys]
            if kind in ("sd", "vd", "md", "su", "vu", "sd2"):
                writes += keys
    return Access(tuple(reads), tuple(writes), branch)


def _same_access(found, expected) -> bool:
    return (found == expected
            and [type(v) for _, v in found.reads] == [type(v) for _, v in expected.reads])


def test_operand_access_by_format_plan_matches_the_operands(program):
    """A format's operands planned once (``register_access._plan``): every instruction of
    the ISA with random field values, and every word of the library's and the model's
    kernels, give the operands the per-operand reading gives."""
    import random
    from runtime_sim.isa.register_access import _operand_access
    from vpuc.shave.encoding import Decoded, field_values
    from vpuc.shave.isa import INSTRUCTIONS
    rng = random.Random(0)
    formats = set()
    for info in INSTRUCTIONS:
        formats.add(info.format)
        for _ in range(8):
            dec = Decoded(info, field_values(rng.getrandbits(64)))
            assert _same_access(_operand_access(dec), _reference_operand_access(dec)), info
    assert len(formats) > 10
    words = 0
    for kernel in _library_and_zoo_programs(program):
        for dec in kernel.decoded:
            words += 1
            assert _same_access(_operand_access(dec), _reference_operand_access(dec))
    assert words > 1000


def test_a_steps_cycles_only_runner_is_made_once(encoder_program, monkeypatch):
    """A straight-line block made before its steps ran holds their first-run wrappers:
    each wrapper keeps the runner it made, so a cold run makes one runner per step it
    runs (it made one per call: the encoder's full size made 2,188 for 1,154 steps).
    The cycles are the full run's."""
    from collections import Counter

    from runtime_sim.isa import cycles_only, cycles_only_loops
    monkeypatch.setattr(shave, "cycles_only_results", cycles_only.Results())
    monkeypatch.setattr(cycles_only, "_TIMING", weakref.WeakKeyDictionary())
    monkeypatch.setattr(cycles_only, "_FLATS", {})
    monkeypatch.setattr(cycles_only_loops, "_PLANS", weakref.WeakKeyDictionary())
    made: Counter = Counter()
    real = cycles_only.TimingProgram.runner

    def counting(self, index):
        made[id(self.program.flat), index] += 1
        return real(self, index)
    monkeypatch.setattr(cycles_only.TimingProgram, "runner", counting)
    timing = simulate(encoder_program, timing_only=True)
    assert len(made) > 300                  # the library kernels' drivers and rows
    assert set(made.values()) == {1}
    assert timing.cycles == simulate(encoder_program).cycles


def test_loops_without_calls_wait_before_their_walk(encoder_program, monkeypatch):
    """A loop whose plan is refused and whose body has no call and no inner loop (the
    library driver's loops over operands and dims) is not walked before it has taken its
    back-edge ``WALK_AFTER`` times; the per-row loop, which calls the row, still is.  The
    cycles are those of walking every loop at once."""
    from runtime_sim.isa import cycles_only, cycles_only_loops, path_batch
    from runtime_sim.isa.semantics import SEMANTICS
    walked = []
    real = path_batch.walk

    def recording(prog, head, branch, *args, **kwargs):
        walked.append((prog, head, branch))
        return real(prog, head, branch, *args, **kwargs)
    monkeypatch.setattr(path_batch, "walk", recording)

    def cold_run():
        monkeypatch.setattr(shave, "cycles_only_results", cycles_only.Results())
        monkeypatch.setattr(cycles_only, "_TIMING", weakref.WeakKeyDictionary())
        monkeypatch.setattr(cycles_only_loops, "_PLANS", weakref.WeakKeyDictionary())
        walked.clear()
        return simulate(encoder_program, timing_only=True).cycles

    def calls_or_loops(prog, head, branch) -> bool:
        return any(SEMANTICS[d.info.opcode].kind in ("call", "loop")
                   for d in prog.decoded[head:branch])
    waiting = cold_run()
    assert walked and all(calls_or_loops(*w) for w in walked)
    monkeypatch.setattr(cycles_only_loops, "WALK_AFTER", 0)
    assert cold_run() == waiting
    assert any(not calls_or_loops(*w) for w in walked)      # the driver's plain loops
