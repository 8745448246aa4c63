"""Verifier rule: no two placed buffers share bytes while both may be live.

CMX is checked per tile, and the DDR scratch area (``ddr`` buffers with an
offset) as one memory.  Buffers without an offset are left to allocate-cmx.
"""

from __future__ import annotations

from vpuc.analysis.liveness import overlap_conflicts, users_by_root
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
