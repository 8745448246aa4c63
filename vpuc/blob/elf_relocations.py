"""The ELF container's relocations read and checked a column at a time.

A blob of 100k tasks carries one ``R_VPUC_32`` relocation per tensor address
and two per ACT SHAVE invocation.  ``vpuc.shave.elf_layout`` reads them one
entry at a time and ``ElfReader.check_relocations`` applies them one at a
time; here the same rules run on numpy columns:

* ``relocation_columns``: every relocation section's entries as one structured
  array (``Elf32_Rel``/``Elf32_Rela`` from the layout tables), with the
  reader's checks (whole entries, the symbol table as ``sh_link``, a section as
  ``sh_info``, symbol indices in range, the patched word inside its section);
* ``relocations_hold``: each relocation is ``R_VPUC_32`` against a symbol
  (a window symbol when undefined), patches a zero word, and its result
  ``S + A`` is, for every (section, offset), exactly the address the records
  imply: a CMX tensor's ``WIN_F + offset``, a DDR tensor's storage symbol plus
  its offset, a kernel's code and entry, an invocation's parameters and
  arguments.

Either returns None/False on any doubt; the reader then reads the entries one
by one and checks them row by row, whose message names the first bad one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.blob import elf_records as R
from vpuc.blob.elf_columns import record_dtype
from vpuc.shave import elf_layout as elf

_MASK = 0xFFFFFFFF


@dataclass
class RelocColumns:
    section: np.ndarray          # index of the patched section
    offset: np.ndarray
    type: np.ndarray
    symbol: np.ndarray           # symbol table index (0: none)
    addend: np.ndarray


def relocation_columns(image: elf.ElfFile) -> RelocColumns | None:
    """Every relocation entry of ``image`` as columns; None when one of the reader's
    structural checks would fail (``elf_layout.read_relocations`` says which)."""
    symtab = next((s for s in image.sections if s.header.sh_type == elf.SHT_SYMTAB), None)
    parts = []
    for sec in image.sections:
        sh = sec.header
        if sh.sh_type not in (elf.SHT_RELA, elf.SHT_REL):
            continue
        entry = elf.Elf32_Rela if sh.sh_type == elf.SHT_RELA else elf.Elf32_Rel
        if sh.sh_entsize != entry.size or sh.sh_size % entry.size or len(sec.data) != \
                sh.sh_size or symtab is None or sh.sh_link != symtab.index or \
                not 0 < sh.sh_info < len(image.sections):
            return None
        rows = np.frombuffer(sec.data, dtype=record_dtype(entry))
        symbol = rows["r_info"].astype(np.int64) >> 8
        offset = rows["r_offset"].astype(np.int64)
        if (symbol >= len(image.symbols)).any() or \
                (offset + 4 > image.sections[sh.sh_info].header.sh_size).any():
            return None
        addend = rows["r_addend"].astype(np.int64) if "r_addend" in rows.dtype.names else \
            np.zeros(len(rows), np.int64)
        parts.append((np.full(len(rows), sh.sh_info, np.int64), offset,
                      rows["r_info"].astype(np.int64) & 0xFF, symbol, addend))
    if not parts:
        return RelocColumns(*(np.zeros(0, np.int64) for _ in range(5)))
    return RelocColumns(*(np.concatenate(column) for column in zip(*parts)))


def relocations_hold(reader, relocs: RelocColumns, content) -> bool:
    """Whether every relocation is good and together they patch exactly the addresses the
    records imply (``ElfReader.check_relocations``' rules); False on any doubt."""
    arch = content.header.arch
    image = reader.elf
    index_of = {s.name: s.index for s in image.sections}
    if len(index_of) != len(image.sections):
        return False            # sections of one name: the row-wise check keys by name
    windows = {R.WINDOW_SYMBOLS["WIN_D"]: arch.win_d_base,
               R.WINDOW_SYMBOLS["WIN_E"]: arch.win_e_base,
               R.WINDOW_SYMBOLS["WIN_F"]: arch.win_f_base}
    value_of = np.zeros(len(image.symbols), np.int64)
    usable = np.zeros(len(image.symbols), bool)
    for sym in image.symbols[1:]:
        if sym.shndx == elf.SHN_UNDEF:
            if sym.name in windows:
                value_of[sym.index], usable[sym.index] = windows[sym.name], True
        else:
            value_of[sym.index], usable[sym.index] = sym.value, True
    if len(relocs.type) and ((relocs.type != R.VpucRelocType.R_VPUC_32) |
                             (relocs.symbol == 0) | ~usable[relocs.symbol]).any():
        return False
    for target in np.unique(relocs.section).tolist():
        at = relocs.offset[relocs.section == target]
        data = np.frombuffer(image.sections[target].data, np.uint8)
        if len(data) < image.sections[target].header.sh_size or \
                data[at[:, None] + np.arange(4)].any():
            return False
    patched = _keyed(relocs.section, relocs.offset,
                     (value_of[relocs.symbol] + relocs.addend) & _MASK)
    expected = _expected(reader, content, arch, index_of)
    return patched is not None and expected is not None and \
        all(np.array_equal(a, b) for a, b in zip(patched, expected))


def _keyed(section, offset, value):
    """(key, value) sorted by key = section << 32 | offset; None if a key repeats."""
    key = (np.asarray(section, np.int64) << 32) | np.asarray(offset, np.int64)
    order = np.argsort(key, kind="stable")
    key, value = key[order], np.asarray(value, np.int64)[order]
    if len(key) > 1 and (key[1:] == key[:-1]).any():
        return None
    return key, value


def _expected(reader, content, arch, index_of: dict):
    """The (section, offset) -> address the records imply, keyed as ``_keyed``."""
    from vpuc.blob.reader_elf import _CMX, _STORAGE
    from vpuc.blob.content import LOCATION_CODE
    from vpuc.ir.module import BufferKind

    symbols = {s.name: s for s in reader.elf.symbols[1:]}
    tensors = content.tensors
    n = len(tensors)
    sections, offsets, values = [], [], []
    if n:
        table = reader.columns.tensor_table      # the records' columns (``ElfColumns.tensors``)
        base = table["base"].astype(np.int64)
        root = np.where((base >= 0) & (base < n), base, np.arange(n))
        for _ in range(64):
            step = root[root]
            if (step == root).all():
                break
            root = step
        else:
            return None
        stride = reader.by_name[R.TENSORS].header.sh_entsize
        has_data = {c.tensor for c in content.constants}
        roots = np.unique(root)
        address = np.zeros(len(roots), np.int64)     # each root's base address
        patched = np.zeros(len(roots), bool)         # False: the root has no relocation
        for j, r in enumerate(roots.tolist()):
            rt = tensors[r]
            if rt.location == _CMX and rt.offset >= 0:
                address[j], patched[j] = arch.win_f_base + rt.offset, True
            elif rt.location in _STORAGE and (rt.location != LOCATION_CODE[BufferKind.CONST]
                                              or r in has_data):
                sym = symbols.get(rt.name)
                if sym is None or sym.section != _STORAGE[rt.location]:
                    return None
                address[j], patched[j] = sym.value, True
        of_root = np.searchsorted(roots, root)
        rows = np.flatnonzero(patched[of_root])
        # The low 32 bits of address + data_offset (a u64 wraps alike in int64).
        data_offset = table["data_offset"][rows].astype(np.int64)
        sections.append(np.full(len(rows), index_of[R.TENSORS], np.int64))
        offsets.append(rows.astype(np.int64) * stride + R.TensorRecord.offsets["address"])
        values.append((address[of_root[rows]] + data_offset) & _MASK)
    rec = R.ActKernelRangeRecord
    stride = reader.by_name[R.ACT_RANGES].header.sh_entsize
    for i, k in enumerate(content.kernels):
        if k.image is not None:
            sym = symbols.get(R.KERNEL_SYMBOL_PREFIX + k.name)
            if sym is None:
                return None
            sections.append(np.full(2, index_of[R.ACT_RANGES], np.int64))
            offsets.append(np.array([i * stride + rec.offsets["code_addr"],
                                     i * stride + rec.offsets["entry_addr"]], np.int64))
            values.append(np.array([sym.value, (arch.win_d_base + k.image.entry) & _MASK],
                                   np.int64))
    rec, params = R.ActKernelInvocationRecord, symbols.get("vpuc.kernel_params")
    for r in reader.records(R.MAPPED_INFERENCE):
        sec = reader.elf.sections[r.section]
        if r.executor != 2:
            continue
        table = reader.columns.table(sec, rec)
        rows = np.flatnonzero(table["has_image"])
        if len(rows) and params is None:
            return None
        at = rows.astype(np.int64) * sec.header.sh_entsize
        sections.append(np.full(2 * len(rows), sec.index, np.int64))
        offsets.append(np.concatenate([at + rec.offsets["data_addr"],
                                       at + rec.offsets["args_addr"]]))
        values.append(np.concatenate([
            params.value + table["image_offset"][rows].astype(np.int64) if len(rows) else
            np.zeros(0, np.int64),
            (arch.win_e_base + table["args_offset"][rows].astype(np.int64)) & _MASK]))
    if not sections:
        return _keyed([], [], [])
    return _keyed(np.concatenate(sections), np.concatenate(offsets), np.concatenate(values))
