"""``schedule_deps.relax_gates`` (``--schedule default``): loads wait on the stores of the
bytes they read, not on the previous segment's end; other tasks wait on the gate two
back, unless allocate-cmx, tried on the result, finds no room for one of their segment's
buffers; the successful trial's placement is what allocate-cmx gives the program."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc import api
from vpuc.arch import load_arch
from vpuc.fusion import lower_graph, schedule_deps
from vpuc.fusion.resident import shared_buffers
from vpuc.ir.module import BufferKind
from vpuc.ir.provenance import by_dotted_prefix
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import encoder_layer, mobilenet_v3_small, resnet18
from vpuc.passes import allocate_cmx


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return resnet18(size=32, width=8, classes=10).save(
        tmp_path_factory.mktemp("deps") / "r.onnx", "resnet18")


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    """A model with tasks waiting on the gate two back (its squeeze-excite pools): ResNet-18
    has none left since its one DMA segment, the flatten before the Gemm, folds into the
    Gemm's load (``fold_views``)."""
    return mobilenet_v3_small(size=64, classes=10).save(
        tmp_path_factory.mktemp("deps") / "m.onnx", "mnv3")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return encoder_layer(seq=17, width=48, heads=3).save(
        tmp_path_factory.mktemp("deps") / "e.onnx", "enc")


def _compile(model, monkeypatch, fail_segment: int | None, failures: int = 1):
    seen = {}
    relax, trial = schedule_deps.relax_gates, schedule_deps._trial_allocation

    def recording(module, keys, finishes, arch, reserve, trial=True, outcome=None):
        seen.update(keys=keys, finishes=finishes, module=module)
        return relax(module, keys, finishes, arch, reserve, trial, outcome)

    def failing(module, arch, users=None):
        seen["trials"] = seen.get("trials", 0) + 1
        if fail_segment is not None and seen["trials"] <= failures:
            # as if allocate-cmx had named a buffer of that segment
            return None, seen["keys"][fail_segment] + ".t0s0"
        return trial(module, arch, users)

    monkeypatch.setattr(lower_graph, "relax_gates", recording)
    monkeypatch.setattr(schedule_deps, "_trial_allocation", failing)
    api.compile(model, schedule="default")
    return seen


def _load_test(seen):
    """Whether a task is one of rule 2's loads: from DDR (or a network input), or a copy
    out of a value kept in CMX between segments (resident.py)."""
    symbols = SymbolTable(seen["module"])
    index = {k: s for s, k in enumerate(seen["keys"])}
    kept = shared_buffers(seen["module"], lambda label: by_dotted_prefix(index, label))

    def is_load(t):
        if not isinstance(t, DmaTask) or symbols.region(t.dst).kind is not BufferKind.CMX:
            return False
        src = symbols.region(t.src)
        return src.kind in (BufferKind.DDR, BufferKind.INPUT) or src.root.name in kept
    return is_load


def _waits_of(seen, segment: int, loads: bool = False) -> set[str]:
    """The waits of a segment's tasks: its loads (rule 2) or the others."""
    key = seen["keys"][segment] + "."
    is_load = _load_test(seen)
    return {w for tl in seen["module"].task_lists for t in tl.tasks
            if (t.label or "").startswith(key) and is_load(t) == loads for w in t.waits}


def _two_back(seen) -> int:
    """A segment s >= 2 a task of which, other than a load, waits on the gate two back."""
    return next(s for s in range(2, len(seen["keys"]))
                if seen["finishes"][s - 2] in _waits_of(seen, s))


@pytest.mark.parametrize("name", ["model", "mobilenet"])
def test_segments_wait_two_back_and_loads_on_data(name, request, monkeypatch):
    seen = _compile(request.getfixturevalue(name), monkeypatch, None)
    assert seen["trials"] == 1
    if name == "mobilenet":     # ResNet-18 has no such task left (``mobilenet``)
        _two_back(seen)
    # a load waits on a gate only as the barrier of a store of the bytes it reads
    module = seen["module"]
    symbols = SymbolTable(module)
    updaters = {}
    for tl in module.task_lists:
        for t in tl.tasks:
            for u in t.updates:
                updaters.setdefault(u, []).append(t)
    gates = set(seen["finishes"])
    loads = 0
    for tl in module.task_lists:
        for t in tl.tasks:
            if not isinstance(t, DmaTask) or symbols.region(t.dst).kind is not BufferKind.CMX \
                    or symbols.region(t.src).kind is not BufferKind.DDR:
                continue
            loads += 1
            for w in gates.intersection(t.waits):
                (store,) = updaters[w]
                assert symbols.region(store.dst).root is symbols.region(t.src).root


