"""simplify: expression simplification of scalar (address) arithmetic.

The emitters compute run-time values and pointer shifts the straightforward
way: ``li t, k`` then ``add``/``mul``/``divu`` with ``t``.  This pass folds
constants through them, within each straight-line block and for virtual
registers that are constants kernel-wide (defined once, by ``li``):

- ``add d, a, t`` with ``t`` = k  ->  ``addi d, a, k`` (either operand);
  ``sub d, a, t`` -> ``addi d, a, -k``; ``mul d, a, t`` -> ``muli d, a, k``;
- an op whose operands are all known -> ``li d, value`` (add, sub, mul,
  addi, muli, slli, srli, andi, divu, remu, mov);
- identities: ``muli d, a, 1`` / ``addi d, a, 0`` (d != a) -> ``mov d, a``;
  ``muli d, a, 0`` -> ``li d, 0``.

The ``li`` left unused disappear in peephole's dead-code step.
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import constants, wrap32
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import Inst, Reg, walk_bodies

FOLD = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "addi": lambda a, k: a + k, "muli": lambda a, k: a * k,
    "slli": lambda a, k: a << k, "srli": lambda a, k: (a & 0xFFFFFFFF) >> k,
    "andi": lambda a, k: a & k, "ori": lambda a, k: a | k,
    "divu": lambda a, b: (a & 0xFFFFFFFF) // (b & 0xFFFFFFFF) if b else 0xFFFFFFFF,
    "remu": lambda a, b: (a & 0xFFFFFFFF) % (b & 0xFFFFFFFF) if b else a,
}
REG_REG = {"add", "sub", "mul", "divu", "remu"}
TO_IMM = {"add": "addi", "mul": "muli"}


class SimplifyPass(MirPass):
    name = "simplify"

    def run(self, mir, target, config) -> bool:
        global_consts = constants(mir)
        changed = False
        for body in walk_bodies(mir.body):
            known: dict[Reg, int] = {}
            for n in body:
                if not isinstance(n, Inst):
                    known.clear()          # a nested body may redefine anything
                    continue
                changed |= self._fold(n, known, global_consts)
                for d in n.defs():
                    known.pop(d, None)
                if n.op == "li" and isinstance(n.args[1], int):
                    known[n.args[0]] = n.args[1]
        return changed

    @staticmethod
    def _fold(n: Inst, known: dict, global_consts: dict) -> bool:
        def value(r):
            if not isinstance(r, Reg) or r.file != "s":
                return None
            return known.get(r, global_consts.get(r))

        op, args = n.op, n.args
        if op == "mov":
            v = value(args[1])
            if v is not None:
                n.op, n.args = "li", [args[0], wrap32(v)]
                return True
            return False
        if op in REG_REG:
            a, b = value(args[1]), value(args[2])
            if a is not None and b is not None:
                n.op, n.args = "li", [args[0], wrap32(FOLD[op](a, b))]
                return True
            if op in TO_IMM and b is not None:
                n.op, n.args = TO_IMM[op], [args[0], args[1], b]
                return True
            if op in TO_IMM and a is not None:
                n.op, n.args = TO_IMM[op], [args[0], args[2], a]
                return True
            if op == "sub" and b is not None:
                n.op, n.args = "addi", [args[0], args[1], -b]
                return True
            return False
        if op in FOLD:                      # register-immediate forms
            a = value(args[1])
            if a is not None:
                n.op, n.args = "li", [args[0], wrap32(FOLD[op](a, args[2]))]
                return True
            if (op, args[2]) in (("muli", 1), ("addi", 0)) and args[0] != args[1]:
                n.op, n.args = "mov", [args[0], args[1]]
                return True
            if (op, args[2]) == ("muli", 0):
                n.op, n.args = "li", [args[0], 0]
                return True
        return False
