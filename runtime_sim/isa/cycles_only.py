"""Cycles-only runs of ACT SHAVE kernels: the cycle count without the vector arithmetic.

A timing-only simulation wants each invocation's cycles, not its results.  When
no branch, trip count, address or status of a kernel depends on loaded vector
data (decided statically, ``cycles_slice.py``), its cycles are a function of
its scalar arguments, so this run executes only what computes them:

* every instruction still issues through the same in-order VLIW model (the
  interpreter's loop and ``cycles.issue``), so stalls and slots are exact;
* vector arithmetic and vector -> scalar moves are not executed (their
  registers keep stale values, which by the slice decide nothing); scalar
  instructions, control, loads and stores are;
* counted loops are charged as trips x body through the loop plans' timing
  (``cycles_only_loops.py``), computing only the last iteration's scalars;
* WIN_F is a scratch array as large as the tile's CMX, so nothing the run
  stores reaches the simulation's CMX; WIN_E is the invocation's own copy.

Loads that the slice marks (they define a critical register) may not read CMX
(tensor data, e.g. a dynamic tensor's dims) nor bytes that a vector store or a
store of a garbage scalar wrote: such a run stops with ``NeedsData``.  A mask
made from a scalar (``vmask``, ``mset``) is computed; one made from vectors or
other masks is data, and taken as all lanes active, so each access under it
is checked over all its bytes, a superset of what the full run accesses.  So a cycles-only run that ends raised no fault the full
run would raise; one that stops (``NeedsData``, a fault, the cycle budget, the
stack) makes ``invoke_cycles_only`` return None, and the caller runs the kernel
in full, which gives the cycles or the real error.
"""

from __future__ import annotations

import copy
import weakref

import numpy as np

from runtime_sim.isa.cycles_only_loops import TimingLoops
from runtime_sim.isa.cycles_slice import ALL_LANES, VECTOR, Slice, analyse
from runtime_sim.isa.interpreter import Program, RunResult, load_kernel, run
from runtime_sim.isa.library_slices import recorded_slice
from runtime_sim.isa.invoke import DEFAULT_STACK_BYTES, invocation_memory
from runtime_sim.isa.loop_plan import _memory_shape
from runtime_sim.isa.memory import WindowMemory
from runtime_sim.isa.program import flat_step
from runtime_sim.isa.sanitizer import CmxBindings
from runtime_sim.isa.semantics import SEMANTICS
from vpuc.arch import Arch
from vpuc.diagnostics import VpucError
from vpuc.shave import KernelObject
from vpuc.shave.isa import NUM_SREGS, NUM_VREGS

_MASK32 = 0xFFFFFFFF
_FIRST_MASK = NUM_SREGS + NUM_VREGS


class NeedsData(Exception):
    """A checked load would read a value this run does not compute."""


class CyclesOnlyMemory(WindowMemory):
    """The windows of a cycles-only run, with the byte ranges whose values it lacks."""

    data_window: tuple[int, int] = (0, 0)          # WIN_F: tensor data, never computed

    def start(self) -> None:
        base = self.base("WIN_F")
        self.data_window = (base, base + len(self.array("WIN_F")))
        self.unknown: list[tuple[int, int]] = []
        self.garbage = 0          # cycles_slice: VECTOR | the bits of watched loads gone wrong

    def computed(self, low: int, high: int) -> bool:
        """Whether bytes [low, high) hold what the full run would have there."""
        data_low, data_high = self.data_window
        if low < data_high and data_low < high:
            return False
        return not any(low < hi and lo < high for lo, hi in self.unknown)

    def check_load(self, address: int, size: int) -> None:
        if not self.computed(address, address + size):
            raise NeedsData(f"load of {size} bytes at {address:#010x} reads a value the "
                            "cycles-only run does not compute")

    def watch_load(self, bit: int, low: int, high: int) -> None:
        if not self.computed(low, high):
            self.garbage |= bit

    def mark_unknown(self, low: int, high: int) -> None:
        """Bytes [low, high) now hold values the run did not compute (CMX always does)."""
        data_low, data_high = self.data_window
        if not (data_low <= low and high <= data_high):
            self.unknown.append((low, high))


