"""A row's inner loops along a second axis (``path_inner``) against the exact interpreter:
the row loops of ``test_path_batch`` whose inner loops (an accumulator, a store) run as one
batch of rows x copies, and fall back copy by copy where a check holds for one row only."""

from __future__ import annotations

import numpy as np
import pytest

import runtime_sim.isa.path_batch as path_batch
from fastpath_testlib import random_fill, run_both, special_fill
from test_path_batch import INPUT, OUTPUT, rows_source


# --- a row's inner loops along a second axis (path_inner) ---------------------------------------

@pytest.fixture
def inner_runs(monkeypatch):
    """The inner loops ``path_inner`` ran as one batch, by their body length."""
    ran: list[int] = []
    run_inner = path_batch.run_inner

    def counted(loop, *args):
        ran.append(loop.length)
        return run_inner(loop, *args)
    monkeypatch.setattr(path_batch, "run_inner", counted)
    return ran


@pytest.mark.parametrize("n", [16, 29, 64, 200])
@pytest.mark.parametrize("op", ["vmul.f16", "vmax.f16"])
def test_a_rows_inner_loops_run_as_rows_x_copies(inner_runs, n, op):
    """Both inner loops (the max, an accumulator; the output, a store) of every row
    in one batch each: the outcome is the interpreter's.  Input and output rows of
    different pitches: the output loop runs copy by copy (its check holds for one row)."""
    run_both(rows_source(2 * n + 6, 2 * n + 6, op=op), [INPUT, OUTPUT, 12, n],
             random_fill(n), min_path_iterations=1)
    assert sorted(set(inner_runs)) == [5, 6]
    inner_runs.clear()
    run_both(rows_source(2 * n + 6, 2 * n + 8, op=op), [INPUT, OUTPUT, 12, n],
             random_fill(n), min_path_iterations=1)
    assert sorted(set(inner_runs)) == [5]


@pytest.mark.parametrize("seed", range(6))
def test_accumulators_with_nans_fold_as_the_interpreter(inner_runs, seed):
    """NaNs (either sign, signalling) and infinities in the rows: the max's fold of each
    row falls back to the instruction's own semantics, copy by copy."""
    run_both(rows_source(160, 160), [INPUT, OUTPUT, 16, 72], special_fill(seed),
             min_path_iterations=1)
    assert 5 in inner_runs


def test_an_inner_loop_storing_what_its_next_copy_loads_runs_copy_by_copy(inner_runs):
    """The output loop writes 16 bytes past its input: copy j + 1 loads what copy j
    stored, so that loop stays copy by copy (the max loop still batches)."""
    source = rows_source(256, 256).replace("    mov s13, s7\n", "    addi s13, s6, 16\n")
    run_both(source, [INPUT, OUTPUT, 12, 64], random_fill(10), min_path_iterations=1)
    assert inner_runs and 6 not in inner_runs


def test_promoted_clear_is_the_per_footprint_check():
    """``promoted_clear`` (all spans at once) against the check footprint by footprint,
    iteration by iteration, on random footprints near random stack words: both answers
    occur."""
    from types import SimpleNamespace

    from runtime_sim.isa.loop_bounds import Footprint
    from runtime_sim.isa.path_batch import promoted_clear

    def reference(walk, iterations):
        for address, size in walk.promoted.items():
            for fp in walk.footprints:
                for k in range(iterations):
                    low = fp.low + k * fp.step
                    if low < address + size and low + fp.length > address:
                        return False
        return True

    rng = np.random.default_rng(17)
    answers = set()
    for _ in range(300):
        words = {int(a): 4 for a in rng.integers(0, 512, rng.integers(0, 3)) * 4}
        footprints = [Footprint(int(rng.integers(-64, 1024)), int(rng.integers(-40, 41)),
                               int(rng.integers(1, 17)), bool(rng.integers(2)), p)
                      for p in range(rng.integers(0, 6))]
        walk = SimpleNamespace(promoted=words, footprints=footprints)
        iterations = int(rng.integers(0, 12))
        expected = reference(walk, iterations)
        assert promoted_clear(walk, iterations) == expected
        answers.add(expected)
    assert answers == {True, False}
