"""cse: common subexpression elimination over the structured MIR.

An instruction is available from where it runs until one of its operands or
its destination is written again; a load is also killed by any store (memory
is not disambiguated).  Availability flows down into a nested body, minus
what that body (a loop: every iteration) writes, and back up minus the same.
A repeated computation of an available one:

- is deleted when both results are virtual registers written nowhere else,
  and its uses read the first result (constants, dims and strides loads,
  vector constants the emitters materialize per use);
- a repeated *load* into any other register becomes a register move (e.g.
  the second ``vld`` of an input element when its first result is still
  there).

Pure instructions (the ALU, multiply, float, vector and conversion units)
and loads qualify; stores and control flow never do.
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import (LOAD_UNITS, def_counts, is_pure, node_defs,
                                                    node_stores, rename_uses)
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import SP, Inst, Reg

MOVES = {"s": "mov", "v": "vmov"}


def _key(inst: Inst):
    return (inst.op,) + tuple(a for k, a in zip(inst.kinds(), inst.args)
                              if k not in ("sd", "vd", "md"))


def _candidate(inst: Inst) -> bool:
    if inst.op in ("vld.m", "vlds.m.b", "vlds.m.h", "vlds.m.w"):
        return False         # a masked load's result depends on the mask too; rarely repeated
    return is_pure(inst) or (inst.unit in LOAD_UNITS and len(inst.defs()) == 1
                             and not any(getattr(a, "base", None) is not None
                                         and a.base == SP for a in inst.args))


class CsePass(MirPass):
    name = "cse"

    def run(self, mir, target, config) -> bool:
        self.vectors = config.hoist_vectors
        self.defs = def_counts(mir)
        self.renames: dict[Reg, Reg] = {}
        self.changed = False
        self._block(mir.body, {})
        if self.renames:
            # chains: a -> b -> c
            for k in list(self.renames):
                v = self.renames[k]
                while v in self.renames:
                    v = self.renames[v]
                self.renames[k] = v
            rename_uses(mir, self.renames)
        return self.changed

    def _block(self, body: list, available: dict) -> None:
        out = []
        for n in body:
            if isinstance(n, Inst):
                n.replace_regs({r: self.renames[r] for r in n.uses() if r in self.renames})
                found = available.get(_key(n)) if _candidate(n) and (
                    self.vectors or n.defs()[0].file == "s") else None
                dst = n.defs()[0] if found is not None else None
                stable = found is not None and found.virtual and self.defs[found] == 1
                if found is not None and dst == found:
                    self.changed = True
                    continue                               # recomputes its own value
                if stable and dst.virtual and self.defs[dst] == 1:
                    self.renames[dst] = found              # neither is ever written again
                    self.changed = True
                    continue
                if found is not None and dst.file in MOVES and n.is_load:
                    n = Inst(MOVES[dst.file], [dst, found], n.tag, "cse")
                    self.changed = True
                self._kill(available, n.defs(), n.is_store)
                if _candidate(n) and n.op not in MOVES.values():
                    d = n.defs()[0]
                    if d not in n.uses():
                        available[_key(n)] = d
                out.append(n)
                continue
            killed_regs, stores = node_defs(n), node_stores(n)
            inner = dict(available)
            self._kill(inner, killed_regs, stores)
            self._block(n.body, inner)
            self._kill(available, killed_regs, stores)
            out.append(n)
        body[:] = out

    @staticmethod
    def _kill(available: dict, regs, store: bool) -> None:
        regs = set(regs)
        if not regs and not store:
            return
        for key, d in list(available.items()):
            operands = {a for a in key[1:] if isinstance(a, Reg)} | {
                a.base for a in key[1:] if hasattr(a, "base")}
            if d in regs or operands & regs or (store and key[0] in _LOADS):
                del available[key]


_LOADS = {"lb", "lbu", "lh", "lhu", "lw", "ld", "vld", "vldb.b", "vldb.h", "vldb.w",
          "vlds.b", "vlds.h", "vlds.w"}
