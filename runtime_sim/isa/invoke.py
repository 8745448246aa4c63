"""Invoke one ACT SHAVE kernel the way the runtime does.

The runtime points WIN_D at the kernel's code (``.text`` then ``.rodata``),
WIN_E at the invocation's image (``.data`` copy, params, dims/strides) with the
SHAVE's stack above it, and WIN_F at the tile's CMX, then calls the entry with
``s0 = argsAddr`` and ``s1 = argsSize``.  The CMX array is used in place, and so are
the DDR inputs the bindings map at their aperture addresses.

``bindings`` (what the task binds in CMX) turns the memory sanitizer on
(``sanitizer.py``); the stack is always checked (``sp`` must stay in it).
"""

from __future__ import annotations

import numpy as np

from vpuc.arch import Arch, load_arch
from vpuc.diagnostics import VpucError
from vpuc.shave import KernelObject
from runtime_sim.isa.fastpath import FastLoops
from runtime_sim.isa.interpreter import RunResult, load_kernel, run, run_steps
from runtime_sim.isa.kernel_loader import load_data
from runtime_sim.isa.loop_chunk_many import execute_together
from runtime_sim.isa.memory import WindowMemory
from runtime_sim.isa.sanitizer import CmxBindings, invocation_bounds

DEFAULT_STACK_BYTES = 16384


def invocation_memory(obj: KernelObject, cmx: np.ndarray, window_e: bytes, *,
                      arch: Arch | None = None, stack_bytes: int = DEFAULT_STACK_BYTES,
                      bindings: CmxBindings | None = None,
                      memory_type: type[WindowMemory] = WindowMemory,
                      win_d: np.ndarray | None = None) -> WindowMemory:
    """The windows of one call: WIN_D sized for ``obj``'s code, WIN_E a copy of the
    invocation's image with ``stack_bytes`` of stack above it, WIN_F ``cmx`` itself.
    With ``bindings``, accesses are limited to them (the memory sanitizer).
    ``memory_type``: a ``WindowMemory`` subclass (the cycles-only run's); ``win_d``:
    another call's WIN_D of ``obj``, loaded (read-only to the kernel: shared)."""
    arch = arch or load_arch()
    if win_d is None:
        code_size = len(obj.text) + 16 + len(obj.rodata)
        win_d = np.zeros(code_size + (-code_size % 16), dtype=np.uint8)
    stack_low = len(window_e) + (-len(window_e) % 16)
    win_e = np.zeros(stack_low + stack_bytes, dtype=np.uint8)
    win_e[:len(window_e)] = np.frombuffer(window_e, dtype=np.uint8)
    memory = memory_type({"WIN_D": win_d, "WIN_E": win_e, "WIN_F": cmx}, arch)
    for address, array in (bindings.ddr_maps if bindings is not None else ()):
        memory.map_ddr(address, array)
    e_base = memory.base("WIN_E")
    memory.stack = (e_base + stack_low, e_base + len(win_e))
    if bindings is not None:
        d_base = memory.base("WIN_D")
        layout = (memory.base("WIN_F"), (d_base, d_base + len(win_d)),
                  (e_base, e_base + len(win_e)), (e_base, e_base + len(obj.data)), memory.stack)
        key = (id(bindings), layout)
        known = _BOUNDS.get(key)
        if known is None or known[0] is not bindings:
            if len(_BOUNDS) >= MAX_CACHED_BOUNDS:
                _BOUNDS.clear()
            known = _BOUNDS[key] = (bindings, invocation_bounds(layout[0], bindings, *layout[1:]))
        memory.bounds = known[1]
    return memory


# A call's sanitizer bounds follow from its bindings and its windows' layout alone: a
# task's kernel called again (the engine keeps one CmxBindings per task) reuses them.  By
# (id(bindings), layout); an entry holds its bindings, so no id is reused while it lives.
_BOUNDS: dict[tuple, tuple] = {}
MAX_CACHED_BOUNDS = 1024


