"""unroll: innermost counted loops run U iterations per pass of their body.

ACT SHAVE issues in order and exposes latencies (a ``vld`` is ready after 4
cycles, a ``vfpu`` op after 3), so one vector per iteration stalls on every
dependence.  Unrolling puts U independent copies of the body in one
iteration for the scheduler to interleave.  A loop qualifies when its body is
straight-line, every register it reads before writing is either loop
invariant or a data pointer advanced once by ``addi p, p, k`` after its last
use, and it touches the stack only in the u8 pack/unpack scratch (each copy then gets a
scratch area of its own, at most ``SCRATCH_COPIES`` copies).  Then:

- copy *k* of the body gets a fresh virtual register for every definition of
  what the body computes (registers dead at the loop's exit), so copies share
  no register and no false dependence remains, and reads pointer ``p`` at
  ``offset + k*k_p``; each copy's instructions carry ``group = k`` (their
  memory never overlaps another copy's, which lets the scheduler move loads
  above earlier copies' stores);
- the pointers advance by ``U*k_p`` once per iteration;
- the loop runs ``T // U`` times, and the original body runs the ``T % U``
  remaining iterations in a second loop (static counts are folded; a run-time
  count is split with ``srli``/``andi``, both loops guarded).

U is ``CleanupConfig.unroll`` (a power of two), lowered for short trip counts
and to what the vector register file can hold (``_fit_registers``).
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import SP, Inst, Loop, Mem, Reg, flatten
from vpuc.fusion.generator.kernel_emitter import SCRATCH_BYTES, SCRATCH_COPIES
from vpuc.fusion.generator.regalloc import liveness
from vpuc.shave.isa_operands import KINDS


def _is_step(n: Inst) -> bool:
    return n.op == "addi" and n.args[0] == n.args[1] and isinstance(n.args[2], int)


def _inductions(body: list[Inst]) -> dict[Reg, int] | None:
    """Pointer -> step for ``addi p, p, k`` updates after every other use of ``p``; None
    if the body carries any other register from one iteration to the next."""
    steps: dict[Reg, int] = {}
    for i, n in enumerate(body):
        if _is_step(n):
            p = n.args[0]
            if not any(p in m.uses() or p in m.defs() for m in body[i + 1:]):
                if any(p in m.defs() for m in body[:i]):
                    return None
                steps[p] = n.args[2]
    defined_anywhere = {r for n in body for r in n.defs()}
    written: set[Reg] = set()
    for n in body:
        if _is_step(n) and n.args[0] in steps:
            continue
        for r in n.uses():
            if r not in steps and r not in written and r in defined_anywhere:
                return None                      # read before written: loop-carried
        written.update(n.defs())
    return steps


VECTOR_REGISTERS = 32


def _scratch_only(body: list[Inst], scratch_offset: int | None) -> bool | None:
    """Whether ``body`` touches the stack (the u8 pack/unpack scratch only: True), not at all
    (False), or elsewhere too (None: spill slots, which copies cannot have apart)."""
    offsets = [a.offset for n in body for a in n.args if isinstance(a, Mem) and a.base == SP]
    if not offsets:
        return False
    if scratch_offset is None or any(not scratch_offset <= o < scratch_offset + SCRATCH_BYTES
                                     for o in offsets):
        return None
    return True


def _fit_registers(core: list[Inst], local: set, u: int) -> int:
    """The largest factor (a power of two, at most ``u``) whose copies can all be in
    flight in the vector file: the values read from outside the loop, plus per copy
    the most body-local vector values live at once.  An optimistic estimate (software
    pipelining may need up to twice that, the scheduler less): it skips the attempts
    that cannot fit, and the generator still retries with a smaller factor when
    allocation fails."""
    outside = {r for n in core for r in n.uses() if r.file == "v" and r not in local}
    live: set = set()
    peak = 0
    for n in reversed(core):
        defs = {r for r in n.defs() if r.file == "v"}
        peak = max(peak, len(live | defs))
        live -= defs
        live |= {r for r in n.uses() if r.file == "v" and r in local}
    while u > 1 and len(outside) + u * max(peak, 1) > VECTOR_REGISTERS:
        u //= 2
    return u


class UnrollPass(MirPass):
    name = "unroll"

    def run(self, mir, target, config) -> bool:
        if config.unroll < 2:
            return False
        where: dict[int, int] = {}
        flat = flatten(mir.body, mir.tail, where)
        _, live_in = liveness(flat, with_in=True)
        self.mir, self.config = mir, config
        self.live_at_exit = {key: live_in[i + 1] if i + 1 < len(flat) else set()
                             for key, i in where.items()}
        return self._nodes(mir.body)

    def _nodes(self, body: list) -> bool:
        changed = False
        i = 0
        while i < len(body):
            n = body[i]
            if isinstance(n, Loop) and all(isinstance(x, Inst) for x in n.body):
                found = self._unroll(body, i, n)
                if found is not None:
                    at, replacement = found
                    body[at:i + 1] = body[at + 1:i] + replacement
                    i = at + (i - at - 1) + len(replacement)
                    changed = True
                    continue
            elif not isinstance(n, Inst):
                changed |= self._nodes(n.body)
            i += 1
        return changed

    def _copy(self, core: list[Inst], local: set, steps: dict[Reg, int], k: int) -> list[Inst]:
        """Copy *k* of the body: every write-only definition of a body-local register
        gets a fresh name (SSA) that the later reads of this copy see, and memory
        operands on an advanced pointer move by ``k`` steps.  Operands are renamed
        position by position: an instruction that reads and writes the same
        register (``mnot m1, m1``) reads the previous name and writes the new one.
        A read-and-written operand (``vu``, ``su``) keeps the name it reads."""
        current: dict[Reg, Reg] = {}
        out = []
        for n in core:
            args = []
            renamed: dict[Reg, Reg] = {}
            for kind, a in zip(n.kinds(), n.args):
                access = KINDS[kind].access
                if kind == "mem":
                    base = current.get(a.base, a.base)
                    offset = a.offset + k * steps[a.base] if a.base in steps else a.offset
                    if a.base == SP:                  # the u8 scratch: this copy's area
                        offset = a.offset + k * SCRATCH_BYTES
                    args.append(Mem(base, offset))
                elif access == "w" and a in local:
                    renamed[a] = self.mir.fresh(a.file)
                    args.append(renamed[a])
                elif "r" in access:
                    args.append(current.get(a, a))
                    if access == "rw" and a in local:
                        renamed[a] = args[-1]
                else:
                    args.append(a)
            current.update(renamed)
            m = n.copy()
            m.args = args
            m.group = k
            out.append(m)
        return out

    def _unroll(self, parent: list, i: int, loop: Loop) -> list | None:
        at = i - 1            # the counter's initialization: the last write of it before
        while at >= 0 and isinstance(parent[at], Inst) and loop.counter not in (
                parent[at].defs() + parent[at].uses()):
            at -= 1
        init = parent[at] if at >= 0 else None
        if (loop.slot is not None or not isinstance(init, Inst) or init.defs() != [loop.counter]
                or loop.counter in init.uses()):
            return None
        body: list[Inst] = loop.body
        scratch = _scratch_only(body, getattr(self.mir, "scratch_offset", None))
        if scratch is None:
            return None              # the stack beyond the u8 scratch (spill slots)
        steps = _inductions(body)
        if steps is None or loop.counter in {r for n in body for r in n.defs() + n.uses()}:
            return None
        static = init.args[1] if init.op == "li" and isinstance(init.args[1], int) else None
        u = self.config.unroll
        if static is not None:
            while u > 1 and static < u:
                u //= 2
            if u < 2:
                return None
        exit_live = self.live_at_exit.get(id(loop), set())
        local = {r for n in body for r in n.defs() if r not in steps}
        if local & exit_live:
            return None
        core = [n for n in body if not (_is_step(n) and n.args[0] in steps)]
        u = _fit_registers(core, local, u)
        if scratch:
            u = min(u, SCRATCH_COPIES)        # each copy packs in a scratch area of its own
        if u < 2:
            return None
        if any(kind in ("sd2", "sa2") and (a in local or Reg(a.file, a.index + 1) in local)
               for n in core for kind, a in zip(n.kinds(), n.args)):
            return None       # a register pair cannot be renamed one register at a time
        unrolled = [m for k in range(u) for m in self._copy(core, local, steps, k)]
        for reg, step in steps.items():
            unrolled.append(Inst("addi", [reg, reg, u * step], loop.tag, "pointer increment"))
        shift = u.bit_length() - 1
        main = Loop(loop.counter, unrolled, loop.guard, None, loop.tag, f"{loop.name} x{u}",
                    dict(loop.info, unrolled=u))
        rest = Loop(loop.counter, body, True, None, loop.tag, f"{loop.name} remainder",
                    dict(loop.info))
        if static is not None:
            if static // u == 1:          # one pass: straight-line code, no counter
                out = list(unrolled)
            else:
                out = [Inst("li", [loop.counter, static // u], init.tag, "trip count"), main]
            if static % u:
                rest.guard = False
                out += [Inst("li", [loop.counter, static % u], init.tag, "remainder"), rest]
            return at, out
        left = self.mir.fresh("s")
        main.guard = True
        return at, [init,
                Inst("andi", [left, loop.counter, u - 1], init.tag, "remainder"),
                Inst("srli", [loop.counter, loop.counter, shift], init.tag, f"trip count / {u}"),
                main,
                Inst("mov", [loop.counter, left], init.tag), rest]
