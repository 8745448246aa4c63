"""ELF container -> BlobContent.

``read_elf32`` checks the ELF structure (headers, section bounds, symbol and
relocation tables).  This module checks the container on top of it: every
section it needs is there with its type, record sections are whole numbers of
records, every (start, count) list lies inside its pool, every string offset
inside ``.vpuc.strtab``, every data slice inside its section.  It then applies
the relocations, as a loader would, with the window symbols bound to the
architecture's window bases and every other section placed at address 0, and
checks that each relocated address is the one the records imply.
"""

from __future__ import annotations

import struct

from vpuc.blob import elf_records as R
from vpuc.blob import elf_tasks
from vpuc.blob.elf_relocations import relocation_columns, relocations_hold
from vpuc.blob.layer_sources import decode_elf as decode_layers
from vpuc.blob.content import (LOCATION_CODE, ArchRec, BlobContent, ConstantRec,
                               ConstInitRec, DpuRec, HeaderRec, KernelImageRec, KernelRec,
                               KeyValue, Number, ParamRec, RuntimeRec, SliceRec, TaskCounts,
                               TaskListRec, TensorRec)
from vpuc.blob.elf_columns import ElfColumns
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.ir.module import BufferKind
from vpuc.shave import elf_layout as elf

_TASK_TYPES = {0: R.VpucShType.SHT_VPUC_DMA_TASKS, 1: R.VpucShType.SHT_VPUC_DPU_INVARIANTS,
               2: R.VpucShType.SHT_VPUC_ACT_KERNEL_INVOCATIONS}
_STORAGE = {LOCATION_CODE[BufferKind.INPUT]: R.NETWORK_INPUTS,
            LOCATION_CODE[BufferKind.OUTPUT]: R.NETWORK_OUTPUTS,
            LOCATION_CODE[BufferKind.DDR]: R.DDR_SCRATCH,
            LOCATION_CODE[BufferKind.CONST]: R.CONSTANT_DATA}
_CMX = LOCATION_CODE[BufferKind.CMX]


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


_UNREAD = object()     # ElfReader.string: an offset not read yet


