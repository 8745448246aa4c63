"""The memory sanitizer, kernel status, runaway kernels and stack overflows: exact messages.

Each ACT SHAVE invocation may load only what its task binds (plus its own WIN_D and
WIN_E) and store only into its outputs, its .data and its stack
(runtime_sim/isa/sanitizer.py).  The fast path and the interpreter report the same
first bad access.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from runtime_sim.engines.shave import ShaveEngine, kernel_object
from runtime_sim.isa.fastpath import FastLoops
from runtime_sim.isa.interpreter import load_kernel, run
from runtime_sim.isa.invoke import invocation_memory
from runtime_sim.network import Network
from runtime_sim.simulator import simulate
from tests.sim.simlib import DATA, compile_vir, run_cli
from vpuc.abi.memref import MEMREF_SIZE, MemRefData
from vpuc.diagnostics import VpucError

SIM = "tests/sim/data"


def _error(args, capsys, monkeypatch) -> str:
    code, out, err = run_cli(["run", *args], capsys, monkeypatch)
    assert code == 1 and out == ""
    return err


def test_a_store_past_the_output_is_stopped(capsys, monkeypatch):
    assert _error([f"{SIM}/sanitizer_past.vir"], capsys, monkeypatch) == (
        "@past: section .text at offset 0x20: error: bad: kernel @past (asm \"sanitizer_past.s\") "
        "on tile 0: pc 0x1d000020 (.text+0x20) 'vst v1, 0(s2)': store of 16 bytes at 0x1f000100: "
        "outside the outputs bound to the task; it hits %z (not bound to this task)\n")


def test_a_load_from_an_unbound_buffer_is_stopped(capsys, monkeypatch):
    assert _error([f"{SIM}/sanitizer_peek.vir"], capsys, monkeypatch) == (
        "@peek: section .text at offset 0x8: error: peek: kernel @peek (asm \"sanitizer_peek.s\") "
        "on tile 0: pc 0x1d000008 (.text+0x8) 'lw s3, -128(s2)': load of 4 bytes at 0x1f000000: "
        "outside the buffers bound to the task; it hits %secret (not bound to this task)\n")


def test_a_kernel_may_not_write_its_own_arguments(capsys, monkeypatch):
    assert _error([f"{SIM}/sanitizer_args.vir"], capsys, monkeypatch) == (
        "@scribble: section .text at offset 0x0: error: scribble: kernel @scribble (asm "
        "\"sanitizer_args.s\") on tile 0: pc 0x1d000000 (.text+0x0) 'sw s0, 0(s0)': store of 4 "
        "bytes at 0x1e000000: outside the outputs bound to the task; it hits the invocation's "
        "arguments (read-only)\n")


def _first_bad_access(name: str, fast: bool) -> tuple[str, int]:
    """Run the invocation of NAME.vir as the engine would, through the interpreter alone
    or with the fast path: (the error, iterations batched)."""
    program = compile_vir(DATA / f"{name}.vir")
    memory = Network(program).memory
    engine = ShaveEngine(program, memory)
    invocation = program.invocations[0]
    task = program.module.task_lists[0].tasks[0]
    obj = kernel_object(program.kernels[invocation.kernel].elf, invocation.kernel)
    windows = invocation_memory(obj, memory.cmx(0), invocation.window_e, arch=program.arch,
                                bindings=engine.bindings(task))
    loaded = load_kernel(obj, windows)
    loops = FastLoops(loaded.program) if fast else False
    with pytest.raises(VpucError) as error:
        run(loaded.program, windows, entry=loaded.entry(),
            args_addr=windows.base("WIN_E") + invocation.args_offset,
            args_size=invocation.args_size, fast=loops)
    return str(error.value.diagnostics[0].message), loops.batched_iterations if fast else 0


@pytest.mark.parametrize("name, message", [
    ("sanitizer_past", "pc 0x1d000020 (.text+0x20) 'vst v1, 0(s2)': store of 16 bytes at "
                       "0x1f000100: outside the outputs bound to the task; it hits %z (not "
                       "bound to this task)"),
    ("sanitizer_gather", "pc 0x1d000018 (.text+0x18) 'vlds.h v1, 0(s2), s4': load of 1 byte at "
                         "0x1f000080: outside the buffers bound to the task; it hits %z (not "
                         "bound to this task)")])
def test_the_fast_path_and_the_interpreter_report_the_same_first_bad_access(name, message):
    exact, _ = _first_bad_access(name, fast=False)
    fast, batched = _first_bad_access(name, fast=True)
    assert batched == 8                  # the 8 good iterations ran as a batch, from the first
    assert fast == exact == message


def _wired(order: tuple[int, ...]):
    """sanitizer_wiring.vir with the invocation's MemRefData records put in ``order``
    (the compiled slots are a, b, output): what compiling run(...) in that order gives."""
    program = compile_vir(DATA / "sanitizer_wiring.vir")
    inv = program.invocations[0]
    image, at = inv.window_e, inv.args_offset
    records = [image[at + k * MEMREF_SIZE:at + (k + 1) * MEMREF_SIZE] for k in range(3)]
    swapped = (image[:at] + b"".join(records[k] for k in order)
               + image[at + 3 * MEMREF_SIZE:])
    program.invocations[0] = dataclasses.replace(inv, window_e=swapped)
    return program


def test_writing_into_an_input_binding_is_caught_at_run_time():
    # issue 10: run(%o, %a, %b) for @add(a, b, output) -- the kernel writes into %b, which
    # the task binds under inputs().  Built directly, past any compile-time check.
    with pytest.raises(VpucError) as error:
        simulate(_wired((2, 0, 1)))
    assert str(error.value.diagnostics[0].message) == (
        "act: kernel @add (library \"add\") on tile 0: pc 0x1d001350 (.text+0x1350) "
        "'vst v0, 0(s4)': store of 16 bytes at 0x1f000200: outside the outputs bound to the "
        "task; it hits %b (bound under inputs() as %b: read-only for this task)")


def test_the_right_wiring_runs_under_the_sanitizer():
    result = simulate(_wired((0, 1, 2)))
    assert result.cycles > 0 and not result.races      # no false alarm on the right wiring


def test_a_kernel_status_is_a_run_error():
    # The output's MemRefData says f32 while the inputs are f16: add halts with E_TYPE.
    program = _wired((0, 1, 2))
    inv = program.invocations[0]
    at = inv.args_offset + 2 * MEMREF_SIZE
    output = MemRefData.unpack(inv.window_e, at)
    patched = dataclasses.replace(output, dataType=1).pack()
    program.invocations[0] = dataclasses.replace(
        inv, window_e=inv.window_e[:at] + patched + inv.window_e[at + MEMREF_SIZE:])
    with pytest.raises(VpucError) as error:
        simulate(program)
    assert str(error.value.diagnostics[0].message) == (
        "act: kernel @add (library \"add\") on tile 0: the kernel failed with status 1 (E_TYPE: "
        "element types the kernel does not handle; nothing written)")


def test_a_kernel_that_never_sets_its_status_is_told_so(tmp_path, capsys, monkeypatch):
    source = (DATA / "sanitizer_args.s").read_text().replace("    sw      s0, 0(s0)\n", "")
    source = source.replace("    li      s0, 0\n", "")
    (tmp_path / "sanitizer_args.s").write_text(source)
    vir = tmp_path / "k.vir"
    vir.write_text((DATA / "sanitizer_args.vir").read_text())
    err = _error([vir], capsys, monkeypatch)
    assert ("scribble: kernel @scribble (asm \"sanitizer_args.s\") on tile 0: the kernel failed "
            "with status 503316480 (s0 still holds argsAddr: the kernel never set its status, "
            "0 on success)") in err


def test_a_runaway_kernel_stops_at_the_cycle_budget(capsys, monkeypatch):
    start = time.process_time()
    err = _error([f"{SIM}/spin.vir", "--max-cycles", "200000"], capsys, monkeypatch)
    assert time.process_time() - start < 30         # not the 50M-instruction step limit
    assert err == (
        "@spin: section .text at offset 0x8: error: spin: kernel @spin (asm \"spin.s\") on tile "
        "0: still running after 149,877 SHAVE cycles, past the 149,875 that --max-cycles left "
        "it; stopped at pc 0x1d000008 (.text+0x8) 'j spin'\n")


def test_infinite_recursion_is_a_stack_overflow(capsys, monkeypatch):
    assert _error([f"{SIM}/recurse.vir"], capsys, monkeypatch) == (
        "@recurse: section .text at offset 0x0: error: recurse: kernel @recurse (asm "
        "\"recurse.s\") on tile 0: pc 0x1d000000 (.text+0x0) 'addi sp, sp, -16': stack "
        "overflow: sp = 0x1e000050 left the task's stack (0x1e000060..0x1e00405f, 16,384 "
        "bytes)\n")


def test_library_kernels_stay_inside_their_bindings():
    # Every example kernel ran under the sanitizer in the suite; here a broadcast with
    # strided gathers (stack scratch) and a dynamic output (dims written beside the data).
    program = compile_vir(DATA.parents[2] / "examples" / "dynamic_shapes.vir")
    x = np.random.default_rng(0).uniform(-1, 1, (1, 5, 256)).astype(np.float16)
    result = simulate(program, inputs={"tokens": x})
    assert result.outputs["pooled"].shape == (1, 5, 1) and not result.races


def test_a_race_on_shape_metadata_is_reported_as_the_race(capsys):
    # examples/dynamic_shapes.vir with the store waiting on %activated instead of %reduced:
    # it reads %pooled_cmx's dims before `mean` writes them, from bytes that hold tokens
    # (%pooled_cmx reuses %tokens_cmx's CMX).  The run stops on garbage dims; the race is why.
    program = compile_vir(DATA.parents[2] / "examples" / "dynamic_shapes.vir")
    dma = program.module.task_lists[0].tasks
    store = next(i for i, t in enumerate(dma) if t.label == "store")
    dma[store] = dataclasses.replace(dma[store], waits=("activated",))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 5, 256)).astype(np.float16)
    with pytest.raises(VpucError) as error:
        simulate(program, inputs={"tokens": x})
    race = error.value.diagnostics[0]
    assert race.message == (
        "race on CMX of tile 0 bytes 0x0..0x427: store (DMA channel 0) reads %pooled_cmx "
        "and mean (ACT_SHAVE tile 0) writes %pooled_cmx, and no barrier orders the two tasks")
    assert race.notes[-1][1].startswith(
        "the run then stopped: store: dynamic buffer %pooled_cmx holds dims (")
    assert len(error.value.diagnostics) == 1


@pytest.mark.parametrize("chained", [False, True])
def test_ordered_after_matches_the_schedule_for_every_pair(tmp_path, chained):
    from runtime_sim.plan import build_plan
    from runtime_sim.race_clock import ordered_after
    from runtime_sim.simarch import sim_arch_for
    from tests.sim.simlib import NO_VERIFY
    from tests.sim.test_sim_races import _act_program
    path = tmp_path / "act_order.vir"
    path.write_text(_act_program(24, chained))
    program = compile_vir(path, NO_VERIFY)
    plan = build_plan(program, sim_arch_for(program.arch))
    ordered = 0
    for u in range(plan.size):
        after = ordered_after(plan, u)
        for v in range(plan.size):
            if v != u:
                assert after[v] == plan.schedule.happens_before(u, v), (u, v)
                ordered += after[v]
    assert 0 < ordered < plan.size * (plan.size - 1)


WRAP = """
    .global wrap
    .text