class TimingProgram:
    """A decoded kernel whose runners do only what the cycles need (``flat`` replaced).

    A step's runner is made when the run first reaches it (most of a library kernel's
    .text never runs in one model: the other element type's rows, the error paths, the
    bodies of batched loops); the skipped steps are shared per word.  The runners read
    immediates from R (``Program.make_runner``; the wrappers below too), so kernels whose
    code differs only in immediates (a model's kernels of one template at other sizes)
    share one ``flat``, runners made by whichever runs a step first."""

    def __init__(self, program: Program, found: Slice) -> None:
        self.program = copy.copy(program)           # shares decoded, meta, constants
        self.slice = found
        key = (found.code, program.base)
        flat = _FLATS.get(key)
        if flat is None:
            flat = []
            accesses, metas, tails, first_run = found.accesses, program.meta, program.tails, \
                self._first_run
            for index, role in enumerate(found.roles):
                if role.skip and not _mask_writes(accesses[index]):
                    flat.append(_skipped_step(metas[index]))
                else:
                    flat.append((first_run(index),) + tails[index])
            if len(_FLATS) >= MAX_FLATS:
                _FLATS.clear()
            _FLATS[key] = flat
        # The loops read only the steps' timing: ``meta`` serves as steps, no runners.
        self.program.steps, self.program.flat = program.meta, flat

    def _first_run(self, index: int):
        """The runner of step ``index`` until it first runs: it makes the step's own,
        puts it in ``flat`` for the next time, and runs it.  A straight-line block
        (``straight_blocks``) made before the step ran holds this wrapper for good, so it
        keeps the runner it made (``made``): made again per call, the encoder's cold run
        made 2,188 runners for 1,154 steps."""
        made: list = []

        def run_(R, mem, index=index, timing=self, made=made):      # bound: no cells
            if made:
                return made[0](R, mem)
            runner = timing.runner(index)
            made.append(runner)
            timing.program.flat[index] = timing.program.flat_entry(runner, index)
            return runner(R, mem)
        return run_

    def runner(self, index: int):
        """What the cycles-only run executes for instruction ``index`` (not skipped)."""
        program, found = self.program, self.slice
        role, access = found.roles[index], found.accesses[index]
        dec = program.decoded[index]
        masks = _mask_writes(access)
        if masks:
            if dec.info.format != "MS":
                return _full_masks(masks)           # from vectors or other masks: data
            return program.make_runner(index)       # from a scalar the slice keeps exact
        # a load's or store's one immediate, its offset, is R[its first constant]
        offset = program.first_constant(index)
        if role.checked_load or role.watched_load:
            return _scalar_load(program.make_runner(index), dec, access, offset,
                                role.watched_load)
        if role.store_sources or role.vector_store:
            sources = VECTOR if role.vector_store else role.store_sources
            return _marking_store(program.make_runner(index), dec, offset, sources)
        return program.make_runner(index)


# ``TimingProgram.flat`` by the code but for its immediates and the .text address; bounded.
_FLATS: dict[tuple, list] = {}
MAX_FLATS = 256


_MASK_WRITES: dict[int, tuple] = {}


def _mask_writes(access) -> tuple[int, ...]:
    """The mask registers an instruction writes (accesses are shared per decoded word)."""
    writes = access.writes
    if not writes or max(writes) < _FIRST_MASK:     # most words: nothing to remember
        return ()
    found = _MASK_WRITES.get(id(access))
    if found is None or found[0] is not access:
        if len(_MASK_WRITES) >= 1 << 16:
            _MASK_WRITES.clear()
        found = _MASK_WRITES[id(access)] = (
            access, tuple(key for key in access.writes if key >= _FIRST_MASK))
    return found[1]


def _skipped(R, mem):
    return None


_SKIPPED: dict[int, tuple] = {}


def _skipped_step(meta) -> tuple:
    """The flat step of a skipped instruction: one per word's timing (``Program.meta``
    entries are shared per decoded word), not one per instruction."""
    found = _SKIPPED.get(id(meta))
    if found is None or found[0] is not meta:
        if len(_SKIPPED) >= 1 << 16:
            _SKIPPED.clear()
        found = _SKIPPED[id(meta)] = (meta, flat_step(_skipped, *meta))
    return found[1]


def _full_masks(keys: tuple[int, ...]):
    """A mask is vector data: every lane is taken as active, so a masked access is
    checked and marked over all its bytes (a superset of the full run's)."""
    def run_(R, mem, keys=keys):            # bound, not closed over: no cells to collect
        for key in keys:
            R[key] = ALL_LANES
    return run_


