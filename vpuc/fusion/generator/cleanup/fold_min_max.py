"""fold-min-max: chains of vector max/min with constants become one clamp.

Relu is ``max(x, 0)``, Clamp ``min(max(x, lo), hi)``, Maximum and Minimum
with a Scalar are one instruction each; a fused chain of them (ReLU6 after a
clamp, say) computes a clamp of its input whatever its length.  With ``c1``,
``c2`` splat constants of the same lane type and the intermediate ``a`` read
only by the second instruction (and dead after it):

- ``max(max(x, c1), c2)`` -> ``max(x, max(c1, c2))``; the same for ``min``;
- ``max(min(x, c1), c2)`` with ``c2 < c1`` -> ``min(max(x, c2), c1)`` (the
  clamp order, so a following max or min folds too).

Exact: max and min of representable values round nothing, and both
propagate NaN.  A constant is a vector register written once, by
``vbcast`` of a scalar written once by ``li`` / ``li.f32``.
"""

from __future__ import annotations

import struct

import numpy as np

from vpuc.fusion.generator.cleanup.analysis import def_counts
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.mir import FBits, Inst, Reg, flatten, walk, walk_bodies
from vpuc.fusion.generator.regalloc import liveness

OPS = ("vmax", "vmin")


def _float(bits: int, suffix: str) -> float:
    if suffix == "f32":
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return float(np.array([bits & 0xFFFF], np.uint16).view(np.float16)[0])


def _bits(value: float, suffix: str) -> int:
    if suffix == "f32":
        return struct.unpack("<I", struct.pack("<f", value))[0]
    return int(np.array([value], np.float16).view(np.uint16)[0])


class FoldMinMaxPass(MirPass):
    name = "fold-min-max"

    def run(self, mir, target, config) -> bool:
        changed = False
        for _ in range(16):
            if not self._once(mir):
                return changed
            changed = True
        return changed

    def _once(self, mir) -> bool:
        defs = def_counts(mir)
        scalars: dict[Reg, int] = {}
        for i in walk(mir.body):
            if i.op in ("li", "li.f32") and defs[i.args[0]] == 1:
                value = i.args[1]
                scalars[i.args[0]] = value.bits if isinstance(value, FBits) else value
        splats: dict[Reg, tuple[str, int]] = {}
        for i in walk(mir.body):
            if i.op in ("vbcast.h", "vbcast.w") and defs[i.args[0]] == 1 and i.args[1] in scalars:
                splats[i.args[0]] = ("f16" if i.op.endswith("h") else "f32", scalars[i.args[1]])
            elif i.op == "vmov" and defs[i.args[0]] == 1 and i.args[1] in splats:
                splats[i.args[0]] = splats[i.args[1]]
        flat = flatten(mir.body, mir.tail)
        live_after = {id(f.inst): live for f, live in zip(flat, liveness(flat))}
        for body in walk_bodies(mir.body):
            for k, second in enumerate(body):
                if not self._is_op(second, splats):
                    continue
                a = second.args[1]
                j = k - 1
                while j >= 0 and isinstance(body[j], Inst) and a not in body[j].defs():
                    if a in body[j].uses():
                        break
                    j -= 1
                if j < 0 or not isinstance(body[j], Inst):
                    continue
                first = body[j]
                if not self._is_op(first, splats) or first.args[0] != a:
                    continue
                if a in live_after[id(second)] and second.args[0] != a:
                    continue
                if self._fold(mir, body, j, k, first, second, splats):
                    return True
        return False

    @staticmethod
    def _is_op(inst, splats) -> bool:
        if not isinstance(inst, Inst):
            return False
        op, _, suffix = inst.op.partition(".")
        return op in OPS and suffix in ("f16", "f32") and inst.args[2] in splats \
            and splats[inst.args[2]][0] == suffix

    def _fold(self, mir, body, j, k, first, second, splats) -> bool:
        op1, _, suffix = first.op.partition(".")
        op2 = second.op.partition(".")[0]
        if second.op.partition(".")[2] != suffix:
            return False
        c1 = _float(splats[first.args[2]][1], suffix)
        c2 = _float(splats[second.args[2]][1], suffix)
        if op1 == op2:
            value = max(c1, c2) if op1 == "vmax" else min(c1, c2)
            x, a, b = first.args[1], first.args[0], second.args[0]
            between = body[j + 1:k]
            const = self._splat(mir, body, j, value, suffix, first.tag)
            if b == a or (not any(b in m.uses() or b in m.defs()
                                                    for m in between)):
                first.args = [b, x, const]             # the first computes the result
                first.note = "folded"
                body.remove(second)
            else:
                first.args = [a, x, const]
                second.op, second.args, second.note = "vmov", [b, a], "folded"
            return True
        if op1 == "vmin" and op2 == "vmax" and c2 < c1:
            # c1's register is written before the first instruction; c2 is made there anew
            c1_reg = first.args[2]
            first.op, second.op = f"vmax.{suffix}", f"vmin.{suffix}"
            first.args[2] = self._splat(mir, body, j, c2, suffix, first.tag)
            second.args[2] = c1_reg
            return True
        return False

    @staticmethod
    def _splat(mir, body, at, value, suffix, tag) -> Reg:
        s, v = mir.fresh("s"), mir.fresh("v")
        if suffix == "f32":
            li = Inst("li.f32", [s, FBits(_bits(value, suffix))], tag, repr(value))
            bc = Inst("vbcast.w", [v, s], tag)
        else:
            li = Inst("li", [s, _bits(value, suffix)], tag, f"f16 {value!r}")
            bc = Inst("vbcast.h", [v, s], tag)
        body[at:at] = [li, bc]
        return v
