"""The library kernels' cycles slices, worked out when the library is built, read back by runs.

A cold timing-only run analyses each kernel it meets (``cycles_slice.analyse``:
the dataflow over every instruction).  A library kernel is 900 to 1,400
instructions (the shared driver, its rows, its error paths), and its analysis
with the per-word work it starts was ~8 ms of the ViT encoder's 77 ms cold
timing-only run (mvn and softmax).  The library changes only when it is
rebuilt, so ``vpuc kernels build`` works the slices out then, as it assembles
the objects, and writes one file per kernel into ``slices/`` beside the
``NAME.o`` files: the kernel's ``.text`` as ``load_kernel`` links it for the
default architecture's windows, and the slice's roles, reason and critical
registers (``Slice``).

``recorded_slice`` gives a ``Program`` the recorded slice only when its code is
that text byte for byte (a file is found by the text's sha256, the text inside
compared in full: a digest never decides alone) and the file was written by
the same analysis: the digest of the sources the slice depends on
(``ANALYSIS_SOURCES``) and of the instruction table and opcode kinds it reads is
in the file, so a changed analysis or ISA never reads a stale one.  Anything
else (a generated kernel, another architecture's windows, a kernel edited since
the build, an unreadable file) is analysed as before, so the recorded slice
only ever saves time: the tests compare every library kernel's recorded slice
with a fresh analysis.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from runtime_sim.isa.cycles_slice import Role, Slice, _role, analyse, load_bit
from runtime_sim.isa.kernel_loader import _link
from runtime_sim.isa.semantics import operand_access
from vpuc.arch import Arch, load_arch
from vpuc.fileio import write_atomically
from vpuc.shave import encoding
from vpuc.shave.kobject import KernelObject, rodata_address

SLICES_FOLDER = "slices"
_ISA = Path(__file__).resolve().parent
# What a slice depends on besides the code: the analysis and its reading of words (the
# sources below), and the tables it reads: every instruction's format and operands, and
# the kind (op, load, store, branch...) the semantics give its opcode (``_tables``).
ANALYSIS_SOURCES = (_ISA / "cycles_slice.py", _ISA / "cycles_slice_flow.py",
                    _ISA / "register_access.py", _ISA / "library_slices.py",
                    Path(encoding.__file__).resolve())


def _tables() -> bytes:
    from runtime_sim.isa.semantics import SEMANTICS
    from vpuc.shave.isa import FORMAT_OPERANDS, INSTRUCTIONS
    rows = [(ins.opcode, ins.mnemonic, ins.format, ins.imm_range, SEMANTICS[ins.opcode].kind)
            for ins in INSTRUCTIONS]
    formats = [(name, [(op.kind, op.field, op.uses_imm) for op in operands])
               for name, operands in sorted(FORMAT_OPERANDS.items())]
    return repr((rows, formats)).encode()


@lru_cache(maxsize=1)
def analysis_digest() -> str:
    """sha256 of ``ANALYSIS_SOURCES`` and the tables the analysis reads, once per process."""
    digest = hashlib.sha256(_tables())
    for path in ANALYSIS_SOURCES:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def linked(obj: KernelObject, arch: Arch):
    """``obj`` linked as ``interpreter.load_kernel`` links it into ``arch``'s windows: its
    .text and ``Program``."""
    text_addr = arch.window_base("WIN_D")
    data_addr = arch.window_base("WIN_E") if obj.data else 0
    found = _link(obj, text_addr, rodata_address(obj, text_addr), data_addr)
    return found.text, found.program


def slice_file(folder: Path, text: bytes) -> Path:
    return folder / SLICES_FOLDER / f"{hashlib.sha256(text).hexdigest()}.json"


def write_slices(folder: Path, objects: list[KernelObject], arch: Arch | None = None) -> None:
    """The slice of each of ``objects``, linked for ``arch`` (default: the default
    architecture), into ``folder/slices/``; files of an earlier build are removed."""
    arch = arch or load_arch()
    out = folder / SLICES_FOLDER
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    for obj in objects:
        text, program = linked(obj, arch)
        found = analyse(program.decoded)
        record = {"analysis": analysis_digest(), "kernel": obj.name, "text": text.hex(),
                  "reason": found.reason, "critical_at": list(found.critical_at)}
        if found.roles is not None:
            record.update(_roles_record(found.roles))
        # readers (a simulation running meanwhile) see the old file or the new one
        write_atomically(slice_file(folder, text), json.dumps(record, separators=(",", ":")))


# A role as a letter of ``kinds`` (skip, checked load, vector store: most instructions are
# one of these few), the load bits apart: reading 1,400 roles back one by one cost as much
# as the analysis saved.
_KIND_ROLES = {chr(97 + k): _role(bool(k & 1), bool(k & 2), 0, 0, bool(k & 4)) for k in range(8)}


def _roles_record(roles: tuple[Role, ...]) -> dict:
    kinds, watched, sources = [], [], {}
    for i, role in enumerate(roles):
        kinds.append(chr(97 + (role.skip | role.checked_load << 1 | role.vector_store << 2)))
        if role.watched_load:
            if role.watched_load != load_bit(i):
                raise ValueError(f"instruction {i}: a watched load's bit is not its own")
            watched.append(i)
        if role.store_sources:
            sources[str(i)] = format(role.store_sources, "x")
    return {"kinds": "".join(kinds), "watched": watched, "sources": sources}


def _roles(record: dict) -> tuple[Role, ...]:
    """``_roles_record`` read back (raises KeyError, TypeError or ValueError if malformed)."""
    roles = [_KIND_ROLES[c] for c in record["kinds"]]
    sources = {int(i): int(bits, 16) for i, bits in record["sources"].items()}
    watched = set(record["watched"])
    for i in watched | sources.keys():
        if not (isinstance(i, int) and 0 <= i < len(roles)):
            raise ValueError(f"no instruction {i}")
        role = roles[i]
        roles[i] = Role(role.skip, role.checked_load, load_bit(i) if i in watched else 0,
                        sources.get(i, 0), role.vector_store)
    return tuple(roles)


def _default_folder() -> Path:
    from vpuc.kernel_library import DEFAULT_BUILD_DIR     # a path: nothing assembled
    return DEFAULT_BUILD_DIR


def recorded_slice(program, folder: Path | None = None) -> Slice | None:
    """The slice recorded for ``program``'s code (a ``Program`` linked from its bytes), or
    None when there is none that certainly belongs to it (see the module docstring)."""
    code = getattr(program, "code", None)
    if code is None:
        return None
    folder = _default_folder() if folder is None else folder
    try:
        path = slice_file(folder, code)
        if not os.path.exists(path):
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["analysis"] != analysis_digest() or bytes.fromhex(record["text"]) != code:
            return None
        decoded = program.decoded
        critical_at = tuple(record["critical_at"])
        reason = record["reason"]
        roles = None if reason else _roles(record)
        if not isinstance(reason, str) or len(critical_at) != (0 if reason else len(decoded)) \
                or (roles is not None and len(roles) != len(decoded)):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None             # unreadable or not ours: analysed afresh
    # the same accesses as ``analyse``'s; its code key (kernels equal but for immediates)
    # is the exact text here, which no analysed kernel's key equals
    return Slice(roles, reason, critical_at, tuple(map(operand_access, decoded)),
                 ("recorded", code))