def _scalar_load(inner, dec, access, offset: int, watched: int):
    """A checked load stops the run on bytes not computed; a watched one notes it.
    ``offset``: where in R the load's offset is (its immediate)."""
    (_, base), _ = access.reads
    size = _access_shape(dec, "load")[0]
    if watched:
        def run_(R, mem, base=base, offset=offset, size=size, watched=watched, inner=inner):
            address = (int(R[base]) + int(R[offset])) & _MASK32
            mem.watch_load(watched, address, address + size)
            return inner(R, mem)
        return run_

    def run_(R, mem, base=base, offset=offset, size=size, inner=inner):
        mem.check_load((int(R[base]) + int(R[offset])) & _MASK32, size)
        return inner(R, mem)
    return run_


def _marking_store(inner, dec, offset: int, sources: int):
    """A store whose value may not be computed (a vector's, or from a watched load that
    read such bytes) marks its bytes so.  ``offset``: where in R its offset is."""
    size, base, stride, lanes = _access_shape(dec, "store")

    def run_(R, mem, inner=inner, sources=sources, base=base, offset=offset, size=size,
             stride=stride, lanes=lanes):
        nxt = inner(R, mem)
        if not (sources & (VECTOR | mem.garbage)):
            return nxt
        low = (int(R[base]) + int(R[offset])) & _MASK32
        if stride is None:
            mem.mark_unknown(low, low + size)
        else:
            reach = (lanes - 1) * int(np.int32(np.uint32(R[stride])))
            mem.mark_unknown(low + min(0, reach), low + max(0, reach) + size)
        return nxt
    return run_


# Per decoded word (shared, never changed): (dec, (bytes, base register, stride register,
# lanes)) of its access, as ``_memory_shape`` gives them (a MemoryShape per call cost
# ~2 us, for each of a cold run's ~300 scalar loads and marking stores).
_SHAPES: dict[int, tuple] = {}


def _access_shape(dec, kind: str) -> tuple:
    found = _SHAPES.get(id(dec))
    if found is None or found[0] is not dec:
        shape = _memory_shape(dec, SEMANTICS[dec.info.opcode].mnemonic, kind)
        pair = dec.info.format == ("SLD2" if kind == "load" else "SST2")
        if len(_SHAPES) >= 1 << 16:
            _SHAPES.clear()
        found = _SHAPES[id(dec)] = (dec, (8 if pair else shape.size, shape.base, shape.stride,
                                          shape.lanes))
    return found[1]


# A TimingProgram per decoded Program (Programs are cached by load_kernel).
_TIMING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def timing_program(program: Program) -> TimingProgram | None:
    """The cycles-only form of ``program``; None when its cycles may depend on data."""
    found = _TIMING.get(program)
    if found is None:
        found = recorded_slice(program) or analyse(program.decoded)
        found = _TIMING[program] = TimingProgram(program, found) if found.roles else found
    return found if isinstance(found, TimingProgram) else None


class Results:
    """Cycles-only results kept for the process, by what decides them (a bounded dict)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._found: dict[tuple, RunResult] = {}

    def get(self, key: tuple) -> RunResult | None:
        return self._found.get(key)

    def put(self, key: tuple, result: RunResult) -> None:
        if len(self._found) >= self.limit:
            self._found.clear()
        self._found[key] = result


results = Results()


def data_dependence(program: Program) -> str:
    """Why ``program``'s cycles may depend on data ('' when they do not)."""
    return "" if timing_program(program) is not None else analyse(program.decoded).reason


def invoke_cycles_only(obj: KernelObject, scratch: np.ndarray, window_e: bytes,
                       args_offset: int, args_size: int, *, entry: str | None = None,
                       arch: Arch | None = None, stack_bytes: int = DEFAULT_STACK_BYTES,
                       max_steps: int = 50_000_000, max_cycles: float | None = None,
                       bindings: CmxBindings | None = None) -> RunResult | None:
    """The invocation's ``RunResult`` as ``invoke_kernel`` would count its cycles and
    status, run on ``scratch`` (the tile's CMX size; its contents are irrelevant and
    get overwritten), or None when this kernel or invocation needs the full run."""
    memory = invocation_memory(obj, scratch, window_e, arch=arch, stack_bytes=stack_bytes,
                               bindings=bindings, memory_type=CyclesOnlyMemory)
    memory.start()
    loaded = load_kernel(obj, memory)
    timing = timing_program(loaded.program)
    if timing is None:
        return None
    args_addr = memory.base("WIN_E") + args_offset
    try:
        return run(timing.program, memory, entry=loaded.entry(entry), args_addr=args_addr,
                   args_size=args_size, max_steps=max_steps, max_cycles=max_cycles,
                   fast=TimingLoops(timing))
    except (NeedsData, VpucError):
        return None         # the full run decides: its cycles, or the real error
