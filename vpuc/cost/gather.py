"""The cost of one call of the ACT SHAVE library kernel ``gather`` (kernels/gather.s), in
SHAVE cycles, as a formula the lowering and the benches can ask before anything runs.

The simulator charges the kernel what its interpreter counts (``vpuc/cost/shave.py``);
this is the same count as mechanisms of the ISA's timing table (docs/shave-isa.md,
section 5), each read off the kernel's code:

- ``INDEX_CYCLES`` per index: each index is read twice (the range check before
  anything is written, then the copy pass), each time a scalar load (``lw``: latency
  3), the wrap (``slti``, ``mul``: latency 3, ``add``) and the range test and its
  branch: 12 to 13 cycles a pass, 25 both;
- per row of the chunk copied (``copies`` = the indices in the chunk times A), a dense
  byte copy: ``COPY_SETUP`` for the call into the byte copy and back (taken-branch
  penalties), its split into 128-byte blocks, 32-byte pairs and the masked tail, and
  the row's address arithmetic; then the row's bytes at the LSU rate: one ``vld`` and
  one ``vst`` of 16 bytes issue each cycle on the two LSU slots, ``COPY_BYTES_PER_CYCLE``;
- ``FIXED``: the MemRefData checks (types, ranks, orders, dims, strides) once a call.

The constants are the kernel's, measured on the interpreter;
``tests/kernels/test_kernels_gather.py`` keeps the formula within 10 % of it.  The
call's NCE cycles are ``act_invocation_cycles`` of these (the SHAVE clock and the
runtime's dispatch).
"""

from __future__ import annotations

FIXED = 110
INDEX_CYCLES = 25
COPY_SETUP = 35
COPY_BYTES_PER_CYCLE = 16          # one vld + one vst of 16 bytes a cycle (two LSU slots)


def gather_call_cycles(indices: int, copies: int, row_bytes: int) -> float:
    """SHAVE cycles of one ``gather`` call reading ``indices`` indices and copying
    ``copies`` rows of ``row_bytes`` bytes each."""
    per_copy = COPY_SETUP + -(-row_bytes // COPY_BYTES_PER_CYCLE)
    return FIXED + indices * INDEX_CYCLES + copies * per_copy


def gather_cycles(indices: int, rows_of_a: int, row_bytes: int, chunks: int) -> float:
    """SHAVE cycles of a whole gather in ``chunks`` calls: every call reads every index,
    and each of the ``indices`` rows (times ``rows_of_a``, the dims before the axis) is
    copied by exactly one call."""
    return chunks * (FIXED + indices * INDEX_CYCLES) + \
        indices * rows_of_a * (COPY_SETUP + -(-row_bytes // COPY_BYTES_PER_CYCLE))
