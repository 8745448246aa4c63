"""``TargetMachine``: what the generator knows about ACT SHAVE, and its emitter table.

OpenVINO's ``TargetMachine`` maps each op type to the emitter that implements
it (the ``jitters`` map) and tells the generator about the target (vector
width, registers).  Ours holds:

- ``emitters``: LIR expression kind -> emitter ``fn(ctx, expr)`` appending MIR
  instructions (``emitters/``);
- ``fusion``: the fusion target (``vpuc.fusion.targets``): lanes per element
  type, data-pointer limit, the register file the LIR allocates from;
- ``cost(mnemonic)``: issue cycles and latency from the simulator's cycle
  table (``runtime_sim/isa/cycles.py``), which the scheduler and the unroller
  use, so the generator optimizes for the machine the simulator models;
- ``element_types``: the types its emitters handle (f16, f32, bf16, i32, u8).

``emitter(expr)`` raises ``NotSupported`` naming the op and type when an
expression has no emitter, so ``vpuc compile`` stops with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from runtime_sim.isa.cycles import CYCLES, Cost
from vpuc.fusion.generator.context import SUPPORTED, NotSupported
from vpuc.fusion.generator.emitters import arith, logic, math_ops, memory
from vpuc.fusion.lir.expression import Expression
from vpuc.fusion.targets import TargetMachine as FusionTarget
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ElemType
from vpuc.shave.isa import BY_MNEMONIC

Emitter = Callable[..., None]

LIR_KINDS = ("LoopBegin", "LoopEnd")   # handled by the kernel emitter itself


@dataclass
class TargetMachine:
    name: str
    fusion: FusionTarget
    emitters: dict[str, Emitter] = field(default_factory=dict)
    element_types: frozenset[ElemType] = SUPPORTED

    def emitter(self, expr: Expression) -> Emitter:
        fn = self.emitters.get(expr.kind)
        if fn is None:
            raise NotSupported(f"the {self.name} generator has no emitter for {expr.kind} "
                               f"(e{expr.id}); not supported yet")
        for desc in expr.in_descs + expr.out_descs:
            if desc.reg is not None and desc.reg.cls == "vec" and desc.elem not in self.element_types:
                raise NotSupported(f"{expr.kind} on {desc.elem} values: the {self.name} "
                                   "generator handles " + ", ".join(
                                       sorted(str(e) for e in self.element_types))
                                   + "; not supported yet")
        return fn

    def supports(self, kind: str) -> bool:
        return kind in self.emitters or kind in LIR_KINDS

    @staticmethod
    def cost(mnemonic: str) -> Cost:
        return CYCLES[BY_MNEMONIC[mnemonic].opcode]


def shave_target_machine() -> TargetMachine:
    table: dict[str, Emitter] = {}
    for module in (memory, arith, math_ops, logic):
        table.update(module.EMITTERS)
    return TargetMachine("ACT SHAVE", get_target("shave"), table)


SHAVE_TM = shave_target_machine()
