"""Verifier rules for memory: placed buffers do not overlap while live; no data races.

Overlaps: CMX is checked per tile, and the DDR scratch area (``ddr`` buffers
with an offset) as one memory.  Buffers without an offset are left to
allocate-cmx.  Races: two units touching one byte of a buffer (or of views of
it), one writing, must be ordered by barriers (``vpuc.analysis.races``).
"""

from __future__ import annotations

from vpuc.analysis.liveness import overlap_conflicts, users_by_root
from vpuc.analysis.races import Access, find_races, metadata_bytes
from vpuc.analysis.schedule import Schedule
from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable, buffer_footprint


def placed_memories(module: Module, users: dict[str, list[int]]) -> dict[tuple, list]:
    memories: dict[tuple, list] = {}
    for buffer in module.buffers:
        if buffer.offset is None:
            continue
        if buffer.kind is BufferKind.CMX:
            key = ("CMX of tile", buffer.tile)
        elif buffer.kind is BufferKind.DDR:
            key = ("DDR scratch", None)
        else:
            continue
        memories.setdefault(key, []).append(
            (buffer, buffer.offset, buffer.offset + buffer_footprint(buffer),
             users.get(buffer.name, [])))
    return memories


def check_overlaps(module: Module, schedule: Schedule, symbols: SymbolTable,
                   bag: DiagnosticBag) -> None:
    users = users_by_root(schedule, symbols)
    for (memory, tile), placed in placed_memories(module, users).items():
        where = memory if tile is None else f"{memory} {tile}"
        for conflict in overlap_conflicts(schedule, placed):
            a, b = conflict.earlier, conflict.later
            bag.error(b.loc, f"%{b.name} and %{a.name} share bytes {conflict.lo}..{conflict.hi} "
                      f"of the {where} while both may be live; expected a barrier ordering "
                      f"every use of %{a.name} before any use of %{b.name}",
                      ((a.loc, f"%{a.name} is declared here"),))


RACES_SHOWN = 10  # races reported one by one before the rest are only counted


def check_races(schedule: Schedule, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    """Two units touching one byte of a buffer, one writing, with no barrier path between."""
    races = find_races(schedule, symbols)
    for race in races[:RACES_SHOWN]:
        first, second = race.first, race.second
        root = first.footprint.root
        where = f"bytes {race.lo}..{race.hi}"
        meta = metadata_bytes(root)
        if meta is not None and race.hi > meta[0]:
            where = (f"bytes {race.lo}..{min(race.hi, meta[0])} and its shape metadata "
                     f"(bytes {meta[0]}..{meta[1]}: the dims the producer writes at run time)")
        bag.error(schedule.units[second.unit].loc,
                  f"race on {root.kind} %{root.name}, {where}: {_who(schedule, first)} and "
                  f"{_who(schedule, second)}, and no barrier orders the two tasks; expected "
                  "one of them to update a barrier that the other waits on (directly or "
                  "through other tasks)",
                  ((schedule.units[first.unit].loc, f"{schedule.units[first.unit].name} is here"),))
    if len(races) > RACES_SHOWN:
        bag.error(schedule.units[races[RACES_SHOWN].second.unit].loc,
                  f"{len(races) - RACES_SHOWN} more races not shown")


def _who(schedule: Schedule, access: Access) -> str:
    unit = schedule.units[access.unit]
    verb = "writes" if access.write else "reads"
    return f"{unit.name} ({schedule.queues[unit.queue]}) {verb} %{access.operand}"
