"""BlobContent -> an ELF32 relocatable container (vpuc.shave.elf_layout.write_elf32).

Records are packed with the field tables of ``elf_records``; lists go to the
two pools, strings to ``.vpuc.strtab``.  Addresses the runtime needs (tensor
data, kernel code and entry, invocation data and args) are left zero and
described by R_VPUC_32 relocations against the window symbols (which the
loader defines as the architecture's window bases) or against the symbols of
the buffers, kernels and parameter images.
"""

from __future__ import annotations

import struct

from vpuc.blob import elf_records as R
from vpuc.blob.layer_sources import encode_elf as encode_layers
from vpuc.blob.content import (ELEM_OF, EXECUTOR_CODE, FORMAT_VERSION, LOCATION_CODE,
                               ActTaskRec, BlobContent, DmaRec, DpuRec, TensorRec, content_hash)
from vpuc.blob.field_check import TensorOverflow
from vpuc.blob.sealing import DIGEST_BYTES, elf_hash_offset, hashes_bytes, seal
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import Executor
from vpuc.shave import elf_layout as elf

DATA_ALIGN = 64
ELF32_MAX = (1 << 32) - 1        # Elf32_Word: st_size, sh_size, sh_offset
_STORAGE = {LOCATION_CODE[BufferKind.INPUT]: R.NETWORK_INPUTS,
            LOCATION_CODE[BufferKind.OUTPUT]: R.NETWORK_OUTPUTS,
            LOCATION_CODE[BufferKind.DDR]: R.DDR_SCRATCH}
_CMX = LOCATION_CODE[BufferKind.CMX]
_CONST = LOCATION_CODE[BufferKind.CONST]


def _align(value: int, alignment: int = DATA_ALIGN) -> int:
    return (value + alignment - 1) // alignment * alignment