def invoke_kernel(obj: KernelObject, cmx: np.ndarray, window_e: bytes, args_offset: int,
                  args_size: int, *, entry: str | None = None, arch: Arch | None = None,
                  stack_bytes: int = DEFAULT_STACK_BYTES, max_steps: int = 50_000_000,
                  max_cycles: float | None = None, fast: bool = True,
                  bindings: CmxBindings | None = None) -> RunResult:
    """Run ``obj`` against ``cmx`` (the tile's CMX bytes, modified in place).
    ``fast`` runs straight-line loops through the batched fast path (same results,
    same cycles); ``fast=False`` is the exact one-instruction-at-a-time reference.
    ``bindings``: the memory sanitizer's view of what the task binds in CMX."""
    memory = invocation_memory(obj, cmx, window_e, arch=arch, stack_bytes=stack_bytes,
                               bindings=bindings)
    loaded = load_kernel(obj, memory)
    # The .data template is already part of the WIN_E image; load_kernel copied the same bytes.
    args_addr = memory.base("WIN_E") + args_offset
    return run(loaded.program, memory, entry=loaded.entry(entry), args_addr=args_addr,
               args_size=args_size, max_steps=max_steps, max_cycles=max_cycles, fast=fast)


def invoke_together(calls: list[dict], fast_loops: list | None = None) -> list[RunResult]:
    """``invoke_kernel(**call)`` of each call (keyword arguments only; ``fast`` is
    implied), run in step: each runs until its fast path holds a proven batch, then the
    batches of all of them run, those of one loop plan as one (``loop_chunk_many``), and
    each goes on.  The calls must touch disjoint bytes of any memory they share (the
    runtime's deferred ACT tasks: no two of them write what the other touches); every
    result, memory byte and cycle is then what each call alone gives.  An error stops
    them all, raised as it is with ``together_index``: which call it came from.
    ``fast_loops`` (a list) receives each call's ``FastLoops`` (``together``: its batches
    run with others')."""
    starts = []
    # per object and arch: the first call's loaded kernel and WIN_D, which the others
    # share (the kernel cannot write WIN_D); each still gets its .data in its own WIN_E
    code: dict[tuple, tuple] = {}
    for call in calls:
        call = dict(call)
        obj, cmx, window_e = call.pop("obj"), call.pop("cmx"), call.pop("window_e")
        args_offset, args_size = call.pop("args_offset"), call.pop("args_size")
        known = code.get((id(obj), id(call.get("arch"))))
        memory = invocation_memory(obj, cmx, window_e, arch=call.get("arch"),
                                   stack_bytes=call.get("stack_bytes", DEFAULT_STACK_BYTES),
                                   bindings=call.get("bindings"),
                                   win_d=None if known is None else known[1])
        if known is None:
            loaded = load_kernel(obj, memory)
            code[id(obj), id(call.get("arch"))] = (loaded, memory.array("WIN_D"))
        else:
            loaded = known[0]
            load_data(loaded, memory)
        loops = FastLoops(loaded.program)
        loops.defer = True
        if fast_loops is not None:
            fast_loops.append(loops)
        starts.append(dict(program=loaded.program, memory=memory,
                           entry=loaded.entry(call.get("entry")),
                           args_addr=memory.base("WIN_E") + args_offset, args_size=args_size,
                           max_steps=call.get("max_steps", 50_000_000),
                           max_cycles=call.get("max_cycles"), fast=loops))
    results: list[RunResult | None] = [None] * len(starts)
    runs = [run_steps(**start) for start in starts]
    active = list(range(len(runs)))
    with np.errstate(all="ignore"):
        while active:
            pending = []
            for index in active:
                try:
                    pending.append(next(runs[index]))
                except StopIteration as done:
                    results[index] = done.value
                except VpucError as exc:
                    exc.together_index = index
                    raise
            execute_together(pending)
            active = [index for index in active if results[index] is None]
    return results

