"""modulo-schedule: unrolled loops issue one iteration every II cycles, II at the slot bound.

The cycles a kernel's steady state costs per element are measured as the slope
between two runs of the same kernel body on sizes that differ by whole loop
trips (the prologue, epilogue and kernel set-up cancel), and compared with
the bound the emitted loop's instructions set: the busiest VLIW slot's issue
cycles per trip (the cycle table's slots; the LSU pair counts half) over the
elements a trip handles (the input pointer's step over the element size).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fusion_testlib import Builder
from runtime_sim.isa.invoke import invoke_kernel
from vpuc.abi.params import layout_window_e
from vpuc.fusion.generator import run as runmod
from gen_testlib import run_both, same
from vpuc.fusion.generator.cleanup import CLEANUP_PIPELINE, modulo_schedule
from vpuc.fusion.generator.cleanup.modulo_schedule import steady_cycles
from vpuc.fusion.generator.cleanup.unroll import _is_step
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_cache import GENERATED
from vpuc.fusion.generator.mir import loops
from vpuc.fusion.generator.run import run_kernel
from vpuc.fusion.generator.target_machine import SHAVE_TM
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ElemType
from vpuc.reference.graph import run_graph

TWO_STAGE = [p for p in CLEANUP_PIPELINE if p != "modulo-schedule"]


def unary(kind: str, dims, elem=ElemType.F16, **attrs):
    b = Builder()
    b.result(b.op(kind, b.param(dims, elem), **attrs))
    return tokenize(b.build(), get_target("shave")).subgraphs[0].body


def main_loop(kernel):
    return max(loops(kernel.mir.body), key=lambda lp: len(lp.body))


def slot_bound(body) -> int:
    """The busiest slot's issue cycles in one trip of ``body`` (a pair of slots shares)."""
    busy: dict = {}
    for inst in body:
        cost = SHAVE_TM.cost(inst.op)
        busy[cost.slots] = busy.get(cost.slots, 0) + cost.issue
    return max(-(-n // len(slots)) for slots, n in busy.items())


def elements_per_trip(body, itemsize: int) -> int:
    steps = [i.args[2] for i in body if _is_step(i)]
    return steps[0] // itemsize


def slope(kind: str, rows: tuple[int, int], width: int, cleanups=None, **attrs) -> Fraction:
    """Cycles per element of the steady state: two sizes, the difference of their cycles
    over the difference of their elements."""
    cycles = []
    for r in rows:
        kernel = generate(unary(kind, (r, width), **attrs), "k", cleanups=cleanups)
        x = np.random.default_rng(r).uniform(-8, 8, (r, width)).astype(np.float16)
        cycles.append(run_kernel(kernel, [x], [(r, width)], fast=True).cycles)
    return Fraction(cycles[1] - cycles[0], (rows[1] - rows[0]) * width)


def test_hswish_f16_steady_state_is_its_interval_below_the_two_stage_one():
    # f16 HSwish computes in f32 halves: per 8 lanes 2 widening + 2 max + 2 min + 1
    # narrowing conversions on the CMU (7) against 6 VAU operations, so the CMU bounds it
    kernel = generate(unary("HSwish", (64, 256)), "k")
    loop = main_loop(kernel)
    per_trip = elements_per_trip(loop.body, 2)
    assert Fraction(slot_bound(loop.body), per_trip) == Fraction(7, 8)
    ii = loop.info["modulo"]
    assert ii >= slot_bound(loop.body) and loop.info["stages"] <= 2
    # a trip issues every II cycles: the slope over sizes is II per trip's elements
    got = slope("HSwish", (64, 128), 256)
    assert got == Fraction(ii, per_trip)
    # the two-stage pipeline and list scheduling leave the CMU idle at trip boundaries
    assert slope("HSwish", (64, 128), 256, cleanups=TWO_STAGE) > got


@pytest.mark.parametrize("kind,attrs", [("Sigmoid", {}), ("Tanh", {}), ("Relu", {}),
                                        ("Elu", {"alpha": 0.5})])
def test_steady_state_is_the_schedules_interval(kind, attrs):
    """The simulated steady state of a modulo-scheduled loop is its II, as the in-order
    issue estimate (``steady_cycles``) the pass compares with the two-stage pipeline says."""
    kernel = generate(unary(kind, (64, 256), **attrs), "k")
    loop = main_loop(kernel)
    ii = loop.info.get("modulo")
    assert ii is not None and ii >= slot_bound(loop.body)
    assert steady_cycles(loop.body, SHAVE_TM) == ii
    per_trip = elements_per_trip(loop.body, 2)
    assert slope(kind, (64, 128), 256, **attrs) == Fraction(ii, per_trip)
    assert slope(kind, (64, 128), 256, cleanups=TWO_STAGE, **attrs) >= Fraction(ii, per_trip)


@pytest.mark.parametrize("cols", [8, 24, 40, 136, 1000])
def test_short_and_long_trip_counts_stay_exact(cols):
    """Prologue and epilogue of 1 to many trips: every element computed once, bit for bit,
    with the operand in place or not."""
    body = unary("HSwish", (1, cols))
    kernel = generate(body, "k")
    x = np.random.default_rng(cols).uniform(-8, 8, (1, cols)).astype(np.float16)
    x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, -0.0][:min(4, cols)]
    expected = run_graph(body, {body.parameters[0].result: x})[0]
    assert same(expected, run_both(kernel, [x], [(1, cols)]).outputs[0])
    assert same(expected, in_place(kernel, body.parameters[0].type, x))


def in_place(kernel, param_type, x: np.ndarray) -> np.ndarray:
    """The kernel run with its output over its input (the same MemRefData twice)."""
    placed, end = runmod._place([param_type], [x.shape], False)
    cmx = np.zeros(end + 4096, np.uint8)
    span = slice(placed[0].offset, placed[0].offset + placed[0].nbytes)
    cmx[span] = np.frombuffer(x.tobytes(), np.uint8)
    image = layout_window_e(kernel.obj.data, [placed[0].memref(), placed[0].memref()],
                            runmod.WIN_E)
    invoke_kernel(kernel.obj, cmx, image.image, image.args_offset, image.args_size, fast=False)
    return cmx[span].view(np.float16).reshape(x.shape)


def test_a_loop_too_big_to_unroll_is_renamed_and_overlapped():
    """Gelu's erf form on f16 (two f32 polynomials and two divides per vector) keeps its
    loop from unrolling: its iterations still overlap, with the same arithmetic (bit for
    bit what the two-stage generator computes), and a trip no longer waits for the whole
    dependence chain of the previous one."""
    body = unary("Gelu", (16, 256), approximation="erf")
    kernel = generate(body, "k")
    loop = main_loop(kernel)
    assert loop.info.get("unrolled") == 1 and loop.info.get("modulo")
    ii = loop.info["modulo"]
    assert slot_bound(loop.body) <= ii < steady_cycles(
        main_loop(generate(body, "k", cleanups=TWO_STAGE)).body, SHAVE_TM)
    x = np.random.default_rng(5).uniform(-6, 6, (16, 256)).astype(np.float16)
    old = run_kernel(generate(body, "k", cleanups=TWO_STAGE), [x], [(16, 256)])
    assert same(old.outputs[0], run_both(kernel, [x], [(16, 256)]).outputs[0])
    per_trip = elements_per_trip(loop.body, 2)
    assert slope("Gelu", (16, 32), 256, approximation="erf") == Fraction(ii, per_trip)


def test_a_load_read_far_apart_is_loaded_again(monkeypatch):
    """Gelu as ONNX spells it (x / sqrt 2, Erf, x * 0.5, + 1, product): x is read by the
    division and by ``x * 0.5``, whose product waits for the whole erf chain.  Held in
    one register, x would keep II near half that chain; loaded again for its second
    reader, the loop reaches the slot bound -- in place too (the reload comes before the
    store of its copy)."""
    b = Builder()
    x = b.param((7, 768), ElemType.F16)
    erf = b.op("Erf", b.op("Divide", x, b.const(1.4140625, elem=ElemType.F16)))
    half = b.op("Multiply", x, b.const(0.5, elem=ElemType.F16))
    b.result(b.op("Multiply", half, b.op("Add", erf, b.const(1.0, elem=ElemType.F16))))
    body = tokenize(b.build(), get_target("shave")).subgraphs[0].body
    kernel = generate(body, "k")
    loop = main_loop(kernel)
    loads = [i for i in loop.body if i.op == "vld"]
    assert len(loads) > elements_per_trip(loop.body, 2) // 8     # x loaded again
    ii = loop.info["modulo"]
    monkeypatch.setattr(modulo_schedule, "_reloaded", lambda body, mir: None)
    GENERATED.clear()           # generated again with the patched stage, then forgotten
    held = main_loop(generate(body, "k")).info["modulo"]
    GENERATED.clear()
    assert slot_bound(loop.body) <= ii < held
    monkeypatch.undo()
    xs = np.random.default_rng(7).uniform(-6, 6, (7, 768)).astype(np.float16)
    old = run_kernel(generate(body, "k", cleanups=TWO_STAGE), [xs], [(7, 768)])
    assert same(old.outputs[0], run_both(kernel, [xs], [(7, 768)]).outputs[0])
    assert same(old.outputs[0], in_place(kernel, body.parameters[0].type, xs))