class _Blobs:
    """A data section built from 64-byte aligned pieces; identical pieces stored once."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._index: dict[bytes, int] = {}

    def add(self, piece: bytes, share: bool = True) -> int:
        if share and piece in self._index:
            return self._index[piece]
        self.data += bytes(_align(len(self.data)) - len(self.data))
        offset = len(self.data)
        self.data += piece
        if share:
            self._index[piece] = offset
        return offset


class _ElfWriter:
    def __init__(self, content: BlobContent, digest: bytes) -> None:
        self.c = content
        self.digest = digest
        self.strings = R.Strings()
        self.u32 = R.Pool()
        self.i64 = R.Pool()
        self.symbols: list[elf.SymbolSpec] = []
        self.relocs: list[elf.RelocSpec] = []
        self.nobits = {R.NETWORK_INPUTS: 0, R.NETWORK_OUTPUTS: 0, R.DDR_SCRATCH: 0, R.STACKS: 0}

    def reloc(self, section: str, record, index: int, field: str, symbol: str, addend: int):
        self.relocs.append(elf.RelocSpec(section, index * record.size + record.offsets[field],
                                         R.VpucRelocType.R_VPUC_32, symbol, addend))

    def symbol(self, name, section, value, size, bind=elf.STB_LOCAL, typ=elf.STT_OBJECT):
        self.symbols.append(elf.SymbolSpec(name, value, size, bind, typ, section))

    # --- tensors and their storage -------------------------------------------------

    def tensors(self, constants: _Blobs) -> bytes:
        tensors = self.c.tensors
        const_at = {c.tensor: (constants.add(c.data), len(c.data))   # equal data: one piece
                    for c in self.c.constants}
        out = bytearray()
        s, u32, i64 = self.strings, self.u32, self.i64
        for i, t in enumerate(tensors):
            root = i
            for _ in range(len(tensors)):
                if tensors[root].base == -1:
                    break
                root = tensors[root].base
            if t.base == -1:
                self._place(i, t, const_at)
            dims, _ = u32.add(t.dims)
            strides, _ = i64.add(t.strides)
            order, _ = u32.add(t.dims_order)
            slices = i64.add([v for sl in t.slices for v in sl])[0] if t.base != -1 \
                else R.LIST_NONE
            mask = sum(1 << d for d, flag in enumerate(t.dynamic_dims) if flag)
            init = t.const_init
            values = (R.LIST_NONE, 0) if init is None else \
                i64.add([w for v in init.values for w in _number_words(v)])
            out += R.TensorRecord.pack_values(
                t.offset, t.data_offset, s.add(t.name), t.base, 0, dims, strides, order, slices,
                mask, values[0], len(init.values) if init else 0,
                s.add(init.path) if init else R.STR_NONE, t.tile, t.location, t.data_type,
                len(t.dims), -1 if init is None else init.kind, 0, 0)
            self._address(i, t, tensors[root], root in const_at)
        return bytes(out)

    def _place(self, index: int, t: TensorRec, const_at: dict) -> None:
        """Give a DDR-side buffer a symbol in its storage section."""
        if t.location in _STORAGE:
            section = _STORAGE[t.location]
            size = (_product(t.dims) * ELEM_OF[t.data_type].bits + 7) // 8
            at = _align(self.nobits[section])
            if at + size > ELF32_MAX:
                raise TensorOverflow(index, (
                    f"%{t.name} ({size:,} bytes) would end at byte {at + size:,} of ELF "
                    f"section {section}; an ELF32 symbol's and section's sizes hold at most "
                    f"{ELF32_MAX:,} bytes (the FlatBuffer format, --format fb, holds it)"))
            self.nobits[section] = at + size
            kind = t.location
            bind = elf.STB_LOCAL if kind == LOCATION_CODE[BufferKind.DDR] else elf.STB_GLOBAL
            self.symbol(t.name, section, at, size, bind)
        elif t.location == _CONST and index in const_at:
            at, size = const_at[index]
            self.symbol(t.name, R.CONSTANT_DATA, at, size)

    def _address(self, index: int, t: TensorRec, root: TensorRec, root_has_data: bool) -> None:
        if root.location == _CMX:
            if root.offset >= 0:
                self.reloc(R.TENSORS, R.TensorRecord, index, "address", R.WINDOW_SYMBOLS["WIN_F"],
                           root.offset + t.data_offset)
        elif root.location in _STORAGE or (root.location == _CONST and root_has_data):
            self.reloc(R.TENSORS, R.TensorRecord, index, "address", root.name, t.data_offset)

    # --- tasks ---------------------------------------------------------------------

    def dma(self, tasks) -> bytes:
        out, s, u32 = bytearray(), self.strings, self.u32
        for t in tasks:
            out += R.DmaRecord.pack_values(s.add(t.label), t.src, t.dst, *u32.add(t.waits),
                                           *u32.add(t.updates), t.channel, t.mode, 0)
        return bytes(out)

    def dpu(self, tasks, variants_out: bytearray) -> bytes:
        out, s, u32, i64 = bytearray(), self.strings, self.u32, self.i64
        for index, t in enumerate(tasks):
            first = len(variants_out) // R.DpuVariantRecord.size
            for v in t.variants:
                variants_out += R.DpuVariantRecord.pack_values(
                    s.add(v.label), index, *v.start, *v.end, *u32.add(v.waits),
                    *u32.add(v.updates), v.mode, 0, 0)
            post = t.post_op
            post_params = (R.LIST_NONE, 0) if post is None else \
                i64.add([_float_bits(p) for p in post.params])
            out += R.DpuInvariantRecord.pack_values(
                s.add(t.label), *u32.add(t.inputs), t.output, t.weights, t.bias,
                *u32.add(t.kernel), *u32.add(t.stride), *u32.add(t.pad), *u32.add(t.dilation),
                *post_params, *u32.add(t.waits), *u32.add(t.updates), first, len(t.variants),
                t.op, t.tile, -1 if post is None else post.kind, t.mode, *u32.add(t.odu_cast),
                t.quant_scale + 1, t.in_zero_point, t.out_zero_point)
        return bytes(out)

    def act(self, tasks, scalars_out: bytearray, params: _Blobs, section: str) -> bytes:
        out, s, u32 = bytearray(), self.strings, self.u32
        win_e = R.WINDOW_SYMBOLS["WIN_E"]
        for index, t in enumerate(tasks):
            groups = [(u32.add([w for b in group for w in (b.tensor, s.add(b.alias))])[0],
                       len(group)) for group in (t.inputs, t.outputs)]   # pairs: count bindings
            first = len(scalars_out) // R.ScalarArgRecord.size
            for sc in t.scalars:
                scalars_out += R.ScalarArgRecord.pack_values(
                    s.add(sc.name), sc.data_type, sc.value.is_int, 0, _number_words(sc.value)[1])
            inv = t.invocation
            image = (0, 0, 0, 0) if inv is None else \
                (params.add(inv.window), len(inv.window), inv.args_offset, inv.args_size)
            out += R.ActKernelInvocationRecord.pack_values(
                s.add(t.label), t.kernel, *groups[0], *groups[1], first, len(t.scalars),
                *u32.add([s.add(a) for a in t.run_args]), *u32.add(t.waits),
                *u32.add(t.updates), *image, 0, 0, t.tile, int(inv is not None), 0)
            if inv is not None:
                record = R.ActKernelInvocationRecord
                self.reloc(section, record, index, "data_addr", "vpuc.kernel_params", image[0])
                self.reloc(section, record, index, "args_addr", win_e, inv.args_offset)
        return bytes(out)

    def kernels(self, code: _Blobs, data: _Blobs, objects: _Blobs) -> tuple[bytes, bytes]:
        ranges, contracts, s, i64 = bytearray(), bytearray(), self.strings, self.i64
        for index, k in enumerate(self.c.kernels):
            first = len(contracts) // R.KernelContractRecord.size
            for p in k.params:
                contracts += R.KernelContractRecord.pack_values(
                    s.add(p.name), *i64.add(p.dims), p.is_memref, p.data_type, 0)
            img = k.image
            if img is None:
                where = (0,) * 9
            else:
                win_d = img.text + bytes(img.rodata_offset - len(img.text)) + img.rodata
                at = code.add(win_d, share=False)
                where = (at, len(img.text), img.rodata_offset, len(img.rodata),
                         data.add(img.data, share=False), len(img.data),
                         objects.add(img.elf, share=False), len(img.elf), img.entry)
                symbol = R.KERNEL_SYMBOL_PREFIX + k.name
                self.symbol(symbol, R.KERNEL_CODE, at, len(img.text), typ=elf.STT_FUNC)
                rec = R.ActKernelRangeRecord
                self.reloc(R.ACT_RANGES, rec, index, "code_addr", symbol, 0)
                self.reloc(R.ACT_RANGES, rec, index, "entry_addr", R.WINDOW_SYMBOLS["WIN_D"],
                           img.entry)
            ranges += R.ActKernelRangeRecord.pack_values(
                s.add(k.name), s.add(k.source_ref), s.add(None if img is None else img.origin),
                first, len(k.params), 0, 0, *where, k.image_kernel, k.source_kind,
                int(img is not None), 0)
        return bytes(ranges), bytes(contracts)

    # --- the file --------------------------------------------------------------------

    def build(self) -> bytes:
        c, s = self.c, self.strings
        code, kdata, objects, params, constants = _Blobs(), _Blobs(), _Blobs(), _Blobs(), _Blobs()
        tensors = self.tensors(constants)
        barriers = b"".join(R.BarrierRecord.pack_values(s.add(b.name), b.id, b.physical_id, 0,
                                                        b.producer_count, b.consumer_count)
                            for b in c.barriers)
        ranges, contracts = self.kernels(code, kdata, objects)
        task_sections: list[tuple[int, list[elf.SectionSpec], int]] = []
        scalars, numbers = bytearray(), {}
        for tl in c.task_lists:
            n = numbers[tl.executor] = numbers.get(tl.executor, -1) + 1
            suffix = str(n) if n else ""
            if tl.executor == EXECUTOR_CODE[Executor.DMA]:
                specs = [_records(f"{R.DMA_TASKS}{n}", R.VpucShType.SHT_VPUC_DMA_TASKS,
                                  self.dma([t for t in tl.tasks if type(t) is DmaRec]),
                                  R.DmaRecord, elf.SHF_ALLOC)]
            elif tl.executor == EXECUTOR_CODE[Executor.DPU]:
                variants = bytearray()
                invariants = self.dpu([t for t in tl.tasks if type(t) is DpuRec], variants)
                specs = [_records(R.DPU_INVARIANTS + suffix, R.VpucShType.SHT_VPUC_DPU_INVARIANTS,
                                  invariants, R.DpuInvariantRecord, elf.SHF_ALLOC),
                         _records(R.DPU_VARIANTS + suffix, R.VpucShType.SHT_VPUC_DPU_VARIANTS,
                                  bytes(variants), R.DpuVariantRecord, elf.SHF_ALLOC)]
            else:
                name = R.ACT_INVOCATIONS + suffix
                specs = [_records(name, R.VpucShType.SHT_VPUC_ACT_KERNEL_INVOCATIONS,
                                  self.act([t for t in tl.tasks if type(t) is ActTaskRec],
                                           scalars, params, name),
                                  R.ActKernelInvocationRecord, elf.SHF_ALLOC)]
            task_sections.append((tl.executor, specs, len(tl.tasks)))
        stacks = self._stacks()
        header = self._header()
        meta = b"".join(R.MetaRecord.pack_values(kind, 0, 0, s.add(kv.key), s.add(kv.value))
                        for kind, pairs in ((R.META_OPTION, c.header.options),
                                            (R.META_PROVENANCE, c.header.provenance),
                                            (R.META_ATTRIBUTE, c.header.attributes))
                        for kv in pairs)
        const_records = b"".join(R.ConstantRecord.pack_values(
            k.tensor, constants.add(k.data), len(k.data)) for k in c.constants)
        mapped = _records(R.MAPPED_INFERENCE, R.VpucShType.SHT_VPUC_MAPPED_INFERENCE, b"",
                          R.TaskListRecord, elf.SHF_ALLOC)
        sections = [
            elf.SectionSpec(R.NOTE, elf.SHT_NOTE, _version_note(), addralign=4),
            _records(R.HEADER, R.VpucShType.SHT_VPUC_HEADER, header, R.HeaderRecord),
            None,   # .vpuc.strtab, once every string is in
            elf.SectionSpec(R.POOL32, R.VpucShType.SHT_VPUC_POOL,
                            struct.pack(f"<{len(self.u32.words)}I", *self.u32.words),
                            addralign=4, entsize=4),
            elf.SectionSpec(R.POOL64, R.VpucShType.SHT_VPUC_POOL,
                            struct.pack(f"<{len(self.i64.words)}q", *self.i64.words),
                            addralign=8, entsize=8),
            _records(R.META, R.VpucShType.SHT_VPUC_META, meta, R.MetaRecord),
            mapped,
            _records(R.TENSORS, R.VpucShType.SHT_VPUC_TENSORS, tensors, R.TensorRecord),
            _records(R.BARRIERS, R.VpucShType.SHT_VPUC_BARRIERS, barriers, R.BarrierRecord,
                     elf.SHF_ALLOC),
        ]
        mapped_records = bytearray()
        for executor, specs, count in task_sections:
            first = len(sections) + 1          # write_elf32 puts SHT_NULL at index 0
            sections += specs
            mapped_records += R.TaskListRecord.pack_values(
                executor, 0, first, first + 1 if len(specs) > 1 else 0, 0, count)
        mapped.data = bytes(mapped_records)
        sections += [
            _records(R.ACT_RANGES, R.VpucShType.SHT_VPUC_ACT_KERNEL_RANGES, ranges,
                     R.ActKernelRangeRecord, elf.SHF_ALLOC),
            _records(R.CONTRACTS, R.VpucShType.SHT_VPUC_KERNEL_CONTRACTS, contracts,
                     R.KernelContractRecord),
            _records(R.SCALARS, R.VpucShType.SHT_VPUC_SCALAR_ARGS, bytes(scalars),
                     R.ScalarArgRecord),
            elf.SectionSpec(R.KERNEL_CODE, elf.SHT_PROGBITS, bytes(code.data),
                            elf.SHF_ALLOC | elf.SHF_EXECINSTR, DATA_ALIGN),
            elf.SectionSpec(R.KERNEL_DATA, elf.SHT_PROGBITS, bytes(kdata.data),
                            elf.SHF_ALLOC | elf.SHF_WRITE, DATA_ALIGN),
            elf.SectionSpec(R.KERNEL_OBJECTS, R.VpucShType.SHT_VPUC_KERNEL_OBJECTS,
                            bytes(objects.data), 0, DATA_ALIGN),
            elf.SectionSpec(R.KERNEL_PARAMS, elf.SHT_PROGBITS, bytes(params.data),
                            elf.SHF_ALLOC | elf.SHF_WRITE, DATA_ALIGN),
            _records(R.CONSTANT_RECORDS, R.VpucShType.SHT_VPUC_CONSTANTS, const_records,
                     R.ConstantRecord),
            elf.SectionSpec(R.CONSTANT_DATA, elf.SHT_PROGBITS, bytes(constants.data),
                            elf.SHF_ALLOC, DATA_ALIGN),
        ]
        for name, flags in ((R.STACKS, 0), (R.DDR_SCRATCH, 0),
                            (R.NETWORK_INPUTS, R.VpucShFlags.SHF_VPUC_NETWORK_INPUT),
                            (R.NETWORK_OUTPUTS, R.VpucShFlags.SHF_VPUC_NETWORK_OUTPUT)):
            sections.append(elf.SectionSpec(name, elf.SHT_NOBITS, b"",
                                            elf.SHF_ALLOC | elf.SHF_WRITE | int(flags),
                                            DATA_ALIGN, nobits_size=self.nobits[name]))
        if c.layer_sources:
            sections.append(elf.SectionSpec(R.LAYER_SOURCES, R.VpucShType.SHT_VPUC_LAYER_SOURCES,
                                            encode_layers(c.layer_sources, s.add), addralign=4))
        sections[2] = elf.SectionSpec(R.STRTAB, elf.SHT_STRTAB, bytes(s.data))
        # Its index in the file's section header table (write_elf32 puts SHT_NULL at 0).
        self.header_index = 1 + [spec.name for spec in sections].index(R.HEADER)
        self.symbol(R.ENTRY_SYMBOL, R.MAPPED_INFERENCE, 0, len(mapped.data), elf.STB_GLOBAL)
        self.symbol("vpuc.kernel_params", R.KERNEL_PARAMS, 0, 0, typ=elf.STT_NOTYPE)
        for window in sorted(R.WINDOW_SYMBOLS.values()):
            self.symbol(window, None, 0, 0, elf.STB_GLOBAL, elf.STT_NOTYPE)
        self.symbols += stacks
        return elf.write_elf32(machine=R.EM_VPUC_NPU, sections=sections, symbols=self.symbols,
                               relocations=self.relocs)

    def _stacks(self) -> list[elf.SymbolSpec]:
        rt, arch = self.c.runtime, self.c.header.arch
        out = []
        for tile, size in enumerate(rt.stack_sizes if rt is not None else ()):
            at = _align(self.nobits[R.STACKS])
            total = size * arch.act_shaves_per_tile
            self.nobits[R.STACKS] = at + total
            out.append(elf.SymbolSpec(f"{R.STACK_SYMBOL_PREFIX}{tile}", at, total, elf.STB_LOCAL,
                                      elf.STT_OBJECT, R.STACKS))
        return out

    def _header(self) -> bytes:
        h, s, u32 = self.c.header, self.strings, self.u32
        rt = self.c.runtime
        return R.HeaderRecord.pack_values(
            s.add(h.module_name), s.add(h.module_arch), s.add(h.compiler_version),
            s.add(h.arch.name), *h.arch[1:], *u32.add(h.network_inputs),
            *u32.add(h.network_outputs), *h.task_counts, -1 if rt is None else rt.kernel,
            *u32.add(() if rt is None else rt.stack_sizes), self.digest)


def _records(name: str, sh_type: int, data: bytes, record, flags: int = 0) -> elf.SectionSpec:
    return elf.SectionSpec(name, sh_type, data, flags, addralign=8, entsize=record.size)


def _version_note() -> bytes:
    name = R.NOTE_NAME + b"\0"
    desc = R.VersionNote.pack_values(*FORMAT_VERSION)
    return (R.Elf32_Nhdr.pack_values(len(name), len(desc), R.VpucNoteType.NT_VPUC_VERSION)
            + name + bytes(-len(name) % 4) + desc + bytes(-len(desc) % 4))


def _product(values) -> int:
    result = 1
    for v in values:
        result *= v
    return result


def _float_bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", value))[0]


def _number_words(number) -> tuple[int, int]:
    """A Number as two i64 words: (is_int, the integer or the float's bits)."""
    return (1, number.value) if number.is_int else (0, _float_bits(number.value))


def write_elf(content: BlobContent) -> bytes:
    """The blob, sealed with its content hash (``vpuc.blob.sealing``)."""
    if not hashes_bytes(FORMAT_VERSION):       # tests write older versions
        return _ElfWriter(content, content_hash(content)).build()
    writer = _ElfWriter(content, bytes(DIGEST_BYTES))
    data = bytearray(writer.build())
    return seal(data, elf_hash_offset(data, writer.header_index))
