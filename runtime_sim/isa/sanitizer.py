"""The memory sanitizer: the bytes one ACT SHAVE invocation may load and store.

A kernel sees whole windows: WIN_F maps the tile's entire CMX, so a kernel that
writes past its output, or into a buffer bound only for reading, would corrupt
memory silently.  The sanitizer narrows what an invocation may touch to what
its task binds (docs/simulator.md, "Memory sanitizer"):

* loads: the buffers bound under ``inputs()`` and ``outputs()`` (for a dynamic
  CMX buffer, its dims and strides beside the data; an input left in DDR at its
  address in the SHAVE's DDR aperture), all of WIN_E (the kernel's
  ``.data``, its arguments, its stack) and all of WIN_D (code, ``.rodata``);
* stores: the buffers bound under ``outputs()``, the kernel's ``.data`` and its
  stack -- never its own argument image.

``WindowMemory`` asks ``Bounds`` on every access (the interpreter) and the
fast path proves a whole batch inside ``Bounds.ranges`` before running it, so
both report the same first bad access: the fast path stops short of it and
the interpreter replays it.

Races stay judged on the declarations: since every actual access lies inside
a declared one of the same or a stronger kind (a store inside an output, a
load inside an input or an output), a race on actual accesses is a race on
declared ones, and the race checker (``runtime_sim.races``) stays sound.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

Range = tuple[int, int]                  # [lo, hi) byte addresses


@dataclass(frozen=True)
class CmxBindings:
    """What a task binds in its tile's CMX, as CMX byte offsets [lo, hi)."""

    reads: tuple[Range, ...]                       # inputs() and outputs(): may be loaded
    writes: tuple[Range, ...]                      # outputs(): may be stored
    # For messages: what the task binds, then every other buffer of the tile's CMX (a
    # function: a model's tile holds thousands, listed only when a fault is explained;
    # not compared: equal bindings are equal whichever engine made the function).
    bound: tuple[tuple[int, int, str], ...]
    others: Callable[[], tuple[tuple[int, int, str], ...]] = field(compare=False)
    # Inputs left in DDR (vpuc/abi/ddr_aperture.py): absolute aperture ranges the kernel
    # may load, with their labels, and the bytes mapped there: (address, uint8 array)
    ddr_reads: tuple[Range, ...] = ()
    ddr_bound: tuple[tuple[int, int, str], ...] = ()
    ddr_maps: tuple = field(default=(), compare=False)


def merge(ranges) -> list[Range]:
    """Sorted, disjoint ranges covering the same bytes (empty ones dropped)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


class _Allowed:
    """Sorted disjoint ranges with O(log n) membership of a byte span."""

    def __init__(self, ranges: list[Range]) -> None:
        self.ranges = ranges
        self.starts = [lo for lo, _ in ranges]
        self.lows = np.array(self.starts, np.int64)
        self.highs = np.array([hi for _, hi in ranges], np.int64)

    def covers(self, address: int, size: int) -> bool:
        i = bisect_right(self.starts, address) - 1
        return i >= 0 and address + size <= self.ranges[i][1]

    def covers_rows(self, flat: np.ndarray, size: int) -> np.ndarray:
        if not self.ranges:
            return np.zeros(np.shape(flat), bool)
        i = np.searchsorted(self.lows, flat, side="right") - 1
        found = i >= 0
        return found & (flat + size <= self.highs[np.maximum(i, 0)])

    def first_gap(self, address: int, size: int) -> int:
        """The first byte of [address, address + size) outside every range."""
        byte = address
        while byte < address + size:
            i = bisect_right(self.starts, byte) - 1
            if i < 0 or byte >= self.ranges[i][1]:
                return byte
            byte = self.ranges[i][1]
        return address


class Bounds:
    """Absolute address ranges an invocation may load from and store to, with the
    names of what lies around them (for the messages)."""

    def __init__(self, loads: list[Range], stores: list[Range],
                 labels: list[list[tuple[int, int, str]]] | Callable) -> None:
        self._allowed = {False: _Allowed(merge(loads)), True: _Allowed(merge(stores))}
        # tiers: a byte is named by the first tier holding it; or a function making
        # them, called for the first message only (most calls never fault)
        self._labels = labels

    @property
    def labels(self) -> list[list[tuple[int, int, str]]]:
        if callable(self._labels):
            self._labels = self._labels()
        return self._labels

    def ranges(self, is_write: bool) -> list[Range]:
        return self._allowed[is_write].ranges

    def covers(self, address: int, size: int, is_write: bool) -> bool:
        return self._allowed[is_write].covers(address, size)

    def covers_rows(self, flat: np.ndarray, size: int, is_write: bool) -> np.ndarray:
        """Per address of ``flat``: is [address, address + size) allowed?"""
        return self._allowed[is_write].covers_rows(flat, size)

    def reason(self, address: int, size: int, is_write: bool) -> str:
        """Why the access is refused: the first refused byte and what holds it."""
        byte = self._allowed[is_write].first_gap(address, size)
        hit: list[str] = []
        for tier in self.labels:
            hit = [label for lo, hi, label in tier if lo <= byte < hi]
            if hit:
                break
        where = " and ".join(hit) if hit else "no buffer"
        at = "" if byte == address else f" (byte {byte:#010x})"
        refused = ("outside the outputs bound to the task" if is_write
                   else "outside the buffers bound to the task")
        return f"{refused}{at}; it hits {where}"


def invocation_bounds(cmx_base: int, bindings: CmxBindings, win_d: Range, win_e: Range,
                      data: Range, stack: Range) -> Bounds:
    """The bounds of one call: ``bindings`` in WIN_F at ``cmx_base``, the whole WIN_D and
    WIN_E mappings for loads, the kernel's ``.data`` and ``stack`` for stores."""
    def absolute(ranges):
        return [(cmx_base + lo, cmx_base + hi) for lo, hi in ranges]

    loads = absolute(bindings.reads) + list(bindings.ddr_reads) + [win_d, win_e]
    stores = absolute(bindings.writes) + [data, stack]
    windows = [(win_d[0], win_d[1], "the kernel's code (WIN_D)"),
               (data[0], data[1], "the kernel's .data"),
               (data[1], stack[0], "the invocation's arguments (read-only)"),
               (stack[0], stack[1], "the task's stack")]
    return Bounds(loads, stores, lambda: [absolute_labels(cmx_base, bindings.bound)
                                          + list(bindings.ddr_bound),
                                          absolute_labels(cmx_base, bindings.others()), windows])


def absolute_labels(base: int, labels) -> list[tuple[int, int, str]]:
    return [(base + lo, base + hi, text) for lo, hi, text in labels]
