"""Register files the generator allocates from, per target, with the reserved registers.

ACT SHAVE (docs/shave-isa.md, ABI): a generated kernel is an entry point, so
no callee-saved convention applies, but these registers are never handed to
LIR values:

- ``s0``: argsAddr, kept for the whole kernel so emitters can read the
  MemRefData of an argument (run-time dims of dynamic tensors) at any time;
- ``s1``, ``s2``, ``s3``: emitter temporaries (the scalar a ``vbcast`` reads,
  the count ``vmask`` reads, address arithmetic, a spilled loop counter;
  ``s2:s3`` is an even/odd pair for ``ld``); s1 (argsSize) is dead after entry;
- ``s30`` = sp and ``s31`` = lr: the stack;
- ``v28``..``v31``: emitter scratch vectors (multi-instruction emitters such
  as Sigmoid, Erf, f16<->f32 widening);
- ``m7``: emitter scratch mask (compare-and-select sequences).

That leaves 26 scalar registers for data pointers and loop counters (the
target's 24 data pointers + 2 innermost loop counters, ``targets/shave.py``),
28 vector and 7 mask registers.  An emitter that needs more scratch may use any
allocatable register that is not in its expression's ``live_regs`` and not
one of its operands.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vpuc.fusion.lir.expression import GPR, MASK, VEC


@dataclass(frozen=True)
class RegisterFile:
    name: str
    allocatable: dict[str, tuple[int, ...]]           # class -> physical indices, in preference order
    reserved: dict[str, dict[int, str]] = field(default_factory=dict)   # class -> {index: why}
    spill_bytes: dict[str, int] = field(default_factory=dict)           # stack slot size per class

    def pool(self, cls: str) -> tuple[int, ...]:
        return self.allocatable.get(cls, ())

    def with_budget(self, **budget: int) -> "RegisterFile":
        """The same file with fewer allocatable registers per class (tests of insert-reg-spills)."""
        pools = dict(self.allocatable)
        for cls, count in budget.items():
            pools[cls] = pools[cls][:count]
        return replace(self, name=f"{self.name}-tight", allocatable=pools)


SHAVE_REGISTERS = RegisterFile(
    name="shave",
    allocatable={GPR: tuple(range(4, 30)), VEC: tuple(range(0, 28)), MASK: tuple(range(0, 7))},
    reserved={
        GPR: {0: "argsAddr (MemRefData of every argument)", 1: "emitter temporary",
              2: "emitter temporary", 3: "emitter temporary", 30: "sp", 31: "lr"},
        VEC: {28: "emitter scratch", 29: "emitter scratch", 30: "emitter scratch",
              31: "emitter scratch"},
        MASK: {7: "emitter scratch"},
    },
    spill_bytes={GPR: 4, VEC: 16, MASK: 4},
)

# OpenVINO's x64 numbers for comparison: 16 GPRs minus rsp, the runtime-params and
# work-amount registers; 16 ymm registers with none reserved (emitters use free ones).
X64_REGISTERS = RegisterFile(
    name="x64",
    allocatable={GPR: tuple(i for i in range(16) if i not in (4, 7, 8, 9)),
                 VEC: tuple(range(16)), MASK: tuple(range(1, 8))},
    reserved={GPR: {4: "rsp", 7: "runtime params (abi_param1)", 8: "work amount",
                    9: "work amount"}, MASK: {0: "k0 (no masking)"}},
    spill_bytes={GPR: 8, VEC: 32, MASK: 8},
)


def register_file_for(target_name: str) -> RegisterFile:
    return {"shave": SHAVE_REGISTERS, "x64": X64_REGISTERS}.get(target_name, SHAVE_REGISTERS)
