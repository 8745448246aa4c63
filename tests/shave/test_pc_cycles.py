"""Per-instruction cycle accounting (``runtime_sim.isa.pc_cycles.run_per_pc``): each
instruction is charged what it advances the VLIW issue clock, and the charges add up to the
interpreter's total exactly."""

import struct

import numpy as np
import pytest

from runtime_sim.isa import load_kernel, run
from runtime_sim.isa.pc_cycles import run_per_pc
from shave_testlib import WIN_E, WIN_F, make_memory
from test_shave_assembler import CLAMP
from vpuc.diagnostics import VpucError
from vpuc.shave import assemble


def both(source: str, setup=None, **kwargs):
    """(run_per_pc, exact run, fast run) of ``source`` on fresh memories."""
    out = []
    for how in ("pc", "exact", "fast"):
        memory, arrays = make_memory()
        if setup is not None:
            setup(arrays)
        loaded = load_kernel(assemble(source, "t.s"), memory)
        if how == "pc":
            out.append(run_per_pc(loaded.program, memory, entry=loaded.entry(), **kwargs))
        else:
            out.append(run(loaded.program, memory, entry=loaded.entry(), fast=how == "fast",
                           **kwargs))
    return out


def test_charges_follow_the_issue_clock():
    # li@0 (iau); vadd@0 co-issues on the vau: 0; addi waits for li's s1 (ready 1): 1;
    # muli (iau, reads s2 ready 2): 1; halt closes the bundle at 2 -> 3, drain of muli's
    # latency 3 to 5: 1 + 2
    source = ("    .global k\nk:\n    li s1, 5\n    vadd.f16 v1, v2, v3\n"
              "    addi s2, s1, 1\n    muli s3, s2, 3\n    halt\n")
    pc, exact, _ = both(source)
    assert pc.per_pc == [0, 0, 1, 1, 3] and pc.cycles == exact.cycles == 5
    assert pc.counts == [1] * 5 and pc.instructions == exact.instructions == 5


def test_taken_branch_pays_its_penalty_and_the_last_the_drain():
    source = """
    .global k
k:
    lw s3, 0(s0)
    addi s4, s3, 1
    beq s4, s4, skip
    nop
skip:
    vexp.f16 v1, v2
    halt
"""
    pc, exact, _ = both(source, args_addr=WIN_E)
    assert pc.cycles == exact.cycles == sum(pc.per_pc) == 17
    assert pc.per_pc[0] == 0 and pc.per_pc[1] == 3          # addi stalls for the load
    assert pc.per_pc[2] == 1 + 1 + 2                         # issue, close the bundle, refetch
    assert pc.counts == [1, 1, 1, 0, 1, 1]


@pytest.mark.parametrize("n", [0, 9, 1003])
def test_loops_agree_with_the_exact_and_fast_interpreters(n):
    x = (np.random.default_rng(n).standard_normal(n) * 8).astype(np.float16)
    args = struct.pack("<IIIee", WIN_F, WIN_F + 0x8000, n, -1.0, 6.0)

    def setup(arrays):
        arrays["WIN_F"][:2 * n] = x.view(np.uint8)
        arrays["WIN_E"][:len(args)] = np.frombuffer(args, np.uint8)
    pc, exact, fast = both(CLAMP, setup, args_addr=WIN_E, args_size=len(args))
    assert pc.cycles == exact.cycles == fast.cycles == sum(pc.per_pc)
    assert pc.instructions == exact.instructions == fast.instructions == sum(pc.counts)


def test_errors_are_the_interpreters():
    source = "    .global k\nk:\n    li s1, 1\n"
    with pytest.raises(VpucError, match="execution ran past the end of .text"):
        both(source)
    with pytest.raises(VpucError, match="did not halt within 10 instructions"):
        both("    .global k\nk:\n    j k\n", max_steps=10)
