"""licm: loop-invariant code motion, innermost loops first.

An instruction of a loop's body moves to the loop's preheader (right before
the ``Loop`` in its parent body) when:

- it is pure, or a scalar load in a loop without scalar stores (the dims of a
  MemRefData), or a vector load in an unguarded loop without vector stores;
- no register it reads is written anywhere in the loop;
- it writes a virtual register written nowhere else (so every use in the loop
  sees the one value, and nothing before it in the body reads an older one).

Hoisted instructions land in the parent body, where the parent loop's pass
may hoist them further, out to the prologue.  What moves: the constants an
emitter materializes per use (``li``+``vbcast`` of 1.0 in a Sigmoid), the
run-time trip counts, masks and pointer shifts of inner loops.
``hoist_vectors=False`` keeps vector-register instructions in place (the
generator's fallback when registers run out).
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import def_counts, is_pure, node_defs
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import SP, If, Inst, Loop, walk


class LicmPass(MirPass):
    name = "licm"

    def run(self, mir, target, config) -> bool:
        self.defs = def_counts(mir)
        self.config = config
        return self._nodes(mir.body)

    def _nodes(self, body: list) -> bool:
        changed = False
        i = 0
        while i < len(body):
            n = body[i]
            if isinstance(n, (Loop, If)):
                changed |= self._nodes(n.body)
            if isinstance(n, Loop):
                hoisted = self._hoist(n)
                if hoisted:
                    body[i:i] = hoisted
                    i += len(hoisted)
                    changed = True
            i += 1
        return changed

    def _hoist(self, loop: Loop) -> list[Inst]:
        written = set(node_defs(loop))
        insts = list(walk(loop.body))
        scalar_stores = any(x.unit == "sst" for x in insts) or loop.slot is not None
        vector_stores = any(x.unit in ("vst", "vsts") for x in insts)
        hoisted: list[Inst] = []
        progress = True
        while progress:
            progress = False
            for k, n in enumerate(loop.body):
                if not isinstance(n, Inst) or not self._movable(n, loop, scalar_stores,
                                                                 vector_stores):
                    continue
                if any(r in written for r in n.uses()):
                    continue
                d = n.defs()[0]
                if not d.virtual or self.defs[d] != 1:
                    continue
                if not self.config.hoist_vectors and (d.file != "s" or any(
                        d in m.uses() and any(r.file != "s" for r in m.defs())
                        for m in walk(loop.body))):
                    continue          # a vector constant (or the scalar it is made from)
                hoisted.append(n)
                del loop.body[k]
                written.discard(d)
                progress = True
                break
        return hoisted

    @staticmethod
    def _movable(n: Inst, loop: Loop, scalar_stores: bool, vector_stores: bool) -> bool:
        if len(n.defs()) != 1:
            return False
        if is_pure(n):
            return True
        if n.unit == "sld":
            return not scalar_stores and n.mem is not None and n.mem.base != SP
        if n.op in ("vld", "vldb.b", "vldb.h", "vldb.w"):
            return not vector_stores and not loop.guard and n.mem.base != SP
        return False
