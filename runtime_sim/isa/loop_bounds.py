"""Affine arithmetic for the fast path: trip counts, memory footprints, the first
iteration that may fault, and whether two accesses touch across iterations.

Iterations are numbered k = 0, 1, ... from the loop head where the fast path
takes over.  A scalar that is affine in k is ``Affine(start, step)``: its value
in iteration k is ``(start + k*step) mod 2^32``.  Everything here is exact
integer arithmetic on Python ints -- O(1) per question, whatever the trip count
-- except ``cross_iteration_overlap`` for two accesses walking at different
rates, which checks every iteration with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import NamedTuple

import numpy as np

MOD = 1 << 32
INFINITY = float("inf")


def signed(value: int) -> int:
    value %= MOD
    return value - MOD if value >= 1 << 31 else value


class Affine(NamedTuple):
    # a tuple, not a frozen dataclass: the walks build thousands per loop entry
    start: int          # value in iteration 0, mod 2^32
    step: int           # increment per iteration, mod 2^32

    def at(self, k: int) -> int:
        return (self.start + k * self.step) % MOD


def affine_const(value: int) -> Affine:
    return Affine(value % MOD, 0)


# The scalar operations that map affine operands to an affine result (mod 2^32).
def _scale(a: Affine, factor: int) -> Affine:
    return Affine(a.start * factor % MOD, a.step * factor % MOD)


def affine_op(mnemonic: str, args: list[Affine]) -> Affine | None:
    if mnemonic in ("add", "addi"):
        return Affine((args[0].start + args[1].start) % MOD, (args[0].step + args[1].step) % MOD)
    if mnemonic == "sub":
        return Affine((args[0].start - args[1].start) % MOD, (args[0].step - args[1].step) % MOD)
    if mnemonic in ("mov", "li", "la", "li.f32", "li.f16"):
        return args[0]
    if mnemonic in ("mul", "muli"):
        if args[1].step == 0:
            return _scale(args[0], args[1].start)
        if args[0].step == 0:
            return _scale(args[1], args[0].start)
    if mnemonic in ("sll", "slli") and args[1].step == 0:
        return _scale(args[0], 1 << (args[1].start & 31))
    return None


# --- trip counts ------------------------------------------------------------------------

_ORDERED = {"blt": (True, "lt"), "bltu": (False, "lt"), "bge": (True, "ge"), "bgeu": (False, "ge")}


def first_exit(mnemonic: str, a: Affine, b: Affine) -> int | None:
    """The first iteration k >= 0 whose back-edge ``mnemonic a, b`` is NOT taken,
    or None when that cannot be proven (never exits, or wraps around).  ``loop``
    is passed as ``bne`` on the decremented counter against 0."""
    e0, de = (a.start - b.start) % MOD, (a.step - b.step) % MOD
    if mnemonic in ("bne", "bnez"):            # exits when a == b (mod 2^32)
        if e0 == 0:
            return 0
        g = gcd(de, MOD)
        if de == 0 or (-e0) % g:
            return None
        reduced = MOD // g
        return ((-e0) % MOD // g) * pow(de // g, -1, reduced) % reduced
    if mnemonic in ("beq", "beqz"):            # exits when a != b
        if e0 != 0:
            return 0
        return 1 if de else None
    is_signed, relation = _ORDERED[mnemonic]
    low, high = (-(1 << 31), (1 << 31) - 1) if is_signed else (0, MOD - 1)

    def value(x: int) -> int:
        return signed(x) if is_signed else x % MOD

    a0, b0, da, db = value(a.start), value(b.start), signed(a.step), signed(b.step)
    if relation == "lt":                       # taken while a < b: exits when b - a <= 0
        gap, rate = b0 - a0, da - db
        k = 0 if gap <= 0 else (None if rate <= 0 else -(-gap // rate))
    else:                                      # taken while a >= b: exits when a - b < 0
        gap, rate = a0 - b0, db - da
        k = 0 if gap < 0 else (None if rate <= 0 else gap // rate + 1)
    if k is None:
        return None
    # The closed form assumed no wrap-around between iteration 0 and k.
    for start, step in ((a0, da), (b0, db)):
        if not (low <= start + k * step <= high):
            return None
    return k


# --- memory footprints ---------------------------------------------------------------------

@dataclass(frozen=True, init=False)
class Footprint:
    """Iteration k touches bytes [low + k*step, low + k*step + length) (or a subset:
    masked and strided accesses are over-approximated by their hull).  ``low`` is
    the unwrapped address; an address outside [0, 2^32) is outside every window."""

    low: int
    step: int
    length: int
    is_store: bool
    position: int        # index of the instruction in the body

    def __init__(self, low: int, step: int, length: int, is_store: bool,
                 position: int) -> None:
        # the frozen dataclass's fields set at once, not by an ``object.__setattr__``
        # each: the walks and affine passes make one per access of every loop entry
        self.__dict__.update(low=low, step=step, length=length, is_store=is_store,
                             position=position)

    def span(self, iterations: int) -> tuple[int, int]:
        last = self.low + (iterations - 1) * self.step
        return min(self.low, last), max(self.low, last) + self.length


def _inside_range(fp: Footprint, begin: int, end: int) -> tuple[float, float]:
    """The iterations k (an interval, possibly empty) whose bytes lie in [begin, end)."""
    lower, upper = begin - fp.low, end - fp.length - fp.low     # need lower <= k*step <= upper
    if fp.step == 0:
        return (0, INFINITY) if lower <= 0 <= upper else (1, 0)
    if fp.step > 0:
        return -(-lower // fp.step), upper // fp.step
    return -(-upper // fp.step), lower // fp.step


def first_outside(fp: Footprint, iterations: int, regions: list[tuple[int, int]]) -> int:
    """The first iteration whose footprint is not inside one of ``regions``
    (mapped, accessible address ranges), or ``iterations`` if none."""
    k = 0
    while k < iterations:
        for begin, end in regions:
            first, last = _inside_range(fp, begin, end)
            if first <= k <= last:
                k = last + 1
                break
        else:
            return k
    return iterations


def _interval_steps(low: int, high: int, step: int) -> tuple[int, int]:
    """Integers j with low < j*step < high (open interval), step != 0."""
    if step < 0:
        low, high, step = -high, -low, -step
    return low // step + 1, -(-high // step) - 1


def cross_iteration_overlap(a: Footprint, b: Footprint, iterations: int) -> bool:
    """Does iteration k of ``a`` touch a byte of iteration k' of ``b`` for some k != k'?"""
    if iterations < 2:
        return False
    (a_low, a_high), (b_low, b_high) = a.span(iterations), b.span(iterations)
    if a_high <= b_low or b_high <= a_low:
        return False
    delta = a.low - b.low
    if a.step == b.step:
        # Overlap iff -a.length < delta + j*step < b.length for j = k - k' != 0.
        if a.step == 0:
            return -a.length < delta < b.length
        first, last = _interval_steps(-a.length - delta, b.length - delta, a.step)
        first, last = max(first, 1 - iterations), min(last, iterations - 1)
        return first <= last and not (first == last == 0)
    if b.step == 0:
        a, b = b, a
    # Different rates: for every k, the iterations k' of b overlapping a's k-th footprint.
    k = np.arange(iterations, dtype=np.int64)
    x = a.low + k * a.step
    low, high = x - b.low - b.length, x + a.length - b.low        # low < k'*b.step < high
    if b.step > 0:
        first, last = low // b.step + 1, -(-high // b.step) - 1
    else:
        step = -b.step
        first, last = -high // step + 1, -(low // step) - 1
    first, last = np.maximum(first, 0), np.minimum(last, iterations - 1)
    hit = first <= last
    only_self = (first == k) & (last == k)
    return bool((hit & ~only_self).any())


def same_iteration_overlap(a: Footprint, b: Footprint, iterations: int) -> bool:
    """Does iteration k of ``a`` touch a byte of iteration k of ``b`` for some k?"""
    if iterations < 1:
        return False
    if a.step == b.step:
        return -a.length < a.low - b.low < b.length
    k = np.arange(iterations, dtype=np.int64)
    delta = (a.low + k * a.step) - (b.low + k * b.step)
    return bool(((-a.length < delta) & (delta < b.length)).any())


def independent(footprints: list[Footprint], iterations: int) -> bool:
    """No iteration touches bytes another iteration stores.  Pairs whose whole-batch
    spans are disjoint cannot overlap: a sweep by address leaves only neighbours to
    the exact (costlier) test.  ``rows_apart`` answers the common case first."""
    if iterations < 2 or rows_apart(footprints, iterations):
        return True
    spans = sorted((fp.span(iterations), index) for index, fp in enumerate(footprints))
    for i, ((_, a_high), a_index) in enumerate(spans):
        a = footprints[a_index]
        for (b_low, _), b_index in spans[i + 1:]:
            if b_low >= a_high:
                break
            b = footprints[b_index]
            if (a.is_store or b.is_store) and cross_iteration_overlap(a, b, iterations):
                return False
    return True


def rows_apart(footprints: list[Footprint], iterations: int) -> bool:
    """A sufficient condition for ``independent``, in one sort: accesses stepping alike
    are gathered, by address, into clusters no wider than their step (one row's
    accesses of one buffer); a cluster that stores cannot reach its own next iteration,
    and any two clusters one of which stores must have disjoint spans over the whole
    batch.  (A row-wise kernel: each row's accesses within its row, input and output
    in separate buffers.)"""
    clusters = []                       # [low, high in iteration 0, step, stores]
    for fp in sorted(footprints, key=lambda f: (f.step, f.low)):
        last = clusters[-1] if clusters else None
        if (last is not None and last[2] == fp.step and fp.step != 0
                and max(last[1], fp.low + fp.length) - last[0] <= abs(fp.step)):
            last[1] = max(last[1], fp.low + fp.length)
            last[3] = last[3] or fp.is_store
        else:
            clusters.append([fp.low, fp.low + fp.length, fp.step, fp.is_store])
    spans = []
    for low, high, step, stores in clusters:
        if stores and (step == 0 or high - low > abs(step)):
            return False
        reach = (iterations - 1) * step
        spans.append((low + min(0, reach), high + max(0, reach), stores))
    spans.sort()
    stored_high = loaded_high = None    # the furthest end so far of a storing / any span
    for low, high, stores in spans:
        if stored_high is not None and low < stored_high:
            return False
        if stores and loaded_high is not None and low < loaded_high:
            return False
        loaded_high = high if loaded_high is None else max(loaded_high, high)
        if stores:
            stored_high = high if stored_high is None else max(stored_high, high)
    return True