class ElfReader:
    def __init__(self, data: bytes, file: str) -> None:
        self.file = file
        self.elf = elf.read_elf32(data, file, machine=R.EM_VPUC_NPU, relocations=False)
        # Relocations as columns; on a doubt read entry by entry, for the entry's message.
        self.relocs = relocation_columns(self.elf)
        if self.relocs is None:
            self.elf.relocations = elf.read_relocations(self.elf, file)
        if self.elf.header.e_type != elf.ET_REL:
            raise VpucError(f"e_type is {self.elf.header.e_type}, expected ET_REL (1)",
                            BinLoc(file, "ELF header", 16))
        self.by_name: dict[str, elf.ElfSection] = {}
        for sec in self.elf.sections[1:]:
            if sec.name in self.by_name:
                raise self.fail(sec.name, "section name appears twice")
            self.by_name[sec.name] = sec
        self._strings: dict[int, str | None] = {R.STR_NONE: None}

    def fail(self, section: str, message: str, offset: int = 0) -> VpucError:
        return VpucError(message, BinLoc(self.file, section, offset))

    def section(self, name: str, sh_type: int) -> elf.ElfSection:
        sec = self.by_name.get(name)
        if sec is None:
            raise self.fail("section headers", f"blob has no {name} section")
        if sec.header.sh_type != sh_type:
            raise self.fail(name, f"sh_type is {sec.header.sh_type:#x}, expected {sh_type:#x}")
        return sec

    def records(self, name: str) -> list:
        sh_type, record = R.RECORD_SECTIONS[name]
        return self.unpack(self.section(name, sh_type), record)

    def unpack(self, sec: elf.ElfSection, record) -> list:
        """A record section's records, read with the blob's own record size
        (``sh_entsize``): an older blob's shorter records get zero for the
        fields added since (docs/blob-format.md, "Versioning")."""
        size, data = sec.header.sh_entsize, sec.data
        if size == record.size:
            return record.unpack_all(data, self.file, sec.name)
        if not 0 < size <= record.size or len(data) % size:
            raise self.fail(sec.name, f"record size {size} does not fit {record.name} "
                            f"({record.size} bytes) or the section ({len(data)} bytes)")
        pad = bytes(record.size - size)
        return record.unpack_all(b"".join(data[i:i + size] + pad
                                          for i in range(0, len(data), size)),
                                 self.file, sec.name)

    def version(self) -> tuple[int, int]:
        data = self.section(R.NOTE, elf.SHT_NOTE).data
        head = R.Elf32_Nhdr.unpack_from(data, 0, self.file, R.NOTE)
        name_end = 12 + head.n_namesz
        desc_at = 12 + (head.n_namesz + 3) // 4 * 4
        if desc_at + (head.n_descsz + 3) // 4 * 4 > len(data):
            raise self.fail(R.NOTE, f"note ({head.n_namesz}-byte name, {head.n_descsz}-byte "
                            f"descriptor) runs past the end of the section ({len(data)} bytes)")
        if data[12:name_end] != R.NOTE_NAME + b"\0" or \
                head.n_type != R.VpucNoteType.NT_VPUC_VERSION or head.n_descsz < 4:
            raise self.fail(R.NOTE, "the note is not a VPUC version note")
        note = R.VersionNote.unpack_from(data, desc_at, self.file, R.NOTE)
        return note.major, note.minor

    # --- strings and pools ----------------------------------------------------------

    def string(self, offset: int) -> str | None:
        text = self._strings.get(offset, _UNREAD)
        if text is not _UNREAD:
            return text
        table = self._strtab
        end = table.find(b"\0", offset)
        if offset >= len(table) or end < 0:
            raise self.fail(R.STRTAB, f"string offset {offset:#x} is outside the string table",
                            offset)
        try:
            text = self._strings[offset] = table[offset:end].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(R.STRTAB, "string is not valid UTF-8", offset) from None
        return text

    def _list(self, pool: tuple, name: str, start: int, count: int, none_ok: bool = False):
        if start == R.LIST_NONE and count == 0 and none_ok:
            return None
        if start + count > len(pool):
            raise self.fail(name, f"list of {count} at {start} runs past the pool "
                            f"({len(pool)} entries)", start)
        return pool[start:start + count]

    def u32(self, start: int, count: int, none_ok: bool = False):
        # The common case inline (a task has about five lists); _list has the rest.
        if start + count <= self._u32_len and start != R.LIST_NONE:
            return self._u32[start:start + count]
        return self._list(self._u32, R.POOL32, start, count, none_ok)

    def i64(self, start: int, count: int, none_ok: bool = False):
        if start + count <= self._i64_len and start != R.LIST_NONE:
            return self._i64[start:start + count]
        return self._list(self._i64, R.POOL64, start, count, none_ok)

    def blob(self, name: str, offset: int, size: int) -> bytes:
        data = self._data[name]
        if offset + size > len(data):
            raise self.fail(name, f"{size} bytes at {offset:#x} run past the section "
                            f"({len(data)} bytes)", offset)
        return data[offset:offset + size]

    def number(self, is_int: int, word: int, where: str) -> Number:
        if is_int not in (0, 1):
            raise self.fail(where, f"number flag {is_int} is not 0 or 1")
        return Number(1, word) if is_int else Number(0, _float(word))

    # --- content --------------------------------------------------------------------

    def content(self) -> tuple[BlobContent, bytes]:
        self._strtab = self.section(R.STRTAB, elf.SHT_STRTAB).data
        pools = []
        for name, code in ((R.POOL32, "I"), (R.POOL64, "q")):
            data = self.section(name, R.VpucShType.SHT_VPUC_POOL).data
            width = struct.calcsize(code)
            if len(data) % width:
                raise self.fail(name, f"pool is {len(data)} bytes, not whole {width}-byte words")
            pools.append(struct.unpack(f"<{len(data) // width}{code}", data))
        self._u32, self._i64 = pools
        self._u32_len, self._i64_len = len(self._u32), len(self._i64)
        self._data = {name: self.section(name, sh_type).data for name, sh_type in (
            (R.KERNEL_CODE, elf.SHT_PROGBITS), (R.KERNEL_DATA, elf.SHT_PROGBITS),
            (R.KERNEL_OBJECTS, R.VpucShType.SHT_VPUC_KERNEL_OBJECTS),
            (R.KERNEL_PARAMS, elf.SHT_PROGBITS), (R.CONSTANT_DATA, elf.SHT_PROGBITS))}
        headers = self.records(R.HEADER)
        if len(headers) != 1:
            raise self.fail(R.HEADER, f"{len(headers)} header records, expected 1")
        h = headers[0]
        self.columns = ElfColumns(self)
        tensors = self.columns.tensors(self.columns.table(
            self.section(R.TENSORS, R.VpucShType.SHT_VPUC_TENSORS), R.TensorRecord))
        barriers = self.columns.barriers(self.columns.table(
            self.section(R.BARRIERS, R.VpucShType.SHT_VPUC_BARRIERS), R.BarrierRecord))
        kernels = tuple(self.kernels())
        lists = tuple(self.task_list(i, r) for i, r in
                      enumerate(self.records(R.MAPPED_INFERENCE)))
        runtime = None if h.runtime_kernel == -1 else \
            RuntimeRec(h.runtime_kernel, self.u32(h.stacks_start, h.stacks_count))
        constants = tuple(ConstantRec(r.tensor, self.blob(R.CONSTANT_DATA, r.offset, r.size))
                          for r in self.records(R.CONSTANT_RECORDS))
        content = BlobContent(self.header(h), tensors, barriers, lists, kernels, runtime,
                              constants, self.layer_sources())
        self.check_relocations(content)
        return content, h.content_hash

    def hash_offset(self) -> int:
        """Where the header record's content hash lies in the file (a record too short to
        hold it read it as zeros, which no blob hashes to)."""
        return self.by_name[R.HEADER].header.sh_offset + R.HeaderRecord.offsets["content_hash"]

    def layer_sources(self):
        if R.LAYER_SOURCES not in self.by_name:         # a 1.1 blob, or no layer table
            return ()
        sec = self.section(R.LAYER_SOURCES, R.VpucShType.SHT_VPUC_LAYER_SOURCES)

        def string(offset: int, at: int) -> str:
            text = self.string(offset)
            if text is None:
                raise self.fail(R.LAYER_SOURCES, "a layer's name is missing (no string)", at)
            return text

        return decode_layers(sec.data, string,
                             lambda at, message: self.fail(R.LAYER_SOURCES, message, at))

    def header(self, h) -> HeaderRec:
        meta: list[list[KeyValue]] = [[], [], []]
        for r in self.records(R.META):
            if r.kind > R.META_ATTRIBUTE:
                raise self.fail(R.META, f"unknown meta record kind {r.kind}")
            meta[r.kind].append(KeyValue(self.string(r.key), self.string(r.value)))
        arch = ArchRec(self.string(h.arch_name), *h[4:17])
        counts = TaskCounts(h.dma, h.dpu, h.dpu_variants, h.act_kernel, h.barrier_count,
                            h.tensor_count, h.kernel_count)
        return HeaderRec(self.string(h.module_name), arch, self.u32(h.inputs_start, h.inputs_count),
                         self.u32(h.outputs_start, h.outputs_count), counts,
                         self.string(h.compiler_version), *map(tuple, meta),
                         self.string(h.module_arch))

    def tensor(self, index: int, r) -> TensorRec:
        rank = r.rank
        if r.dynamic_mask >> rank:
            raise self.fail(R.TENSORS, f"tensor #{index}: dynamic mask {r.dynamic_mask:#x} has "
                            f"bits past its rank {rank}")
        dynamic = () if not r.dynamic_mask else \
            tuple((r.dynamic_mask >> d) & 1 for d in range(rank))
        slices = ()
        if r.slices != R.LIST_NONE:
            words = self.i64(r.slices, 3 * rank)
            slices = tuple(SliceRec(*words[i:i + 3]) for i in range(0, len(words), 3))
        init = None
        if r.init_kind != -1:
            words = self.i64(r.init_values, 2 * r.init_count)
            init = ConstInitRec(r.init_kind, tuple(self.number(words[i], words[i + 1], R.TENSORS)
                                                   for i in range(0, len(words), 2)),
                                self.string(r.init_path))
        return TensorRec(self.string(r.name), r.location, r.tile, r.offset, r.data_offset,
                         self.u32(r.dims, rank), dynamic, self.i64(r.strides, rank), r.data_type,
                         self.u32(r.order, rank), r.base, slices, init)

    def kernels(self):
        contracts = self.records(R.CONTRACTS)
        for r in self.records(R.ACT_RANGES):
            if r.params_start + r.params_count > len(contracts):
                raise self.fail(R.ACT_RANGES, f"kernel params {r.params_start}+{r.params_count} "
                                f"run past {R.CONTRACTS} ({len(contracts)} records)")
            params = tuple(ParamRec(self.string(p.name), p.is_memref, p.data_type,
                                    self.i64(p.dims_start, p.dims_count, none_ok=True))
                           for p in contracts[r.params_start:r.params_start + r.params_count])
            image = None
            if r.has_image:
                if r.rodata_offset < r.text_size:
                    raise self.fail(R.ACT_RANGES, f"rodata offset {r.rodata_offset} is inside "
                                    f".text ({r.text_size} bytes)")
                image = KernelImageRec(
                    self.string(r.origin), self.blob(R.KERNEL_CODE, r.code_offset, r.text_size),
                    self.blob(R.KERNEL_CODE, r.code_offset + r.rodata_offset, r.rodata_size),
                    self.blob(R.KERNEL_DATA, r.data_offset, r.data_size),
                    self.blob(R.KERNEL_OBJECTS, r.elf_offset, r.elf_size), r.entry,
                    r.rodata_offset)
            yield KernelRec(self.string(r.name), r.source_kind, self.string(r.source_ref),
                            params, image, r.image_kernel)

    def task_list(self, index: int, r) -> TaskListRec:
        where = f"{R.MAPPED_INFERENCE} record #{index}"
        sh_type = _TASK_TYPES.get(r.executor)
        if sh_type is None or not 0 < r.section < len(self.elf.sections):
            raise self.fail(R.MAPPED_INFERENCE, f"{where}: executor {r.executor} / section "
                            f"{r.section} is invalid")
        sec = self.elf.sections[r.section]
        if sec.header.sh_type != sh_type:
            raise self.fail(sec.name, f"sh_type is {sec.header.sh_type:#x}, expected {sh_type:#x}")
        recs = self.columns.table(sec, R.TASK_RECORDS[sh_type])
        if len(recs) != r.count:
            raise self.fail(sec.name, f"{len(recs)} task records, {where} says {r.count}")
        if r.executor == 0:
            tasks = elf_tasks.dma(self.columns, recs)
        elif r.executor == 1:
            tasks = self.dpu(recs, r.aux_section, sec.name)
        else:
            tasks = elf_tasks.act(self.columns, recs, sec.name)
        return TaskListRec(r.executor, tasks)

    def dpu(self, recs, aux: int, name: str) -> tuple[DpuRec, ...]:
        if not 0 < aux < len(self.elf.sections) or self.elf.sections[aux].header.sh_type != \
                R.VpucShType.SHT_VPUC_DPU_VARIANTS:
            raise self.fail(name, f"variants section #{aux} is not a DPU variants section")
        vsec = self.elf.sections[aux]
        return elf_tasks.dpu(self.columns, recs, self.columns.table(vsec, R.DpuVariantRecord),
                             vsec.name)

    # --- relocations ----------------------------------------------------------------

    def check_relocations(self, content: BlobContent) -> None:
        """Apply every relocation; each must patch exactly the address the records imply."""
        if self.relocs is not None:
            if relocations_hold(self, self.relocs, content):
                return
            self.elf.relocations = elf.read_relocations(self.elf, self.file)
        arch = content.header.arch
        windows = {R.WINDOW_SYMBOLS["WIN_D"]: arch.win_d_base,
                   R.WINDOW_SYMBOLS["WIN_E"]: arch.win_e_base,
                   R.WINDOW_SYMBOLS["WIN_F"]: arch.win_f_base}
        patched: dict[tuple[str, int], int] = {}
        for rel in self.elf.relocations:
            where = BinLoc(self.file, rel.section, rel.offset)
            sym = rel.symbol
            if rel.type != R.VpucRelocType.R_VPUC_32 or sym is None:
                raise VpucError(f"relocation type {rel.type} is not R_VPUC_32 with a symbol", where)
            if sym.shndx == elf.SHN_UNDEF:
                if sym.name not in windows:
                    raise VpucError(f"relocation against undefined symbol '{sym.name}'", where)
                value = windows[sym.name]
            else:
                value = sym.value
            if self.by_name[rel.section].data[rel.offset:rel.offset + 4] != bytes(4):
                raise VpucError("relocated word is not zero", where)
            patched[(rel.section, rel.offset)] = (value + rel.addend) & 0xFFFFFFFF
        expected = self.expected_addresses(content, arch)
        if patched != expected:
            key = min(set(patched) ^ set(expected) or
                      {k for k in patched if patched[k] != expected[k]})
            raise VpucError(f"relocation gives {patched.get(key, 'nothing')}, the records imply "
                            f"{expected.get(key, 'no relocation')}", BinLoc(self.file, *key))

    def expected_addresses(self, content: BlobContent, arch: ArchRec) -> dict:
        symbols = {s.name: s for s in self.elf.symbols[1:]}
        out: dict[tuple[str, int], int] = {}
        tensors = content.tensors
        has_data = {c.tensor for c in content.constants}
        stride = self.by_name[R.TENSORS].header.sh_entsize     # the blob's record size
        for i, t in enumerate(tensors):
            root = i
            for _ in range(len(tensors)):
                if not 0 <= tensors[root].base < len(tensors):
                    break
                root = tensors[root].base
            rt = tensors[root]
            key = (R.TENSORS, i * stride + R.TensorRecord.offsets["address"])
            if rt.location == _CMX and rt.offset >= 0:
                out[key] = (arch.win_f_base + rt.offset + t.data_offset) & 0xFFFFFFFF
            elif rt.location in _STORAGE and (rt.location != LOCATION_CODE[BufferKind.CONST]
                                              or root in has_data):
                sym = symbols.get(rt.name)
                if sym is None or sym.section != _STORAGE[rt.location]:
                    raise self.fail(R.TENSORS, f"tensor '{rt.name}' has no symbol in "
                                    f"{_STORAGE[rt.location]}")
                out[key] = (sym.value + t.data_offset) & 0xFFFFFFFF
        rec = R.ActKernelRangeRecord
        stride = self.by_name[R.ACT_RANGES].header.sh_entsize
        for i, k in enumerate(content.kernels):
            if k.image is not None:
                sym = symbols.get(R.KERNEL_SYMBOL_PREFIX + k.name)
                out[(R.ACT_RANGES, i * stride + rec.offsets["code_addr"])] = \
                    -1 if sym is None else sym.value
                out[(R.ACT_RANGES, i * stride + rec.offsets["entry_addr"])] = \
                    (arch.win_d_base + k.image.entry) & 0xFFFFFFFF
        rec, params = R.ActKernelInvocationRecord, symbols.get("vpuc.kernel_params")
        for r in self.records(R.MAPPED_INFERENCE):
            sec = self.elf.sections[r.section]
            if r.executor != 2:
                continue
            stride = sec.header.sh_entsize
            for i, t in enumerate(self.unpack(sec, rec)):
                if t.has_image:
                    out[(sec.name, i * stride + rec.offsets["data_addr"])] = \
                        -1 if params is None else params.value + t.image_offset
                    out[(sec.name, i * stride + rec.offsets["args_addr"])] = \
                        (arch.win_e_base + t.args_offset) & 0xFFFFFFFF
        return out

    def sizes(self) -> dict[str, int]:
        """Bytes per section; SHT_NOBITS sections (not in the file) are marked as such."""
        return {s.name + (" (NOBITS, not in the file)" if s.header.sh_type == elf.SHT_NOBITS
                          else ""): s.header.sh_size for s in self.elf.sections[1:]}
