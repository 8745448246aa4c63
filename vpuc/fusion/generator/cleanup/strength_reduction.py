"""strength-reduction: cheaper instructions for multiplications and divisions by constants.

Run-time trip counts and tails divide dims by the vector width (``D // 8``,
``D % 8``) and pointer shifts multiply by element sizes; the emitters write
``divu``/``remu`` (8 cycles of issue, 10 of latency) and ``muli`` (3 of
latency).  With the divisor a known constant (a virtual register defined
once by ``li``):

- ``muli d, a, 2^k`` -> ``slli d, a, k``;
- ``divu d, a, 2^k`` -> ``srli d, a, k``; ``remu d, a, 2^k`` -> ``andi d, a, 2^k - 1``;
- ``divu d, a, c`` (c not a power of two) -> ``mulhu`` by the magic number
  ``m = ceil(2^(31+s) / c)`` and ``srli s-1`` (Granlund-Montgomery), exact for
  every dividend below 2^31 (dims are int32); ``remu`` then is ``a - q*c``.
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import constants
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import Inst, walk_bodies


def magic(divisor: int) -> tuple[int, int]:
    """(m, r) with ``mulhu(n, m) >> r == n // divisor`` for 0 <= n < 2^31 (divisor not a
    power of two): m = ceil(2^(31+s) / d), s = ceil(log2 d), r = s - 1.  With
    e = m d - 2^(31+s) < d <= 2^s, n e < 2^(31+s), so the estimate n m / 2^(31+s)
    exceeds n / d by less than 1/d and floors to the same integer; m < 2^32."""
    s = (divisor - 1).bit_length()
    m = -(-(1 << (31 + s)) // divisor)
    assert m < 1 << 32
    return m, s - 1


def _power_of_two(k: int) -> int | None:
    return k.bit_length() - 1 if k > 0 and k & (k - 1) == 0 else None


class StrengthReductionPass(MirPass):
    name = "strength-reduction"

    def run(self, mir, target, config) -> bool:
        consts = constants(mir)
        changed = False
        for body in walk_bodies(mir.body):
            i = 0
            while i < len(body):
                n = body[i]
                if isinstance(n, Inst):
                    replacement = self._reduce(mir, n, consts)
                    if replacement is not None:
                        body[i:i + 1] = replacement
                        changed = True
                        i += len(replacement)
                        continue
                i += 1
        return changed

    def _reduce(self, mir, n: Inst, consts: dict) -> list[Inst] | None:
        op, args = n.op, n.args
        if op == "muli":
            k = _power_of_two(args[2])
            return [Inst("slli", [args[0], args[1], k], n.tag, n.note)] if k is not None else None
        if op == "mul":
            for a, b in ((args[1], args[2]), (args[2], args[1])):
                k = _power_of_two(consts.get(b, 0))
                if k is not None:
                    return [Inst("slli", [args[0], a, k], n.tag, n.note)]
            return None
        if op not in ("divu", "remu"):
            return None
        c = consts.get(args[2])
        if c is None or c <= 0:
            return None
        k = _power_of_two(c)
        if k is not None:
            if op == "divu":
                return [Inst("srli", [args[0], args[1], k], n.tag, n.note)]
            return [Inst("andi", [args[0], args[1], c - 1], n.tag, n.note)]
        m, s = magic(c)
        t, q = mir.fresh("s"), mir.fresh("s")
        out = [Inst("li", [t, m if m < 1 << 31 else m - (1 << 32)], n.tag, f"magic for /{c}"),
               Inst("mulhu", [q, args[1], t], n.tag),
               Inst("srli", [q if op == "remu" else args[0], q, s], n.tag)]
        if op == "remu":
            p = mir.fresh("s")
            out += [Inst("muli", [p, q, c], n.tag), Inst("sub", [args[0], args[1], p], n.tag)]
        return out
