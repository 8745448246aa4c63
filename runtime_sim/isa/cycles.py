"""The SHAVE cycle table and the in-order VLIW timing model, apart from the semantics.

The SHAVE is a VLIW core: every cycle it issues one bundle with at most one
operation per functional unit (Myriad 2 SHAVE: IAU, SAU, VAU, CMU, two LSUs,
BRU, PEU -- Barry et al., "Always-on Vision Processing Unit for Mobile
Applications", IEEE Micro 35(2), 2015).  Our binaries are a plain sequence of
64-bit instructions; the timing model forms the bundles in order, as the
SHAVE assembler's bundling would:

* every instruction runs on one slot (``SLOT_OF_UNIT``; the LSU group has two);
* it issues at ``max(now, ready[r] for every register r it reads, the cycle its
  slot is free)`` -- the wait for operands is a stall, the wait for a busy slot
  is not (it is the throughput of the unit);
* ``now`` is the issue cycle of the previous instruction: instructions issue in
  program order, several in one cycle when their slots differ and their
  operands are ready;
* each register it writes becomes ready ``latency`` cycles after issue, and its
  slot is busy for ``issue`` cycles (above 1: a non-pipelined unit -- divides,
  transcendentals, strided access);
* a control instruction (branch, ``loop``, ``halt``) closes its bundle: the next
  one issues a cycle later at the earliest, plus ``taken_penalty`` (refetch) when
  it is taken; ``loop`` is zero-overhead: its taken penalty is 0;
* memory has no dependency tracking: a load sees every earlier store;
* the run ends when ``halt`` (or ``ret`` to the exit address) issues and every
  outstanding result is ready and slot free: ``cycles = max(now, max(ready))``.

``ready`` is indexed by register key (``semantics.register_key``: s0..s31 =
0..31, v0..v31 = 32..63, m0..m7 = 64..71), then one key per slot
(``SLOT_KEYS``); ``new_ready()`` makes one.  The fast path reuses ``issue`` and
``finish`` to get the same count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime_sim.isa.semantics import NUM_REGISTER_KEYS
from vpuc.shave.isa import INSTRUCTIONS

# The functional-unit slots of a bundle, each a key of ``ready`` after the registers.
SLOTS = ("iau", "sau", "vau", "cmu", "lsu0", "lsu1", "bru")
SLOT_KEYS = {name: NUM_REGISTER_KEYS + n for n, name in enumerate(SLOTS)}
NUM_TIMING_KEYS = NUM_REGISTER_KEYS + len(SLOTS)
LSU = (SLOT_KEYS["lsu0"], SLOT_KEYS["lsu1"])


@dataclass(frozen=True)
class Cost:
    issue: int            # cycles the slot stays busy (1: pipelined)
    latency: int          # cycles until the results are ready
    taken_penalty: int = 0
    slots: tuple[int, ...] = field(default=(SLOT_KEYS["iau"],))  # any one of these
    closes_bundle: bool = False   # control: the next instruction issues a cycle later


# Per functional unit (the ``unit`` column of the ISA table).  Issue/latency are
# assumptions in the spirit of a VLIW vector DSP, not measurements; the slot
# assignment follows the Myriad SHAVE (scalar integer on the IAU, scalar float on
# the SAU, vector float arithmetic on the VAU, compare/move/convert on the CMU,
# memory on either LSU, control on the BRU).
UNIT_COSTS: dict[str, tuple[int, int, int]] = {     # unit: (issue, latency, taken penalty)
    "salu": (1, 1, 0),
    "smul": (1, 3, 0),
    "sdiv": (8, 10, 0),
    "sfpu": (1, 3, 0),
    "sfdiv": (6, 8, 0),
    "sld": (1, 3, 0),
    "sst": (1, 1, 0),
    "branch": (1, 1, 2),
    "loop": (1, 1, 0),
    "ctl": (1, 1, 0),
    "vld": (1, 4, 0),
    "vst": (1, 1, 0),
    "vlds": (2, 6, 0),
    "vsts": (2, 1, 0),
    "valu": (1, 2, 0),
    "vfpu": (1, 3, 0),
    "vfma": (1, 4, 0),
    "vdiv": (4, 12, 0),
    "vsfu": (2, 10, 0),
    "vrcp": (1, 6, 0),
    "vred": (1, 5, 0),
    "vcvt": (1, 2, 0),
}

SLOT_OF_UNIT: dict[str, str] = {
    "salu": "iau", "smul": "iau", "sdiv": "iau",
    "sfpu": "sau", "sfdiv": "sau",
    "sld": "lsu", "sst": "lsu", "vld": "lsu", "vst": "lsu", "vlds": "lsu", "vsts": "lsu",
    "branch": "bru", "loop": "bru", "ctl": "bru",
    "valu": "cmu", "vcvt": "cmu",
    "vfpu": "vau", "vfma": "vau", "vdiv": "vau", "vsfu": "vau", "vrcp": "vau", "vred": "vau",
}
CONTROL_UNITS = frozenset({"branch", "loop", "ctl"})

# Exceptions to the unit cost or slot, by mnemonic.  Min/max and compares of
# floats are compare-and-move work: the CMU does them, beside the VAU.
OVERRIDES: dict[str, tuple[int, int, int]] = {
    "vredsum.f32": (1, 4, 0),
    "vredmax.f32": (1, 4, 0),
    "vredmin.f32": (1, 4, 0),
}
SLOT_OVERRIDES: dict[str, str] = {
    name: "cmu" for name in ("vmin.f16", "vmax.f16", "vmin.f32", "vmax.f32", "vcmpeq.f16",
                             "vcmplt.f16", "vcmple.f16", "vcmpeq.f32", "vcmplt.f32",
                             "vcmple.f32")}


def _slots(slot: str) -> tuple[int, ...]:
    return LSU if slot == "lsu" else (SLOT_KEYS[slot],)


def cost_of(mnemonic: str, unit: str) -> Cost:
    issue_, latency, penalty = OVERRIDES.get(mnemonic, UNIT_COSTS[unit])
    slot = SLOT_OVERRIDES.get(mnemonic, SLOT_OF_UNIT[unit])
    return Cost(issue_, latency, penalty, _slots(slot), unit in CONTROL_UNITS)


CYCLES: dict[int, Cost] = {ins.opcode: cost_of(ins.mnemonic, ins.unit) for ins in INSTRUCTIONS}


def new_ready() -> list[int]:
    """The timing state of a fresh run: every register and slot ready at cycle 0."""
    return [0] * NUM_TIMING_KEYS


def issue(ready: list[int], now: int, sources: tuple[int, ...], dests: tuple[int, ...],
          cost: Cost) -> tuple[int, int]:
    """Issue one instruction; returns (cycle the next one may issue, stall cycles)."""
    start = now
    for key in sources:
        if ready[key] > start:
            start = ready[key]
    operands = start
    slots = cost.slots
    slot = slots[0]
    # the second of a pair only when the first is busy at ``start`` and the second
    # frees earlier (past cycles never decide, so the choice is a function of the
    # state relative to ``now``, as the loop extrapolation needs)
    if len(slots) > 1 and ready[slot] > start and ready[slots[1]] < ready[slot]:
        slot = slots[1]
    free = ready[slot]
    if free > start:
        start = free
    ready[slot] = start + cost.issue
    done = start + cost.latency
    for key in dests:
        ready[key] = done
    # a stall: waiting for operands beyond the next bundle and the slot's own turn
    stall = operands - max(now + 1, free)
    return (start + 1 if cost.closes_bundle else start), (stall if stall > 0 else 0)


def issue_steps(steps, ready, now: int, written: dict) -> tuple[int, int]:
    """``issue`` over a run of instructions, its inputs unpacked per step as (sources,
    dests, slot, the pair's other slot or None, issue, latency, closes bundle, penalty
    after): ``ready`` updated and each written key's ready cycle put in ``written`` too;
    returns (cycle after, stall cycles).  The interpreter's loop has the same lines inline
    (it runs each instruction between two issues); loops and straight blocks call this."""
    stalls = 0
    for sources, dests, slot, other, busy, latency, closes, penalty in steps:
        start = now
        for key in sources:
            if ready[key] > start:
                start = ready[key]
        operands = start
        if other is not None and ready[slot] > start and ready[other] < ready[slot]:
            slot = other
        free = ready[slot]
        if free > start:
            start = free
        ready[slot] = written[slot] = start + busy
        done = start + latency
        for key in dests:
            ready[key] = written[key] = done
        stall = operands - (now + 1 if now + 1 > free else free)
        if stall > 0:
            stalls += stall
        now = (start + 1 if closes else start) + penalty
    return now, stalls


def finish(ready: list[int], now: int) -> int:
    """Total cycles of a run that stops at ``now``: outstanding results drain."""
    return max(now, max(ready))


def cycle_table_markdown() -> str:
    """The cycle table as the ISA document shows it."""
    rows = ["| unit | slot | issue | latency | taken penalty | instructions |",
            "|---|---|---|---|---|---|"]
    for unit, (iss, lat, pen) in UNIT_COSTS.items():
        names = [i.mnemonic for i in INSTRUCTIONS if i.unit == unit
                 and i.mnemonic not in OVERRIDES and i.mnemonic not in SLOT_OVERRIDES]
        rows.append(f"| {unit} | {SLOT_OF_UNIT[unit]} | {iss} | {lat} | {pen} | "
                    f"{', '.join(f'`{n}`' for n in names)} |")
    for ins in INSTRUCTIONS:
        if ins.mnemonic in OVERRIDES or ins.mnemonic in SLOT_OVERRIDES:
            c = CYCLES[ins.opcode]
            slot = SLOT_OVERRIDES.get(ins.mnemonic, SLOT_OF_UNIT[ins.unit])
            rows.append(f"| {ins.unit} (override) | {slot} | {c.issue} | {c.latency} | "
                        f"{c.taken_penalty} | `{ins.mnemonic}` |")
    return "\n".join(rows) + "\n"
