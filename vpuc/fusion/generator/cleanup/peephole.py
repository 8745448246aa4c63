"""peephole: local rewrites of the emitted code, then dead-code elimination.

In each straight-line block:

- ``addi r, r, 0``, ``mov r, r``, ``vmov v, v`` go;
- ``addi r, r, a`` ... ``addi r, r, b`` with nothing reading or writing ``r``
  in between become one ``addi r, r, a+b`` (an inner loop's finalization
  offset next to its outer loop's increment; consecutive pointer shifts);
- a move out of a virtual register written once and read only by the move
  (``vcvt.f16.f32 %v7, ...; vmov v3, %v7``) writes its destination directly,
  when nothing in between touches the destination;
- a copy between virtual registers each written once (``vmov %v4, %v1``, what
  CSE leaves when two Loads of one input merge) goes, its readers reading the
  source, when they all follow it in the same block;

then, kernel-wide and to a fixed point, pure instructions (and loads) whose
virtual destination nothing reads are deleted.
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import (LOAD_UNITS, def_counts, is_pure,
                                                    use_counts)
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import Inst, walk, walk_bodies

MOVES = ("mov", "vmov")


def trivial(n: Inst) -> bool:
    return (n.op in MOVES and n.args[0] == n.args[1]) or (
        n.op == "addi" and n.args[2] == 0 and n.args[0] == n.args[1])


class PeepholePass(MirPass):
    name = "peephole"

    def run(self, mir, target, config) -> bool:
        changed = False
        for body in list(walk_bodies(mir.body)):
            changed |= self._trivial(body)
            changed |= self._merge_addi(body)
        changed |= self._coalesce(mir)
        changed |= self._propagate_copies(mir)
        changed |= dead_code(mir)
        for body in list(walk_bodies(mir.body)):
            changed |= self._trivial(body)
        return changed

    @staticmethod
    def _trivial(body: list) -> bool:
        keep = [n for n in body if not (isinstance(n, Inst) and trivial(n))]
        changed = len(keep) != len(body)
        body[:] = keep
        return changed

    @staticmethod
    def _merge_addi(body: list) -> bool:
        changed = False
        i = 0
        while i < len(body):
            n = body[i]
            if isinstance(n, Inst) and n.op == "addi" and n.args[0] == n.args[1]:
                r = n.args[0]
                for j in range(i + 1, len(body)):
                    m = body[j]
                    if not isinstance(m, Inst):
                        break
                    if m.op == "addi" and m.args[0] == r and m.args[1] == r:
                        n.args = [r, r, n.args[2] + m.args[2]]
                        n.note = n.note or m.note
                        del body[j]
                        changed = True
                        break
                    if r in m.uses() or r in m.defs():
                        break
            i += 1
        return changed

    @staticmethod
    def _coalesce(mir) -> bool:
        defs, uses = def_counts(mir), use_counts(mir)

        def rewrite(body: list, i: int, dst, src) -> bool:
            if not (src.virtual and defs[src] == 1 and uses[src] == 1):
                return False
            j = i - 1
            while j >= 0 and isinstance(body[j], Inst) and src not in body[j].defs():
                if dst in body[j].uses() or dst in body[j].defs():
                    return False
                j -= 1
            if not (j >= 0 and isinstance(body[j], Inst) and body[j].defs() == [src]):
                return False
            body[j].replace_regs({src: dst})
            defs[dst] += 1
            return True
        return _rewrite_moves(mir, rewrite)

    @staticmethod
    def _propagate_copies(mir) -> bool:
        defs, uses = def_counts(mir), use_counts(mir)

        def rewrite(body: list, i: int, dst, src) -> bool:
            later = [m for m in body[i + 1:] if isinstance(m, Inst)]
            flat = {id(m) for m in later}
            if not (dst.virtual and src.virtual and dst != src and defs[dst] == 1
                    and defs[src] == 1
                    and sum(m.uses().count(dst) for m in later) == uses[dst]
                    and all(j < i for j, m in enumerate(body)
                            if isinstance(m, Inst) and src in m.defs())
                    and not any(src in m.defs() for m in walk(body[i + 1:])
                                if id(m) not in flat)):
                return False
            for m in later:
                if dst in m.uses():
                    m.replace_regs({dst: src})
            defs[dst] -= 1
            uses[src] += uses[dst]
            uses[dst] = 0
            return True
        return _rewrite_moves(mir, rewrite)


def _rewrite_moves(mir, rewrite) -> bool:
    """Offer every move of every block to ``rewrite(body, i, dst, src)``, which returns
    True when the move is no longer needed (then it is deleted)."""
    changed = False
    for body in walk_bodies(mir.body):
        i = 0
        while i < len(body):
            n = body[i]
            if isinstance(n, Inst) and n.op in MOVES and rewrite(body, i, *n.args):
                del body[i]
                changed = True
                continue
            i += 1
    return changed


def dead_code(mir) -> bool:
    changed = False
    while True:
        uses = use_counts(mir)
        removed = False
        for body in walk_bodies(mir.body):
            keep = []
            for n in body:
                if (isinstance(n, Inst) and (is_pure(n) or n.unit in LOAD_UNITS)
                        and len(n.defs()) == 1 and n.defs()[0].virtual
                        and uses[n.defs()[0]] == 0):
                    removed = True
                    continue
                keep.append(n)
            body[:] = keep
        if not removed:
            return changed
        changed = True
