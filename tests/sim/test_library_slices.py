"""The library kernels' cycles slices written by ``vpuc kernels build`` and read back by
cycles-only runs (``runtime_sim.isa.library_slices``): each equal to a fresh analysis of
the same code, and never used for code, or by an analysis, they were not written for."""

from __future__ import annotations

import json

import pytest

from runtime_sim.isa import cycles_only, library_slices
from runtime_sim.isa.cycles_slice import analyse
from runtime_sim.isa.library_slices import linked, recorded_slice, slice_file, write_slices
from runtime_sim.isa.semantics import operand_access
from vpuc.arch import load_arch
from vpuc.kernel_library import library_names, load_library_kernel


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every library kernel's slice, written as ``vpuc kernels build`` writes them, and the
    kernels linked for the default architecture (what a simulation of them runs)."""
    folder = tmp_path_factory.mktemp("kernels_build")
    objects = [load_library_kernel(name) for name in library_names()]
    write_slices(folder, objects)
    return folder, {obj.name: linked(obj, load_arch()) for obj in objects}


def test_every_recorded_slice_is_the_analysis_of_its_kernel(built):
    folder, kernels = built
    assert len(list((folder / "slices").glob("*.json"))) == len(kernels)
    loads = 0
    for name, (text, program) in kernels.items():
        found, fresh = recorded_slice(program, folder), analyse(program.decoded)
        assert found is not None, name
        assert (found.roles, found.reason, found.critical_at) == \
            (fresh.roles, fresh.reason, fresh.critical_at), name
        assert found.accesses == tuple(map(operand_access, program.decoded))
        assert found.roles, name            # every library kernel's cycles are data-free
        loads += any(role.watched_load or role.store_sources for role in found.roles)
    assert loads > 10                       # load bits (big ints) written and read back


def _mvn(built):
    folder, kernels = built
    name = next(n for n in kernels if "mvn" in n)
    return folder, kernels[name]


def _rewrite(folder, text, change) -> None:
    path = slice_file(folder, text)
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_a_slice_is_used_only_for_its_own_code_and_analysis(built, tmp_path):
    folder, (text, program) = _mvn(built)
    write_slices(tmp_path, [load_library_kernel("mvn")])
    assert recorded_slice(program, tmp_path) is not None
    # another analysis wrote it
    _rewrite(tmp_path, text, lambda r: r.update(analysis="0" * 64))
    assert recorded_slice(program, tmp_path) is None
    # a file under this code's name holding other code (the digest never decides alone)
    write_slices(tmp_path, [load_library_kernel("mvn")])
    _rewrite(tmp_path, text, lambda r: r.update(text=r["text"][:-2] + format(
        int(r["text"][-2:], 16) ^ 1, "02x")))
    assert recorded_slice(program, tmp_path) is None
    # a slice of another length, a broken file, none at all
    write_slices(tmp_path, [load_library_kernel("mvn")])
    _rewrite(tmp_path, text, lambda r: r.update(kinds=r["kinds"][:-1]))
    assert recorded_slice(program, tmp_path) is None
    for bad in ({"kinds": "z"}, {"watched": [-1]}, {"sources": {"99999": "4"}}):
        write_slices(tmp_path, [load_library_kernel("mvn")])
        _rewrite(tmp_path, text, lambda r: r.update(bad))
        assert recorded_slice(program, tmp_path) is None, bad
    slice_file(tmp_path, text).write_text("{not json")
    assert recorded_slice(program, tmp_path) is None
    write_slices(tmp_path, [])              # a rebuild removes the earlier files
    assert not list((tmp_path / "slices").iterdir())
    assert recorded_slice(program, tmp_path) is None


def test_a_changed_analysis_source_changes_the_digest(monkeypatch, tmp_path):
    source = tmp_path / "cycles_slice.py"
    source.write_text("one")
    monkeypatch.setattr(library_slices, "ANALYSIS_SOURCES", (source,))
    library_slices.analysis_digest.cache_clear()
    try:
        first = library_slices.analysis_digest()
        source.write_text("two")
        library_slices.analysis_digest.cache_clear()
        assert library_slices.analysis_digest() != first
    finally:
        library_slices.analysis_digest.cache_clear()


def test_cycles_only_runs_take_the_recorded_slice(built, monkeypatch):
    """``timing_program`` asks for a recorded slice before analysing; a kernel that has
    none (a generated one, here the recorded folder emptied) is analysed."""
    folder, (text, program) = _mvn(built)
    import weakref
    monkeypatch.setattr(cycles_only, "_TIMING", weakref.WeakKeyDictionary())
    monkeypatch.setattr(library_slices, "_default_folder", lambda: folder)
    analysed = []
    monkeypatch.setattr(cycles_only, "analyse",
                        lambda decoded: analysed.append(1) or analyse(decoded))
    timing = cycles_only.timing_program(program)
    assert timing is not None and not analysed
    assert timing.slice.code == ("recorded", text)
    monkeypatch.setattr(library_slices, "_default_folder", lambda: folder / "none")
    monkeypatch.setattr(cycles_only, "_TIMING", weakref.WeakKeyDictionary())
    assert cycles_only.timing_program(program).slice.roles == timing.slice.roles
    assert analysed == [1]


def test_a_changed_opcode_kind_changes_the_digest(monkeypatch):
    """The digest covers the tables the analysis reads, not only its sources: an opcode
    whose kind changes (say a store becoming an op) invalidates every recorded slice."""
    from runtime_sim.isa import semantics
    library_slices.analysis_digest.cache_clear()
    try:
        first = library_slices.analysis_digest()
        opcode, sem = next((op, s) for op, s in semantics.SEMANTICS.items() if s.kind == "store")
        monkeypatch.setitem(semantics.SEMANTICS, opcode,
                            semantics.Semantic(sem.mnemonic, "op", sem.fn))
        library_slices.analysis_digest.cache_clear()
        assert library_slices.analysis_digest() != first
    finally:
        library_slices.analysis_digest.cache_clear()
