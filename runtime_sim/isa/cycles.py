"""The SHAVE cycle table and the in-order timing model, apart from the semantics.

Model (deterministic, data-independent except for taken branches):

* one instruction issues per cycle at most, in program order;
* an instruction issues at ``max(now, ready[r] for every register r it reads)``
  -- the difference is a stall;
* each register it writes becomes ready ``latency`` cycles after issue;
* the next instruction may issue ``issue`` cycles after this one (an issue cost
  above 1 models a non-pipelined unit: divides, transcendentals, strided access);
* a taken branch, jump, call or ret adds ``taken_penalty`` cycles (refetch);
  ``loop`` is zero-overhead: its taken penalty is 0;
* memory has no dependency tracking: a load sees every earlier store;
* the run ends when ``halt`` (or ``ret`` to the exit address) issues and every
  outstanding result is ready: ``cycles = max(now, max(ready))``.

``ready`` is indexed by register key (``semantics.register_key``: s0..s31 =
0..31, v0..v31 = 32..63, m0..m7 = 64..71).  The fast path reuses ``issue`` and
``finish`` to get the same count.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.shave.isa import INSTRUCTIONS


@dataclass(frozen=True)
class Cost:
    issue: int            # cycles until the next instruction may issue
    latency: int          # cycles until the results are ready
    taken_penalty: int = 0


# Per functional unit (the ``unit`` column of the ISA table).  Assumptions in the
# spirit of a VLIW vector DSP, not measurements.
UNIT_COSTS: dict[str, Cost] = {
    "salu": Cost(1, 1),
    "smul": Cost(1, 3),
    "sdiv": Cost(8, 10),
    "sfpu": Cost(1, 3),
    "sfdiv": Cost(6, 8),
    "sld": Cost(1, 3),
    "sst": Cost(1, 1),
    "branch": Cost(1, 1, taken_penalty=2),
    "loop": Cost(1, 1, taken_penalty=0),
    "ctl": Cost(1, 1),
    "vld": Cost(1, 4),
    "vst": Cost(1, 1),
    "vlds": Cost(2, 6),
    "vsts": Cost(2, 1),
    "valu": Cost(1, 2),
    "vfpu": Cost(1, 3),
    "vfma": Cost(1, 4),
    "vdiv": Cost(4, 12),
    "vsfu": Cost(2, 10),
    "vrcp": Cost(1, 6),
    "vred": Cost(1, 5),
    "vcvt": Cost(1, 2),
}

# Exceptions to the unit cost, by mnemonic.
OVERRIDES: dict[str, Cost] = {
    "vredsum.f32": Cost(1, 4),
    "vredmax.f32": Cost(1, 4),
    "vredmin.f32": Cost(1, 4),
}

CYCLES: dict[int, Cost] = {ins.opcode: OVERRIDES.get(ins.mnemonic, UNIT_COSTS[ins.unit])
                           for ins in INSTRUCTIONS}


def issue(ready: list[int], now: int, sources: tuple[int, ...], dests: tuple[int, ...],
          cost: Cost) -> tuple[int, int]:
    """Issue one instruction; returns (cycle the next one may issue, stall cycles)."""
    start = now
    for key in sources:
        if ready[key] > start:
            start = ready[key]
    done = start + cost.latency
    for key in dests:
        ready[key] = done
    return start + cost.issue, start - now


def finish(ready: list[int], now: int) -> int:
    """Total cycles of a run that stops at ``now``: outstanding results drain."""
    return max(now, max(ready))


def cycle_table_markdown() -> str:
    """The cycle table as the ISA document shows it."""
    rows = ["| unit | issue | latency | taken penalty | instructions |",
            "|---|---|---|---|---|"]
    for unit, cost in UNIT_COSTS.items():
        names = [i.mnemonic for i in INSTRUCTIONS if i.unit == unit and i.mnemonic not in OVERRIDES]
        rows.append(f"| {unit} | {cost.issue} | {cost.latency} | {cost.taken_penalty} | "
                    f"{', '.join(f'`{n}`' for n in names)} |")
    for name, cost in OVERRIDES.items():
        rows.append(f"| (override) | {cost.issue} | {cost.latency} | {cost.taken_penalty} | "
                    f"`{name}` |")
    return "\n".join(rows) + "\n"
