"""Straight-line blocks (``straight_blocks``) against the exact interpreter: the fast
interpreter runs them as one step, with the same memory, registers, counts, cycles and
errors; a block's remembered issue equals ``cycles.issue`` instruction by instruction
from any timing state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime_sim.isa.cycles import issue as issue_one
from runtime_sim.isa.cycles import new_ready
from runtime_sim.isa.fastpath import FastLoops
from runtime_sim.isa.program import Program
from runtime_sim.isa.straight_blocks import MIN_BLOCK, Block, block, straight_blocks
from shave_testlib import WIN_D, WIN_F
from fastpath_testlib import random_fill, random_kernel_head, run_both, straight_line_body
from vpuc.shave import assemble

# scalar and vector work with loads whose latency stalls their users, and a store
_PROLOGUE = ["    vld v1, 0(s2)", "    vld v2, 16(s2)", "    vadd.f16 v3, v1, v2",
             "    lw s9, 0(s2)", "    add s10, s9, s9", "    vmul.f16 v4, v3, v20",
             "    vst v4, 0(s3)", "    addi s11, s10, 3"]


def _kernel(body: list[str], epilogue: list[str], skip: bool) -> str:
    """A prologue block, a loop over ``body`` (a forward branch over part of it when
    ``skip``: blocks end at transfers and start at their targets), an epilogue block."""
    half = len(body) // 2
    middle = (["    andi s12, s4, 1", "    beqz s12, over"] if skip else [])
    return "\n".join([
        *random_kernel_head(0), *_PROLOGUE,
        "body:", *[f"    {line}" for line in body[:half]], *middle,
        *[f"    {line}" for line in body[half:]], "over:" if skip else "",
        "    addi s2, s2, 16", "    addi s3, s3, 16", "    loop s4, body",
        *[f"    {line}" for line in epilogue], "    li s0, 0", "    halt"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), straight_line_body(), st.booleans(), st.booleans(),
       st.integers(1, 12), st.integers(0, 2 ** 16))
def test_random_blocks_around_interpreted_and_batched_loops(body, epilogue, skip, batch,
                                                            count, seed):
    """The loop interpreted (its body's blocks entered in the pipeline states each
    iteration leaves) or batched (the epilogue's block entered after the batch)."""
    source = _kernel(body[0], epilogue[0], skip)
    options = {"min_iterations": 1} if batch else {"min_iterations": 10 ** 9}
    _, loops, _ = run_both(source, [WIN_F + 0x1000, WIN_F + 0x8000, count],
                           random_fill(seed), **options)
    blocks = straight_blocks(loops.program, loops.entries)
    assert any(found is not None for found in blocks)


_BODY = ["vld v1, 0(s2)", "vadd.f16 v2, v1, v20", "vmul.f16 v3, v2, v1", "lw s9, 4(s2)",
         "add s10, s9, s4", "vst v2, 0(s3)", "vadd.f16 v4, v3, v2", "vst v4, 32(s3)",
         "sw s10, 48(s3)", "vsub.f16 v5, v4, v1", "vst v5, 64(s3)", "addi s13, s2, 4"]


def test_blocks_are_run_and_remembered_by_relative_state():
    source = _kernel(_BODY, ["vmul.f16 v5, v2, v20", "vst v5, 16(s3)"] + _BODY[6:], True)
    fast, loops, _ = run_both(source, [WIN_F + 0x1000, WIN_F + 0x8000, 9], random_fill(3),
                              min_iterations=10 ** 9)
    made = [b for b in straight_blocks(loops.program, loops.entries) if isinstance(b, Block)]
    assert made and all(b.length >= MIN_BLOCK and b.states for b in made)
    # the body's blocks ran 9 times (two parities of the skip) from a few relative states
    body = [b for b in made if b.start >= 16]      # the loop head (16) and on
    assert len(body) >= 3 and all(1 <= len(b.states) < 9 for b in body)
    assert sum(fast.opcode_counts.values()) == fast.instructions


def test_a_fault_inside_a_block_names_the_faulting_instruction():
    source = "\n".join([*random_kernel_head(0), *_PROLOGUE[:4], "    li s14, 0x100",
                        "    lw s15, 0(s14)", *_PROLOGUE[4:], "    halt"])
    error, _, _ = run_both(source, [WIN_F + 0x1000, WIN_F + 0x8000, 4], random_fill(1))
    assert isinstance(error, str) and "lw s15, 0(s14)" in error


@pytest.mark.parametrize("max_steps", [3, 9, 14, 15, 16, 40])
def test_max_steps_reached_inside_a_block_stops_at_the_same_instruction(max_steps):
    source = _kernel(["vld v1, 0(s2)", "vadd.f16 v2, v1, v20", "vst v2, 0(s3)"],
                     ["addi s13, s2, 4"] * 4, False)
    run_both(source, [WIN_F + 0x1000, WIN_F + 0x8000, 3], random_fill(2),
             max_steps=max_steps, min_iterations=10 ** 9)


def test_a_block_running_off_the_end_of_text_is_the_same_error():
    source = "\n".join([*random_kernel_head(0), *_PROLOGUE])
    error, _, _ = run_both(source, [WIN_F + 0x1000, WIN_F + 0x8000, 4], random_fill(1))
    assert isinstance(error, str) and "ran past the end of .text" in error


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 16))
def test_a_blocks_issue_is_cycles_issue_from_any_state(seed):
    """From random pipeline states (registers and slots ready up to 12 cycles on, some in
    the past), the block's remembered issue leaves what issuing one by one does."""
    obj = assemble("\n".join(["    .global k", "k:", *_PROLOGUE, "    vld v5, 32(s2)",
                              "    vst v5, 48(s3)", "    bnez s10, k", "    halt"]), "b.s")
    program = Program(obj.text, WIN_D, "b")
    blocks = straight_blocks(program, {})
    blk = block(program, blocks, 0)
    assert blk.length == len(_PROLOGUE) + 3           # up to and including the branch
    blk.states.clear()          # shared by every block of these words: earlier examples'
    rng = np.random.default_rng(seed)
    now = int(rng.integers(0, 50))
    state = [now + int(rng.integers(-6, 13)) for _ in range(len(new_ready()))]
    for shift in (0, 17, 17 + int(rng.integers(1, 99))):   # then the same state, later
        ready = [max(0, cycle + shift) for cycle in state]
        expected, at, stalls = list(ready), now + shift, 0
        for step in program.steps[:blk.length]:
            at, stall = issue_one(expected, at, step.sources, step.dests, step.cost)
            stalls += stall
        assert blk.issue(ready, now + shift) == (at, stalls)
        assert ready == expected
    assert len(blk.states) == 1


def test_blocks_of_the_same_words_share_their_timing():
    """Every library kernel's blocks: a block's timing (issue inputs, entry keys, states)
    is the one worked out from its own steps, and the kernels' shared driver blocks are
    one timing (so a state one kernel remembered answers the other's)."""
    from vpuc.kernel_library import library_names, load_library_kernel
    shared = total = 0
    timings: dict[int, int] = {}
    for name in library_names():
        program = Program(load_library_kernel(name).text, WIN_D, name)
        blocks = straight_blocks(program, {})
        for start, end in enumerate(blocks):
            if end is None or end.__class__ is Block:
                continue
            made = block(program, blocks, start)
            alone = Block(start, program.flat[start:end])          # no tails: its own
            assert (made.issues, made.entry, made.zero) == (alone.issues, alone.entry, alone.zero)
            assert made.get(list(range(200))) == alone.get(list(range(200)))
            total += 1
            shared += id(made.states) in timings
            timings[id(made.states)] = start
    assert total > 50 and shared > 10
