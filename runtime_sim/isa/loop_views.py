"""A batch's ``vld`` / ``vst`` as views of the memory's rows (the chunk runner's and the
path batch's): an access at an induction register plus an offset reads or writes one
strided view of its iterations' rows instead of gathering them by address, and the
accesses of an unrolled body at one base and several offsets are the columns of one
window of the rows, found once per chunk.  The views are the same bytes the rows'
addresses name, so a batch through them is the batch through the addresses."""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import MOD, Affine, signed

# Invariant vectors repeated to a chunk's rows, by (bytes, rows): read-only, shared by
# every chunk (a kernel's constants are the same in every invocation).
# Bounded by bytes, not entries: a transformer's generated kernel reloads its layer norm's
# scale and shift (48 vectors) every row of a 7-row block, which a bound of 32 entries
# cleared on every chunk.  A longer batch than MAX_TILED_ROWS against one vector takes the
# general form, whose long rows do as well.
_TILED: dict[tuple, np.ndarray] = {}
MAX_TILED_BYTES = 8 << 20
MAX_TILED_ROWS = 16384
_tiled_bytes = 0


def progression_view(memory, base: Affine, first: int, rows: int, offset,
                     is_store: bool) -> np.ndarray | None:
    """The (rows, 16) view of a ``vld`` / ``vst`` at the induction register ``base`` (an
    Affine at iteration 0) plus ``offset``, for iterations first .. first+rows-1, when the
    rows ascend at least 16 bytes apart without wrapping, or, for a load, all read the
    same 16 bytes (a constant a loop reloads: a read-only view); else None (run the
    instruction).  (The rows of one constant are shared and read-only: callers copy.)"""
    step = signed(base.step)
    start = (base.start + first * base.step + int(offset)) % MOD
    if step == 0 and not is_store:
        if start + 16 > MOD:
            return None
        row = memory.progression(start, 16, 1, 16, False)
        if row is None:
            return None
        repeated = tiled(row[0], rows)
        return repeated if repeated.ndim == 2 else np.broadcast_to(row, (rows, 16))
    if start + (rows - 1) * step + 16 > MOD:
        return None
    return memory.progression(start, step, rows, 16, is_store)


def progression_window(memory, base: Affine, first: int, rows: int, low: int, span: int,
                       is_store: bool) -> np.ndarray | None:
    """The (rows, span) view of the bytes ``low .. low+span-1`` past the induction register
    ``base`` (an Affine at iteration 0), iterations first .. first+rows-1, when the rows
    ascend at least ``span`` bytes apart without wrapping; else None.  The ``vld`` / ``vst``
    of a body at one base and several offsets (an unrolled body: 0, 16, 32, 48) are its
    16-byte columns: the views ``progression_view`` gives each, found once."""
    step = signed(base.step)
    start = (base.start + first * base.step + low) % MOD
    if step < span or start + (rows - 1) * step + span > MOD:
        return None
    return memory.progression(start, step, rows, span, is_store)


def grouped_view(memory, windows: dict, affines: dict, first: int, rows: int, step: tuple, group,
          is_store: bool) -> np.ndarray | None:
    """A view step's rows: a column of its group's window when it has one, else its own
    ``progression_view``."""
    if group is not None:
        key, column = group
        window = windows.get(key, False)
        if window is False:
            window = windows[key] = progression_window(memory, affines[key[0]], first, rows,
                                                       key[2], key[3], is_store)
        if window is not None:
            return window[:, column:column + 16]
    return progression_view(memory, affines[step[4]], first, rows, step[5], is_store)


def copies_view(memory, base: Affine, d: int, first: int, rows: int, copies: int, offset,
                is_store: bool) -> np.ndarray | None:
    """The (rows, copies, 16) view of a ``vld`` / ``vst`` an inner loop's copies run
    (``path_inner``): copy j of row k at ``base`` (an Affine in the row number) + j*d +
    ``offset``, rows first .. first+rows-1, when the copies ascend at least 16 bytes apart
    and the rows at least their span apart, without wrapping; else None (run the
    instruction).  Rows and copies in C order are the rows ``read_rows`` would read."""
    step, d = signed(base.step), signed(d % MOD)
    span = (copies - 1) * d + 16
    start = (base.start + first * base.step + int(offset)) % MOD
    if d < 16 or step < span or start + (rows - 1) * step + span > MOD:
        return None
    window = memory.progression(start, step, rows, span, is_store)
    if window is None:
        return None
    return np.lib.stride_tricks.as_strided(window, shape=(rows, copies, 16),
                                           strides=(window.strides[0], d, 1))


def tiled(vector, rows: int):
    """``vector`` (16 bytes) repeated to ``rows`` rows, read-only; anything else (or too
    many rows) as is."""
    if type(vector) is not np.ndarray or vector.shape != (16,) or vector.dtype != np.uint8 \
            or rows > MAX_TILED_ROWS:
        return vector
    global _tiled_bytes
    key = (vector.tobytes(), rows)
    found = _TILED.get(key)
    if found is None:
        if _tiled_bytes + rows * 16 > MAX_TILED_BYTES:
            _TILED.clear()
            _tiled_bytes = 0
        found = _TILED[key] = np.repeat(vector[None], rows, axis=0)
        found.flags.writeable = False
        _tiled_bytes += rows * 16
    return found


def loaded(view: np.ndarray) -> np.ndarray:
    """The value a batch's load takes from its view: a copy of memory's rows (a later
    store may change them), but a reloaded constant's shared rows (``tiled``: read-only,
    holding no memory) as they are, since no batch writes into a value."""
    if view.base is None and not view.flags.writeable:
        return view
    return view.copy()