wrap:
    li      s3, 0               # loop decrements first: 2^32 iterations
body:
    addi    s2, s2, 1
    loop    s3, body
    li      s0, 0
    halt
"""


@pytest.mark.parametrize("budget", [1000, 100_000])
def test_a_batched_runaway_loop_stops_where_the_interpreter_does(budget):
    from runtime_sim.isa.interpreter import CycleBudgetExceeded
    from vpuc.shave.assembler import assemble
    obj = assemble(WRAP, "wrap.s")
    stops = []
    for fast in (False, True):
        memory = invocation_memory(obj, np.zeros(64, np.uint8), bytes(16))
        loaded = load_kernel(obj, memory)
        loops = FastLoops(loaded.program) if fast else False
        with pytest.raises(CycleBudgetExceeded) as error:
            run(loaded.program, memory, max_cycles=budget, fast=loops)
        stops.append((error.value.cycles, error.value.where))
        if fast:
            assert loops.batched_iterations > budget // 4      # the fast path did run it
    assert stops[0] == stops[1]
    assert stops[0][0] == budget + 1 and stops[0][1] == "pc 0x1d000010 (.text+0x10) 'loop s3, body'"


def test_bounds_name_the_first_refused_byte_and_what_holds_it():
    from runtime_sim.isa.sanitizer import Bounds, merge
    assert merge([(8, 12), (0, 4), (4, 6), (20, 20)]) == [(0, 6), (8, 12)]
    bounds = Bounds(loads=[(0, 64)], stores=[(16, 32), (32, 48)],
                    labels=[[(16, 48, "%y (bound under outputs() as %o)")],
                            [(48, 64, "%z (not bound to this task)")], []])
    assert bounds.ranges(True) == [(16, 48)]
    assert bounds.covers(40, 8, True) and not bounds.covers(44, 8, True)
    assert bounds.covers_rows(np.array([0, 16, 40, 44]), 8, True).tolist() == [
        False, True, True, False]
    assert bounds.reason(44, 8, True) == (
        "outside the outputs bound to the task (byte 0x00000030); it hits %z (not bound to "
        "this task)")
    assert bounds.reason(64, 4, False) == "outside the buffers bound to the task; it hits no buffer"


def test_a_loop_moving_sp_out_of_the_stack_stops_in_both_paths():
    from vpuc.shave.assembler import assemble
    obj = assemble("""
    .global push
    .text
