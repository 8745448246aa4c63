"""A chunk's ``vld`` / ``vst`` at one base and several offsets as columns of one window
(``loop_views``): each column is the very view the access alone gets, and kernels whose
unrolled bodies use them match the exact interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.isa.loop_bounds import MOD, Affine
from runtime_sim.isa.loop_plan import LoopPlan
from runtime_sim.isa.loop_views import (copies_view, grouped_view, progression_view,
                                        progression_window)
from shave_testlib import WIN_F, make_memory
from fastpath_testlib import random_fill, run_both


def _address(view: np.ndarray) -> tuple[int, tuple]:
    return view.__array_interface__["data"][0], view.strides


@settings(max_examples=200, deadline=None)
@given(st.integers(-4096, 70000), st.sampled_from([0, 16, 32, 48, 64, 80, 128, -64]),
       st.integers(1, 40), st.integers(0, 5),
       st.lists(st.sampled_from([-64, -48, -32, -16, 0, 16, 32, 48, 64]), min_size=2,
                max_size=6, unique=True), st.booleans())
def test_window_columns_are_the_accesses_own_views(start, step, rows, first, offsets,
                                                   is_store):
    memory, _ = make_memory(4096, 4096, 65536)
    base = Affine((WIN_F + start) % MOD, step % MOD)
    low = min(offsets)
    key = (0, is_store, low, max(offsets) + 16 - low)
    windows: dict = {}
    for offset in offsets:
        alone = progression_view(memory, base, first, rows, offset, is_store)
        column = grouped_view(memory, windows, {0: base}, first, rows, (None,) * 4 + (0, offset),
                              (key, offset - low), is_store)
        if alone is None or column is None:
            assert column is None and alone is None
            continue
        assert column.shape == alone.shape == (rows, 16)
        if step or is_store:        # a reloaded constant (step 0) is a shared read-only copy
            assert _address(column) == _address(alone)
        assert np.array_equal(column, alone)
    window = windows.get(key)
    if window is not None:          # only rows at least a window apart make one
        assert step >= key[3] and window.shape == (rows, key[3])
        again = progression_window(memory, base, first, rows, low, key[3], is_store)
        assert _address(again) == _address(window)


_UNROLLED = """
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    li.f16 s20, 1.5
    vbcast.h v20, s20
body:
    vld v1, 0(s2)
    vld v2, 16(s2)
    vld v3, 32(s2)
    vld v4, 48(s2)
    vmul.f16 v1, v1, v20
    vadd.f16 v2, v2, v1
    vmul.f16 v3, v3, v20
    vsub.f16 v4, v4, v3
    addi s2, s2, {step}
    addi s3, s3, {step}
    vst v1, -64(s3)
    vst v2, -48(s3)
    vst v3, -32(s3)
    vst v4, -16(s3)
    loop s4, body
    li s0, 0
    halt
