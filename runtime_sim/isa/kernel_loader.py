"""Loading a kernel object into an invocation's windows (``interpreter.load_kernel``).

``load_kernel`` links the object at the windows' addresses and copies its sections in;
a link (sections, symbols, entry offsets, the decoded ``Program``) is pure, so it is
remembered per object and addresses while the object holds what it was linked from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from runtime_sim.isa.memory import WindowMemory
from runtime_sim.isa.program import Program
from vpuc.diagnostics import VpucError
from vpuc.shave.kobject import KernelObject, link_kernel, rodata_address


@dataclass
class LoadedKernel:
    obj: KernelObject
    program: Program
    text_addr: int
    rodata_addr: int
    data_addr: int
    symbols: dict[str, int] = field(default_factory=dict)   # name -> absolute address
    entries: dict = field(default_factory=dict)    # the link's: name -> entry offset
    data_image: bytes = b""                         # the linked .data

    def entry(self, name: str | None = None) -> int:
        """Byte offset in .text of the named entry point, or of the only one (remembered
        with the link: finding it scans the object's symbols)."""
        offset = self.entries.get(name)
        if offset is None:
            offset = self.entries[name] = self.obj.entry_offset(name)
        return offset


def load_kernel(obj: KernelObject, memory: WindowMemory, *, text_addr: int | None = None,
                data_addr: int | None = None) -> LoadedKernel:
    """Link ``obj`` and copy it into the windows: .text then .rodata in WIN_D,
    .data in WIN_E (default: the start of each window)."""
    text_addr = memory.base("WIN_D") if text_addr is None else text_addr
    rodata_addr = rodata_address(obj, text_addr)
    if data_addr is None:
        data_addr = memory.base("WIN_E") if obj.data else 0
    key = (id(obj), text_addr, rodata_addr, data_addr)
    linked = _LINKED.get(key)
    if linked is None or not linked.holds(obj):
        linked = _link(obj, text_addr, rodata_addr, data_addr)
        if len(_LINKED) >= MAX_CACHED_LINKS:
            _LINKED.clear()
        _LINKED[key] = linked
    _copy_in(memory, "WIN_D", text_addr, linked.text, obj.name, ".text")
    _copy_in(memory, "WIN_D", rodata_addr, linked.rodata, obj.name, ".rodata")
    if linked.data:
        _copy_in(memory, "WIN_E", data_addr, linked.data, obj.name, ".data")
    return LoadedKernel(obj, linked.program, text_addr, rodata_addr, data_addr,
                        dict(linked.symbols), linked.entries, linked.data)


def load_data(loaded: LoadedKernel, memory: WindowMemory) -> None:
    """``loaded``'s .data copied into another invocation's WIN_E at the same address
    (its WIN_D shared with the invocation ``loaded`` was loaded for)."""
    if loaded.data_image:
        _copy_in(memory, "WIN_E", loaded.data_addr, loaded.data_image, loaded.obj.name,
                 ".data")


class _Linked:
    """An object linked at given addresses: its sections, symbols and Program.  Linking is
    pure, so a kernel loaded again at the same addresses (every invocation of a task's
    kernel) reuses them while the object still holds what they were linked from (a
    KernelObject is a plain dataclass: it could be changed in place)."""

    __slots__ = ("obj", "parts", "text", "rodata", "data", "symbols", "program", "entries")

    def holds(self, obj: KernelObject) -> bool:
        return self.obj is obj and self.parts == _parts(obj)


def _parts(obj: KernelObject) -> tuple:
    """What linking reads of ``obj`` (compared by identity first: cheap when unchanged)."""
    return (tuple(obj.sections.items()), tuple(obj.symbols), tuple(obj.relocations),
            tuple(obj.alignments.items()))


def _link(obj: KernelObject, text_addr: int, rodata_addr: int, data_addr: int) -> _Linked:
    linked = _Linked()
    linked.obj, linked.parts, linked.entries = obj, _parts(obj), {}
    linked.text, linked.rodata, linked.data = link_kernel(obj, text_addr, rodata_addr, data_addr)
    bases = {".text": text_addr, ".rodata": rodata_addr, ".data": data_addr}
    linked.symbols = {s.name: bases[s.section] + s.value for s in obj.symbols}
    labels: dict[int, str] = {}
    for sym in obj.symbols:
        if sym.section == ".text":
            labels.setdefault(sym.value, sym.name)
    linked.program = _program(linked.text, text_addr, obj.name, labels)
    return linked


# By (id(object), addresses); an entry holds its object, so no id is reused while it lives.
_LINKED: dict[tuple, _Linked] = {}
MAX_CACHED_LINKS = 256


# Decoding is pure and a Program is never changed by running it, so a kernel loaded
# again at the same address (every invoke_kernel) reuses its decoded Program.
_PROGRAMS: dict[tuple, Program] = {}
MAX_CACHED_PROGRAMS = 256


def _program(text: bytes, base: int, name: str, labels: dict[int, str]) -> Program:
    key = (bytes(text), base, name, tuple(sorted(labels.items())))
    program = _PROGRAMS.get(key)
    if program is None:
        if len(_PROGRAMS) >= MAX_CACHED_PROGRAMS:
            _PROGRAMS.clear()
        program = _PROGRAMS[key] = Program(text, base, name, labels)
    return program


def _copy_in(memory: WindowMemory, window: str, address: int, data: bytes, name: str,
             section: str) -> None:
    array, base = memory.array(window), memory.base(window)
    offset = address - base
    if offset < 0 or offset + len(data) > len(array):
        raise VpucError(f"{name}: {section} ({len(data)} bytes at {address:#010x}) does not fit "
                        f"in the {window} mapping ({base:#010x}..{base + len(array) - 1:#010x})")
    array[offset:offset + len(data)] = np.frombuffer(data, np.uint8)