def test_a_segment_whose_buffer_finds_no_room_keeps_its_gate(mobilenet, monkeypatch):
    s = _two_back(_compile(mobilenet, monkeypatch, None))
    seen = _compile(mobilenet, monkeypatch, s)
    assert seen["trials"] == 2
    assert seen["finishes"][s - 2] not in _waits_of(seen, s)
    assert seen["finishes"][s - 1] in _waits_of(seen, s)


def test_allocate_cmx_takes_the_trial_placement_when_it_holds(model, monkeypatch):
    placements = []
    take = allocate_cmx.take_placement

    def recording(module, arch, offsets):
        placements.append(dict(offsets))
        return take(module, arch, offsets)

    monkeypatch.setattr(allocate_cmx, "take_placement", recording)
    taken = api.compile(model, schedule="default").module
    assert len(placements) == 1
    # the same placement as allocate-cmx finds on its own (the trial ran it on this module)
    monkeypatch.setattr(allocate_cmx, "take_placement", lambda *a: False)
    fresh = api.compile(model, schedule="default").module
    offsets = {b.name: b.offset for b in fresh.buffers if b.kind is BufferKind.CMX}
    assert offsets == {b.name: b.offset for b in taken.buffers if b.kind is BufferKind.CMX}
    assert set(placements[0]) == set(offsets)


def test_a_placement_that_no_longer_holds_is_refused(model):
    """Every CMX buffer at offset 0 breaks the overlap rule: allocate-cmx refuses it and
    leaves the module as it was (then places the buffers itself)."""
    module = api.compile(model, schedule="default").module
    arch = load_arch(module.arch)
    cmx = [b for b in module.buffers if b.kind is BufferKind.CMX]
    wanted = {b.name: b.offset for b in cmx}
    for b in cmx:
        b.offset = None
    assert not allocate_cmx.take_placement(module, arch, {b.name: 0 for b in cmx})
    assert all(b.offset is None for b in cmx)
    assert not allocate_cmx.take_placement(module, arch, {**wanted, cmx[0].name: 32})
    assert allocate_cmx.take_placement(module, arch, wanted)
    assert {b.name: b.offset for b in cmx} == wanted


def _dma(program):
    return [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DmaTask)]


def test_loads_wait_on_the_stores_they_read_and_segments_overlap(tmp_path, monkeypatch):
    path = encoder_layer(seq=17, width=48, heads=3).save(tmp_path / "enc.onnx", "enc")
    program = api.compile(path)
    symbols = SymbolTable(program.module)
    dma = _dma(program)
    updated_by = {}
    for t in dma:
        for u in t.updates:
            updated_by.setdefault(u, []).append(t)
    early = 0
    for t in dma:
        src, dst = symbols.region(t.src), symbols.region(t.dst)
        # a DDR value, or one kept whole in CMX between segments (resident.py): a CMX
        # buffer of no segment's own (no dotted prefix)
        computed = src.kind is BufferKind.DDR or (src.kind is BufferKind.CMX
                                                 and "." not in src.root.name)
        if not computed or dst.kind is not BufferKind.CMX or "." not in dst.root.name:
            continue
        own = t.label.split(".")[0]
        for w in t.waits:
            stores = updated_by.get(w, [])
            # a store of another segment, one of several it makes: not its last
            if stores and all(s.label.split(".")[0] != own for s in stores) \
                    and not w.endswith("finished"):
                assert all(symbols.region(s.dst).root is src.root for s in stores)
                early += 1
    assert early > 0
    rng = np.random.default_rng(5)
    tokens = {"tokens": rng.standard_normal((1, 17, 48)).astype(np.float16)}
    pipelined = api.simulate(program, tokens)
    assert not pipelined.races
    monkeypatch.setattr(lower_graph, "relax_gates", lambda *a, **k: None)
    gated = api.simulate(api.compile(path), tokens)
    # relax_gates changes only waits: the same tasks run the same BLAS calls on the same
    # shapes and layouts (one BLAS thread), so the bits are the same by construction
    for name, value in gated.outputs.items():
        np.testing.assert_array_equal(pipelined.outputs[name], value)
    assert pipelined.cycles < gated.cycles


def test_matmul_blocks_that_fit_take_a_slot_each_by_default(tmp_path):
    """``lower_dpu_matmul._slots``: the encoder's MatMuls at full size (7 to 13 row blocks
    of 197 tokens) fit a tile's CMX budget at once, so under --schedule default no block waits
    for an earlier block's store; naive double-buffers them."""
    from vpuc.ir.tasks import DpuTask
    path = encoder_layer(seq=197, width=192, heads=3).save(tmp_path / "enc.onnx", "enc")

    def slot_waits(schedule):
        program = api.compile(path, schedule=schedule)
        return [t.label for tl in program.module.task_lists for t in tl.tasks
                if isinstance(t, DpuTask) and any(".stored" in w for w in t.waits)]

    assert slot_waits("naive")
    assert slot_waits("default") == []