"""


@pytest.mark.parametrize("step", [64, 80, 32, -64])
@pytest.mark.parametrize("count", [1, 7, 100])
def test_unrolled_bodies_through_windows_match_the_interpreter(step, count):
    """Step 64 and 80: batched through windows of four columns; 32: iterations overlap
    (the interpreter runs it); -64: descending rows, no window."""
    src = WIN_F + (0x1000 if step > 0 else 0x4000)
    dst = WIN_F + (0x8000 if step > 0 else 0xC000)
    _, loops, _ = run_both(_UNROLLED.format(step=step), [src, dst, count], random_fill(count),
                           min_iterations=1)
    if count > 1 and step in (64, 80):
        assert loops.batched_iterations == count
        runner = next(p for p in loops.plans.values() if isinstance(p, LoopPlan)).runner
        grouped = [step for step in runner.run_steps if len(step) == 4 and step[3]]
        assert len(grouped) == 8


def test_a_window_reaching_past_the_mapping_falls_back_to_the_accesses():
    """The last rows end exactly at the end of WIN_F: the window (and each view) fits; one
    row more and the batch stops before the faulting iteration, as the interpreter."""
    size = 65536
    for count, extra in ((8, 0), (9, 64)):
        src = WIN_F + size - 8 * 64
        error, _, _ = run_both(_UNROLLED.format(step=64), [src, WIN_F + 0x100, count],
                               random_fill(3), min_iterations=1)
        assert isinstance(error, str) == bool(extra)


def _reloading(constants: int) -> str:
    """Rows of ``constants`` vectors each times as many constant vectors reloaded every
    row (a generated kernel's layer norm scale, at a pointer that steps 0 per row)."""
    body = "".join(f"    vld v1, {16 * j}(s5)\n    vld v2, {16 * j}(s2)\n"
                   f"    vmul.f16 v3, v2, v1\n    vst v3, {16 * j}(s3)\n"
                   for j in range(constants))
    return f"""
    .global k
k:
    lw s2, 0(s0)
    lw s3, 4(s0)
    lw s4, 8(s0)
    lw s5, 12(s0)
row:
{body}    addi s2, s2, {16 * constants}
    addi s3, s3, {16 * constants}
    addi s5, s5, 16
    addi s5, s5, -16
    loop s4, row
    li s0, 0
    halt
"""


@pytest.mark.parametrize("rows", [2, 7])
def test_more_reloaded_constants_than_entries_stay_cached_and_match(rows):
    """40 constants reloaded every row: the batch matches the interpreter, and each
    constant's rows are made once and then shared (the cache is bounded by bytes: 40 of
    them fit), so a second run of the kernel repeats none."""
    from runtime_sim.isa import loop_views
    loop_views._TILED.clear()
    loop_views._tiled_bytes = 0
    count = 40
    words = [WIN_F + 0x1000, WIN_F + 0x8000, rows, WIN_F + 0x4000]
    _, loops, after = run_both(_reloading(count), words, random_fill(rows), min_iterations=1)
    assert loops.batched_iterations == rows
    constants = after[0x4000:0x4000 + 16 * count].reshape(count, 16)
    cached = [loop_views._TILED.get((c.tobytes(), rows)) for c in constants]
    assert all(c is not None for c in cached)
    run_both(_reloading(count), words, random_fill(rows), min_iterations=1)
    assert all(loop_views._TILED.get((c.tobytes(), rows)) is found
               for c, found in zip(constants, cached))


def test_the_tiled_cache_starts_afresh_past_its_byte_bound(monkeypatch):
    from runtime_sim.isa import loop_views
    loop_views._TILED.clear()
    monkeypatch.setattr(loop_views, "_tiled_bytes", 0)
    monkeypatch.setattr(loop_views, "MAX_TILED_BYTES", 3 * 7 * 16)
    vectors = [np.full(16, i, np.uint8) for i in range(4)]
    first = [loop_views.tiled(v, 7) for v in vectors[:3]]
    assert all(a is b for a, b in zip(first, [loop_views.tiled(v, 7) for v in vectors[:3]]))
    loop_views.tiled(vectors[3], 7)                 # a fourth: over the bound, cleared
    assert len(loop_views._TILED) == 1 and loop_views._tiled_bytes == 7 * 16
    assert loop_views.tiled(vectors[0], 7) is not first[0]
    loop_views._TILED.clear()


def test_a_load_copies_memory_rows_but_shares_a_constants_rows():
    from runtime_sim.isa.loop_views import loaded, tiled
    memory, arrays = make_memory()
    rows = memory.progression(WIN_F, 16, 4, 16, False)
    copy = loaded(rows)
    assert copy is not rows and np.array_equal(copy, rows)
    arrays["WIN_F"][:16] = 99                       # a later store does not reach the copy
    assert not np.array_equal(copy, rows)
    constant = tiled(np.arange(16, dtype=np.uint8), 4)
    assert loaded(constant) is constant and not constant.flags.writeable
    spread = np.broadcast_to(arrays["WIN_F"][:16], (4, 16))   # memory's row, read-only
    assert loaded(spread) is not spread


@settings(max_examples=200, deadline=None)
@given(st.integers(-4096, 70000), st.sampled_from([0, 64, 100, 192, 384, 400, -384]),
       st.sampled_from([0, 8, 16, 32, 64, -64]), st.integers(1, 12), st.integers(1, 7),
       st.integers(0, 3), st.sampled_from([0, 16, 48]), st.booleans())
def test_copies_view_is_the_rows_read_rows_reads(start, step, d, rows, copies, first, offset,
                                                 is_store):
    """An inner loop's rows x copies as one strided view: the bytes read_rows gives at
    their addresses (row-major), or None when copies or rows would overlap, wrap or leave
    the mapping."""
    memory, arrays = make_memory(4096, 4096, 65536)
    arrays["WIN_F"][:] = np.random.default_rng(start % 97).integers(0, 256, 65536, np.uint8)
    base = Affine((WIN_F + start) % MOD, step % MOD)
    view = copies_view(memory, base, d % MOD, first, rows, copies, offset, is_store)
    k = np.arange(first, first + rows, dtype=np.int64)[:, None]
    j = np.arange(copies, dtype=np.int64)[None, :]
    addresses = (base.start + k * step + j * d + offset).reshape(-1)
    span = (copies - 1) * d + 16
    inside = (addresses.min() >= WIN_F) and (addresses.max() + 16 <= WIN_F + 65536)
    if d < 16 or step < span or not inside:
        assert view is None
        return
    assert view is not None and view.shape == (rows, copies, 16)
    assert np.array_equal(view.reshape(-1, 16), memory.read_rows(addresses, 16))
    if is_store:
        values = np.arange(rows * copies * 16, dtype=np.uint8).reshape(rows, copies, 16)
        expected = arrays["WIN_F"].copy()
        for a, row in zip(addresses, values.reshape(-1, 16)):
            expected[a - WIN_F:a - WIN_F + 16] = row
        view[...] = values
        assert np.array_equal(arrays["WIN_F"], expected)