push:
    li      s3, 2000
body:
    addi    sp, sp, -16
    loop    s3, body
    li      s0, 0
    halt
""", "push.s")
    messages = []
    for fast in (False, True):
        memory = invocation_memory(obj, np.zeros(64, np.uint8), bytes(16), stack_bytes=1024)
        loaded = load_kernel(obj, memory)
        with pytest.raises(VpucError) as error:
            run(loaded.program, memory, fast=fast)
        messages.append(error.value.diagnostics[0].message)
    assert messages[0] == messages[1] == (
        "pc 0x1d000008 (.text+0x8) 'addi sp, sp, -16': stack overflow: sp = 0x1e000000 left "
        "the task's stack (0x1e000010..0x1e00040f, 1,024 bytes)")


def test_a_task_called_again_reuses_its_bounds_and_other_bindings_do_not():
    program = compile_vir(DATA / "sanitizer_past.vir")
    memory = Network(program).memory
    invocation = program.invocations[0]
    task = program.module.task_lists[0].tasks[0]
    obj = kernel_object(program.kernels[invocation.kernel].elf, invocation.kernel)
    bindings = ShaveEngine(program, memory).bindings(task)
    other = ShaveEngine(program, memory).bindings(task)       # equal, made anew
    assert other == bindings and other is not bindings

    def bounds(of):
        return invocation_memory(obj, memory.cmx(0), invocation.window_e, arch=program.arch,
                                 bindings=of).bounds
    first = bounds(bindings)
    assert bounds(bindings) is first
    assert bounds(other) is not first
    assert bounds(other).ranges(True) == first.ranges(True)
