"""The cost of ONNX TopK two ways, so the importer can pick the cheaper: one call of the
ACT SHAVE library kernel ``topk`` (kernels/topk.s) per value it is asked for, or K
rounds of ArgMax's search composed from graph ops (``convert_scatter.py``).

The kernel, in SHAVE cycles (its code read against the ISA's timing table, docs/shave-isa.md
section 5; the constants measured on the interpreter, ``tests/kernels/test_kernels_topk.py``
keeps the formula within 10 % of it; fitted by least squares on 15 shapes, 16 to 2000
values a row, K 1 to 1000, ROW set from its code):

- ``FIXED`` once a call: the MemRefData checks (types, ranks, orders, dims, strides);
- ``ROW`` once a row: its three pointers' steps and the loops' set-up;
- ``ELEMENT_KEY`` per value of the row after the first K (the scan): a scalar load, the
  11-instruction integer order key (``|bits|``, NaN, sign, largest/smallest) and the
  compare with the heap's root;
- ``KEPT`` per kept value (K of them): filled into the heap keyed, the heapify's call and
  first level, and read back through its index once sorted;
- ``SIFT_LEVEL`` per level of the heap a sift walks (two child loads, two compares, a
  move): ``log2 K`` levels per sift, and a row sifts about ``K`` times to sort and
  ``K ln(N / K)`` times to take a later value that beats the root (uniform random data:
  the i-th value is among the best K so far with probability K / i).

ArgMax's rounds, in NCE cycles of the simulated program (ReduceMax, an Equal/Select key,
a second ReduceMax; each later round also masks the taken position), measured with
``vpuc run --timing-only`` on [1, 1000] and [8, 1000] for K = 1, 4, 8: the first round
``ROUND0_FIXED + ROUND0_PER_VALUE * R N``, each later one ``ROUND_FIXED +
ROUND_PER_VALUE * R N`` (their ACT kernels' launches dominate short inputs).
"""

from __future__ import annotations

import math

from vpuc.cost.shave import act_invocation_cycles
from vpuc.cost.timing import Timing

FIXED = 116
ROW = 20
ELEMENT_KEY = 27.4
KEPT = 54.8
SIFT_LEVEL = 23.1
ROUND0_FIXED = 5643
ROUND0_PER_VALUE = 0.716
ROUND_FIXED = 14776
ROUND_PER_VALUE = 1.97


def topk_call_cycles(rows: int, size: int, k: int) -> float:
    """SHAVE cycles of one ``topk`` call on ``rows`` rows of ``size`` values keeping ``k``."""
    later = size - k
    sifts = k + (k * math.log(size / k) if later else 0.0)
    return FIXED + rows * (ROW + ELEMENT_KEY * later + KEPT * k + SIFT_LEVEL * sifts * math.log2(k))


def topk_kernel_cycles(rows: int, size: int, k: int, calls: int, timing: Timing) -> float:
    """NCE cycles of ``calls`` kernel calls (one per output asked for), the input's load
    and the outputs' stores left out (they are the rounds' too)."""
    return calls * act_invocation_cycles(topk_call_cycles(rows, size, k), timing.shave_cycle,
                                         timing.dispatch["ACT_SHAVE"])


def argmax_rounds_cycles(rows: int, size: int, k: int) -> float:
    """NCE cycles of K rounds of ArgMax's search on ``rows`` rows of ``size`` values."""
    values = rows * size
    return ROUND0_FIXED + ROUND0_PER_VALUE * values + (k - 1) * (ROUND_FIXED + ROUND_PER_VALUE * values)
