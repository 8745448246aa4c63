"""path_walk's runs of plain instructions (vector arithmetic) walked as one: every walk
equals the walk taking them one instruction at a time (the reference), and refuses
where and why it does, on the library kernels' row loops and on a path cut short."""

from __future__ import annotations

import numpy as np
import pytest

import runtime_sim.isa.path_batch as path_batch
import runtime_sim.isa.path_walk as path_walk
from test_path_batch import INPUT, OUTPUT, rows_source
from fastpath_testlib import random_fill, run_both


def _one_at_a_time(code, runs, start, branch):
    """The reference: a run of one plain instruction, not kept (each step walked alone)."""
    op = code[start]
    uses = tuple(dict.fromkeys([(k, "read") for k in op.first_reads]
                               + [(k, "write") for k in op.writes]))
    seen, first = set(), []
    for key, use in uses:           # a key read and written: its first use is the read
        if key not in seen:
            seen.add(key)
            first.append((key, use))
    return (path_walk.PathStep(start, op, "run"),), tuple(first), tuple(op.writes), start + 1


def _outcome(program, head, branch, R, memory, steps):
    try:
        return path_walk.walk(program, head, branch, list(R), memory, steps)
    except path_walk.PathRefused as why:
        return ("refused", str(why), why.structural, why.recurs)


@pytest.fixture
def compared(monkeypatch):
    """Every walk the fast path asks for, walked both ways at that moment; counts them."""
    real = path_batch.walk
    seen = {"walks": 0, "plain": 0}

    def both(program, head, branch, R, memory, steps=None):
        before = None if steps is None else {k: dict(v) for k, v in steps.items()}
        with monkeypatch.context() as m:
            m.setattr(path_walk, "_plain_run", _one_at_a_time)
            m.setattr(path_walk, "_RUNS", path_walk.weakref.WeakKeyDictionary())
            reference = _outcome(program, head, branch, R, memory,
                                 None if before is None else {k: dict(v) for k, v in before.items()})
        path_walk._RUNS.pop(program, None)          # cold, then warm: both equal the reference
        for _ in range(2):
            again = None if before is None else {k: dict(v) for k, v in before.items()}
            assert _outcome(program, head, branch, R, memory, again) == reference
        seen["walks"] += 1
        if not isinstance(reference, tuple):
            seen["plain"] += sum(step.op.plain for step in reference.path)
        return real(program, head, branch, R, memory, steps)

    monkeypatch.setattr(path_batch, "walk", both)
    return seen


@pytest.mark.parametrize("name", ["softmax", "mvn", "log_softmax"])
def test_library_row_walks_equal_the_walk_one_instruction_at_a_time(compared, name):
    from test_path_batch import test_library_row_loops_batch_along_their_path as rows
    rows(name, np.float16, 43, 171, False)     # sizes of their own: walks are remembered
    assert compared["walks"] and compared["plain"] > 100      # long plain runs were walked


def test_a_path_cut_inside_a_plain_run_is_refused_as_before(compared, monkeypatch):
    """MAX_PATH at every length of the row path (before, inside and after its runs of
    vector instructions): the same structural refusal, or the same walk."""
    n = 29
    words = [INPUT, OUTPUT, 12, n]
    refused = set()
    for limit in range(1, 72):          # the row path: 67 instructions, 16 plain
        monkeypatch.setattr(path_walk, "MAX_PATH", limit)
        # a pitch of its own per limit: another program (a structural refusal is kept
        # for the program's loop)
        pitch = 2 * n + 6 + 2 * limit
        _, loops, _ = run_both(rows_source(pitch, pitch + 2), words, random_fill(n),
                               min_path_iterations=1)
        refused.add(any("longer than" in reason for reason in loops.declined))
    assert refused == {True, False} and compared["plain"]


@pytest.mark.parametrize("branch, carried", [
    ("vadd.f16 v21, v21, v20", True),      # read by the row's plain runs, then written
    ("vadd.f16 v22, v21, v20", False),     # written only: nothing carried
])
def test_a_vector_read_before_a_plain_run_writes_it_is_carried(compared, branch, carried):
    n = 29
    _, loops, _ = run_both(rows_source(2 * n + 6, 2 * n + 8, branch=branch),
                           [INPUT, OUTPUT, 12, n], random_fill(n), min_path_iterations=1)
    assert compared["walks"]
    assert any("v21 is carried" in reason for reason in loops.declined) == carried
