"""What every emitter gets: the LIR, the current body, registers, constants and values.

``EmitContext.emit`` appends one instruction to the body being built, tagged
with the LIR expression being emitted.  Emitters never pick scratch registers
themselves: ``new("v")`` makes a *virtual* register, which ``regalloc.py``
maps to a physical one once the clean-ups ran (so hoisting, CSE and unrolling
are free to extend or copy temporaries).  The registers the LIR assigned to
values, pointers and counters (``out``/``inp``) are physical.

Register forms (how a value of each element type sits in a vector register),
with ``N`` = the LIR's elements per iteration and ``L = 16 // N`` bytes per
element slot (the widest element type of the body):

- f32, f16, bf16, i32: packed, element *k* in lane *k* of its own type
  (so an f16 value in a loop of 4 fills the low 8 bytes);
- u8 (comparison results, Select conditions, u8 tensors): *expanded*, one
  element per L-byte slot, the value in the low byte and zeros above (an
  i16 or i32 lane holding 0..255), so comparisons, masks and selects work
  lane by lane at the width of the other operands.  Loads and stores of u8
  memory pack and unpack through a small stack scratch area.
- i8 (int8 model inputs and outputs, quantized values): expanded like u8,
  sign-extended to the whole slot (an i16 or i32 lane holding -128..127),
  so the slot's integer instructions and ``vcvt.f32.i32`` read it directly.
"""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.mir import ARGS, SP, FBits, Inst, Mem, Reg, f32_bits
from vpuc.fusion.lir.expression import Expression
from vpuc.fusion.lir.linear_ir import LinearIR
from vpuc.ir.types import ElemType

SCRATCH_BYTES = 64           # the u8 pack/unpack area, above the LIR's frame

F16, F32, BF16, I32, U8 = ElemType.F16, ElemType.F32, ElemType.BF16, ElemType.I32, ElemType.U8
I8 = ElemType.I8
SUPPORTED = frozenset({F16, F32, BF16, I32, U8, I8})
EXPANDED = frozenset({U8, I8})     # byte types held one per L-byte slot


class NotSupported(VpucError):
    """A body the generator cannot emit yet (named op, type or shape)."""


def f16_bits(value: float) -> int:
    # a constant beyond f16's range becomes ±inf, as the hardware's f32->f16 convert does
    with np.errstate(over="ignore"):
        return int(np.array([value], np.float32).astype(np.float16).view(np.uint16)[0])


def bf16_bits(value: float) -> int:
    return int(np.array([value], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0])


def f32_of(value: float) -> float:
    return float(np.float32(value))


class EmitContext:
    def __init__(self, lir: LinearIR, target) -> None:
        self.lir = lir
        self.target = target
        self.n = lir.increment
        if 16 % self.n:
            raise NotSupported(f"@{lir.name}: {self.n} elements per iteration")
        self.slot = 16 // self.n                   # L: bytes per element slot
        self.body: list = []
        self.tag: object = "prologue"
        self._next = {"s": 0, "v": 0, "m": 0}
        self.scratch_offset = lir.frame.size       # sp + this: the u8 scratch area
        self.frame_size = lir.frame.size + SCRATCH_BYTES
        self.uses_scratch = False

    # ------------------------------------------------------------ instructions
    def emit(self, op: str, *args, note: str = "") -> Inst:
        inst = Inst(op, list(args), self.tag, note)
        self.body.append(inst)
        return inst

    def new(self, file: str) -> Reg:
        self._next[file] += 1
        return Reg(file, self._next[file], virtual=True)

    def out(self, expr: Expression, i: int = 0) -> Reg:
        return _phys(expr.out_descs[i].reg, expr, "output", i)

    def inp(self, expr: Expression, i: int) -> Reg:
        return _phys(expr.in_descs[i].reg, expr, "input", i)

    def scratch(self, offset: int = 0) -> Mem:
        self.uses_scratch = True
        return Mem(SP, self.scratch_offset + offset)

    # ------------------------------------------------------------ constants
    def int_reg(self, value: int) -> Reg:
        r = self.new("s")
        self.emit("li", r, int(value) & 0xFFFFFFFF if value >= 1 << 31 else int(value))
        return r

    def splat_f32(self, value: float) -> Reg:
        s, v = self.new("s"), self.new("v")
        self.emit("li.f32", s, f32_bits(value), note=f"{f32_of(value)!r}")
        self.emit("vbcast.w", v, s)
        return v

    def splat_f16(self, value: float) -> Reg:
        s, v = self.new("s"), self.new("v")
        bits = f16_bits(value)
        self.emit("li", s, bits, note=f"f16 {float(np.uint16(bits).view(np.float16))!r}")
        self.emit("vbcast.h", v, s)
        return v

    def splat_int(self, value: int, width: int) -> Reg:
        """Every ``width``-byte lane = ``value``."""
        s, v = self.new("s"), self.new("v")
        self.emit("li", s, value)
        self.emit({1: "vbcast.b", 2: "vbcast.h", 4: "vbcast.w"}[width], v, s)
        return v

    def splat(self, value: float, elem: ElemType) -> Reg:
        """A constant in ``elem``'s register form."""
        if elem is F32:
            return self.splat_f32(value)
        if elem is F16:
            return self.splat_f16(value)
        if elem is BF16:
            return self.splat_int(bf16_bits(value), 2)
        if elem is I32:
            return self.splat_int(_saturate(value, -(1 << 31), (1 << 31) - 1), 4)
        if elem is U8:
            return self.splat_int(_saturate(value, 0, 255), self.slot)
        if elem is I8:
            # sign-extended to the slot: the low slot bytes of the two's complement
            return self.splat_int(_saturate(value, -128, 127) & ((1 << 8 * self.slot) - 1),
                                  self.slot)
        raise NotSupported(f"@{self.lir.name}: constants of type {elem}")

    # ------------------------------------------------------------ arguments
    def memref_field(self, arg_index: int, offset: int) -> Reg:
        r = self.new("s")
        self.emit("lw", r, Mem(ARGS, 32 * arg_index + offset))
        return r


def _saturate(value: float, lo: int, hi: int) -> int:
    if value != value:
        return 0
    return int(min(max(math.trunc(value), lo), hi))


def _phys(reg, expr: Expression, side: str, i: int) -> Reg:
    if reg is None or not reg.physical:
        raise VpucError(f"internal: e{expr.id} ({expr.kind}) {side} {i} has no physical "
                        "register; run the LIR preparation passes first")
    return Reg({"gpr": "s", "vec": "v", "mask": "m"}[reg.cls], reg.index)


def float_bits_of(value: float, elem: ElemType) -> int:
    if elem is F32:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    if elem is F16:
        return f16_bits(value)
    return bf16_bits(value)


__all__ = ["EmitContext", "NotSupported", "SUPPORTED", "EXPANDED", "FBits", "SCRATCH_BYTES",
           "f16_bits", "bf16_bits", "f32_of"]
