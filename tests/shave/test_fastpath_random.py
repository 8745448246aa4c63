"""The fast path against the exact interpreter on random straight-line loop bodies
(hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shave_testlib import WIN_F
from fastpath_testlib import (DRAWN_BACK_EDGES, ROW_SUM, random_fill, random_kernel_head,
                             run_both, special_fill, straight_line_body)


# --- random straight-line bodies ----------------------------------------------------------------

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), st.integers(0, 2 ** 16))
def test_random_straight_line_bodies(body, seed):
    lines, src_step, dst_step, count, chunk, back_edge = body
    closing = DRAWN_BACK_EDGES[back_edge]
    source = "\n".join([
        *random_kernel_head(seed),
        f"    muli s23, s4, {src_step}", "    add s23, s23, s2",
        "body:", *[f"    {line}" for line in lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}", *closing, "    halt"])
    src = WIN_F + 0x1000 if src_step > 0 else WIN_F + 0x5000
    dst = WIN_F + 0x8000 if dst_step >= 0 else WIN_F + 0xC000
    run_both(source, [src, dst, count], random_fill(seed), chunk=chunk, min_iterations=1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), straight_line_body(), st.integers(1, 5), st.integers(0, 2 ** 16))
def test_random_nested_counted_loops(inner, outer, trip, seed):
    """An outer loop around a counted inner loop (trip set by li): the outer
    batch unrolls the inner one; values, memory, counts and cycles as the interpreter's."""
    inner_lines, src_step, dst_step, count, chunk, _ = inner
    outer_lines, out_src, out_dst, _, _, _ = outer
    source = "\n".join([
        *random_kernel_head(seed), "    mov s5, s4",
        "outer:", *[f"    {line}" for line in outer_lines],
        f"    li s6, {trip}",
        "inner:", *[f"    {line}" for line in inner_lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}", "    loop s6, inner",
        f"    addi s2, s2, {out_src}", f"    addi s3, s3, {out_dst}", "    loop s5, outer",
        "    halt"])
    src, dst = WIN_F + 0x3000, WIN_F + 0x9000
    run_both(source, [src, dst, min(count, 12)], random_fill(seed), chunk=chunk,
             min_iterations=1)


SCAN_OPS = ["vadd.f32", "vmax.f32", "vmin.f32", "vmax.f16", "vmin.f16"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(straight_line_body(), st.lists(st.tuples(st.integers(0, 12),
                                                st.sampled_from(["v10", "v11", "v12"]),
                                                st.sampled_from(["v1", "v2", "v20", "v21", "v5"])),
                                      min_size=1, max_size=6),
       st.lists(st.sampled_from(SCAN_OPS), min_size=3, max_size=3), st.booleans(),
       st.integers(0, 2 ** 16))
def test_random_accumulating_loops(body, accumulations, scan_ops, pipelined, seed):
    """Accumulators (``OP acc, acc, x``) in a random body, some fed by a value the
    previous iteration loaded (software-pipelined): sums of f32 must keep their
    sequential order, max/min their NaN rules -- values and cycles as the interpreter's."""
    lines, src_step, dst_step, count, chunk, back_edge = body
    lines = list(lines)
    for position, acc, x in accumulations:        # one operation per accumulator
        op = scan_ops[int(acc[1:]) - 10]
        lines.insert(min(position, len(lines)), f"{op} {acc}, {acc}, {x}")
    if pipelined:
        lines.append("vld v5, 16(s2)")         # read above, in the next iteration
    closing = DRAWN_BACK_EDGES[back_edge]
    source = "\n".join([
        *random_kernel_head(seed),
        f"    muli s23, s4, {src_step}", "    add s23, s23, s2",
        "    vld v10, 0(s2)", "    vld v11, 32(s2)", "    vld v12, 64(s2)", "    vld v5, 96(s2)",
        "body:", *[f"    {line}" for line in lines],
        f"    addi s2, s2, {src_step}", f"    addi s3, s3, {dst_step}", *closing, "    halt"])
    src = WIN_F + 0x1000 if src_step > 0 else WIN_F + 0x5000
    dst = WIN_F + 0x8000 if dst_step >= 0 else WIN_F + 0xC000
    run_both(source, [src, dst, count], special_fill(seed), chunk=chunk, min_iterations=1)


@pytest.mark.parametrize("seed", [3, 4])         # without and with NaNs
@pytest.mark.parametrize("chunk", [1, 7, 16384])
def test_sum_and_max_reductions_are_batched_in_order(chunk, seed):
    fast, loops, _ = run_both(ROW_SUM, [WIN_F, 0, 500], special_fill(seed), chunk=chunk)
    assert fast.batched_iterations == 500


def test_scan_fold_is_sequential_not_pairwise():
    from runtime_sim.isa.loop_scan import Accumulator, fold
    from runtime_sim.isa.sem_vector import VECTOR_OPS
    rng = np.random.default_rng(0)
    xs = (rng.standard_normal((4096, 4)) * 10 ** rng.uniform(-3, 6, (4096, 4))).astype(np.float32)
    add = VECTOR_OPS["vadd.f32"]
    acc = Accumulator(35, "vadd.f32", add, (0,))
    start = np.zeros(16, np.uint8)
    got = fold(acc, start, {0: xs.view(np.uint8).reshape(-1, 16)}, len(xs))
    expected = start
    for row in xs.view(np.uint8).reshape(-1, 16):
        expected = add(expected, row)
    assert bytes(got) == bytes(expected)
    pairwise = np.add.reduce(np.ascontiguousarray(xs.T), axis=1)     # along contiguous lanes
    assert bytes(got) != bytes(pairwise.view(np.uint8))