def _loads_gated(seen, segment: int) -> list[bool]:
    """For each of rule 2's loads in the segment: whether it waits on its predecessor's gate."""
    key, gate = seen["keys"][segment] + ".", seen["finishes"][segment - 1]
    is_load = _load_test(seen)
    return [gate in t.waits for tl in seen["module"].task_lists for t in tl.tasks
            if (t.label or "").startswith(key) and is_load(t)]


def test_a_segment_that_still_finds_no_room_loads_after_its_gate(encoder, monkeypatch):
    """Rule 3 off for the segment, then for the next one, then its loads keep their gate
    (rule 2 off): the first blocks wait for the whole predecessor again.  (The encoder:
    its MatMuls' values stay in DDR, ResNet-18's are kept in CMX.)"""
    relaxed = _compile(encoder, monkeypatch, None)
    s = next(s for s in range(1, len(relaxed["keys"]) - 1)
             if not all(_loads_gated(relaxed, s)))
    seen = _compile(encoder, monkeypatch, s, failures=3)
    assert seen["trials"] == 4
    assert all(_loads_gated(seen, s))


def test_a_kept_value_that_finds_no_room_costs_its_producer_its_overlap(mobilenet,
                                                                        monkeypatch):
    """A value kept in CMX (``resident.py``, named as the graph's, under no segment) that a
    trial finds no room for gives up the two-back gate of the segment that first writes it,
    not every segment's (before: all of them; DenseNet-121 with its dense layers chained,
    ``fuse_halo_conv``, 3,942,224 cycles instead of 3,744,698)."""
    seen = {}
    relax, trial = schedule_deps.relax_gates, schedule_deps._trial_allocation

    def recording(module, keys, finishes, arch, reserve, trial=True, outcome=None):
        seen.update(keys=keys, finishes=finishes, module=module)
        return relax(module, keys, finishes, arch, reserve, trial, outcome)

    def failing(module, arch, users=None):
        seen["trials"] = seen.get("trials", 0) + 1
        if seen["trials"] == 1:
            index = {k: s for s, k in enumerate(seen["keys"])}
            kept = shared_buffers(module, lambda label: by_dotted_prefix(index, label))
            seen["kept"] = next(iter(sorted(kept)))
            return None, seen["kept"]
        return trial(module, arch, users)

    monkeypatch.setattr(lower_graph, "relax_gates", recording)
    monkeypatch.setattr(schedule_deps, "_trial_allocation", failing)
    api.compile(mobilenet, schedule="default")
    assert seen["trials"] == 2 and seen["kept"] not in seen["keys"]
    _two_back(seen)          # some segment still waits on the gate two back


def test_a_trial_of_waits_already_tried_is_not_run_again(mobilenet, monkeypatch):
    """A failed trial's choices that lead back to relaxations already tried (a buffer
    charged to no segment: rule 3 given up everywhere, attempt after attempt) reuse that
    trial's failure instead of allocating the same program again; the outcome still lists
    one failure per attempt, as ``resident_measure`` reads it."""
    calls: list[dict] = []
    relax = schedule_deps.relax_gates

    def recording(module, keys, finishes, arch, reserve, trial=True, outcome=None):
        calls.append({"trials": 0, "outcome": outcome})
        return relax(module, keys, finishes, arch, reserve, trial, outcome)

    def failing(module, arch, users=None):
        calls[-1]["trials"] += 1
        return None, ""                      # no buffer named: charged to no segment

    monkeypatch.setattr(lower_graph, "relax_gates", recording)
    monkeypatch.setattr(schedule_deps, "_trial_allocation", failing)
    api.compile(mobilenet, schedule="default")
    first = calls[0]
    # rule 3 everywhere, then nowhere; the same again is not tried
    assert first["trials"] == 2
    assert first["outcome"]["failed"] == [""] * (schedule_deps.TRIALS + 1)


def test_the_fallback_schedules_a_copy_that_scheduling_left_as_parsed(mobilenet, monkeypatch):
    """``copy_program`` (the channel-0 fallback's program, instead of parsing the text
    again): scheduling the lowered program changes its waits, channels and order, and
    leaves the copy taken before it as parsed."""
    from vpuc.ir.module import copy_program
    from vpuc.vir.printer import print_module
    taken = []

    def recording(module):
        twin = copy_program(module)
        taken.append((module, twin, print_module(module)))
        return twin

    monkeypatch.setattr(lower_graph, "copy_program", recording)
    api.compile(mobilenet, schedule="default")
    module, twin, parsed = taken[0]
    assert print_module(twin) == parsed
    assert print_module(module) != parsed
