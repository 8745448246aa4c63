"""The ELF container's vocabulary: section types and flags, the note, relocation
types, and every record as a field table (``elf_layout.Struct``).

Records refer to strings by offset in ``.vpuc.strtab`` (``STR_NONE`` for
None) and to variable-length lists by (start, count) in one of two pools:
``.vpuc.u32`` (indices, dims, dims orders, string offsets) and ``.vpuc.i64``
(strides, slices, numbers).  A list start of ``LIST_NONE`` means "not given"
(a DPU task without ``pad(...)``, a memref of any rank).
docs/blob-format.md lists the same tables.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

from vpuc.shave.elf_layout import Elf32_Nhdr, Struct  # noqa: F401  (Elf32_Nhdr: the note)

EM_VPUC_NPU = 0x7ACD          # like EM_VPUC_SHAVE (0x7ACC), assigned to no real machine
STR_NONE = 0xFFFFFFFF
LIST_NONE = 0xFFFFFFFF
NOTE_NAME = b"VPUC"


class VpucShType(IntEnum):
    """Custom section types, from SHT_LOUSER (0x80000000) up."""

    SHT_VPUC_HEADER = 0x80000000
    SHT_VPUC_POOL = 0x80000001
    SHT_VPUC_META = 0x80000002
    SHT_VPUC_MAPPED_INFERENCE = 0x80000003
    SHT_VPUC_TENSORS = 0x80000004
    SHT_VPUC_BARRIERS = 0x80000005
    SHT_VPUC_DMA_TASKS = 0x80000006
    SHT_VPUC_DPU_INVARIANTS = 0x80000007
    SHT_VPUC_DPU_VARIANTS = 0x80000008
    SHT_VPUC_ACT_KERNEL_RANGES = 0x80000009
    SHT_VPUC_ACT_KERNEL_INVOCATIONS = 0x8000000A
    SHT_VPUC_KERNEL_CONTRACTS = 0x8000000B
    SHT_VPUC_SCALAR_ARGS = 0x8000000C
    SHT_VPUC_KERNEL_OBJECTS = 0x8000000D
    SHT_VPUC_CONSTANTS = 0x8000000E
    SHT_VPUC_LAYER_SOURCES = 0x8000000F


class VpucShFlags(IntFlag):
    """Processor-specific section flags (SHF_MASKPROC)."""

    SHF_VPUC_NETWORK_INPUT = 0x10000000     # .bss of the user's input buffers
    SHF_VPUC_NETWORK_OUTPUT = 0x20000000    # .bss of the user's output buffers


class VpucRelocType(IntEnum):
    R_VPUC_NONE = 0
    R_VPUC_32 = 1        # the u32 at r_offset becomes S + A


class VpucNoteType(IntEnum):
    NT_VPUC_VERSION = 1  # desc: VersionNote


# Symbols the loader defines: the window bases of the architecture.
WINDOW_SYMBOLS = {"WIN_D": "vpuc.WIN_D", "WIN_E": "vpuc.WIN_E", "WIN_F": "vpuc.WIN_F"}
ENTRY_SYMBOL = "vpuc.mapped_inference"
KERNEL_SYMBOL_PREFIX = "vpuc.kernel."
STACK_SYMBOL_PREFIX = "vpuc.stack.tile"

VersionNote = Struct("VersionNote", (("major", "H"), ("minor", "H")))

# Sections, in file order.  Task list sections come after .text.BarrierConfigs.
HEADER = ".vpuc.header"
STRTAB = ".vpuc.strtab"
POOL32 = ".vpuc.u32"
POOL64 = ".vpuc.i64"
META = ".vpuc.meta"
MAPPED_INFERENCE = ".text.MappedInference"
TENSORS = ".vpuc.tensors"
BARRIERS = ".text.BarrierConfigs"
DMA_TASKS = ".text.dmaTasks"          # + the DMA task list's number: .text.dmaTasks0
DPU_INVARIANTS = ".text.DPUInvariants"
DPU_VARIANTS = ".text.DPUVariants"
ACT_INVOCATIONS = ".text.ActKernelInvocations"
ACT_RANGES = ".text.ActKernelRanges"
CONTRACTS = ".vpuc.kernelContracts"
SCALARS = ".vpuc.scalarArgs"
KERNEL_CODE = ".text.ActKernelCode"
KERNEL_DATA = ".data.ActKernelData"
KERNEL_OBJECTS = ".vpuc.ActKernelObjects"
KERNEL_PARAMS = ".data.KernelParams"
CONSTANT_RECORDS = ".vpuc.constants"
CONSTANT_DATA = ".data.Constants"
LAYER_SOURCES = ".vpuc.layerSources"      # 1.2, only when the program has a layer table
STACKS = ".bss.ShaveStacks"
DDR_SCRATCH = ".bss.DDRScratch"
NETWORK_INPUTS = ".bss.NetworkInputs"
NETWORK_OUTPUTS = ".bss.NetworkOutputs"
NOTE = ".note.vpuc"

META_OPTION, META_PROVENANCE, META_ATTRIBUTE = 0, 1, 2

HeaderRecord = Struct("HeaderRecord", (
    ("module_name", "I"), ("module_arch", "I"), ("compiler_version", "I"), ("arch_name", "I"),
    ("arch_version", "I"), ("tiles", "I"), ("cmx_bytes", "I"), ("act_shaves_per_tile", "I"),
    ("dpus_per_tile", "I"), ("dma_channels", "I"), ("barriers", "I"), ("max_producers", "I"),
    ("max_consumers", "I"), ("window_size", "I"), ("win_d_base", "I"), ("win_e_base", "I"),
    ("win_f_base", "I"),
    ("inputs_start", "I"), ("inputs_count", "I"), ("outputs_start", "I"), ("outputs_count", "I"),
    ("dma", "I"), ("dpu", "I"), ("dpu_variants", "I"), ("act_kernel", "I"),
    ("barrier_count", "I"), ("tensor_count", "I"), ("kernel_count", "I"),
    ("runtime_kernel", "i"), ("stacks_start", "I"), ("stacks_count", "I"),
    ("content_hash", "32s"),
))
MetaRecord = Struct("MetaRecord", (
    ("kind", "B"), ("reserved", "B"), ("reserved2", "H"), ("key", "I"), ("value", "I"),
))
TaskListRecord = Struct("TaskListRecord", (
    ("executor", "B"), ("reserved", "B"), ("section", "H"), ("aux_section", "H"),
    ("reserved2", "H"), ("count", "I"),
))
TensorRecord = Struct("TensorRecord", (
    ("offset", "q"), ("data_offset", "Q"), ("name", "I"), ("base", "i"), ("address", "I"),
    ("dims", "I"), ("strides", "I"), ("order", "I"), ("slices", "I"), ("dynamic_mask", "I"),
    ("init_values", "I"), ("init_count", "I"), ("init_path", "I"), ("tile", "h"),
    ("location", "B"), ("data_type", "B"), ("rank", "B"), ("init_kind", "b"), ("reserved", "H"),
    ("reserved2", "I"),
))
BarrierRecord = Struct("BarrierRecord", (
    ("name", "I"), ("id", "I"), ("physical_id", "h"), ("reserved", "H"),
    ("producer_count", "I"), ("consumer_count", "I"),
))
DmaRecord = Struct("DmaRecord", (
    ("label", "I"), ("src", "I"), ("dst", "I"), ("waits_start", "I"), ("waits_count", "I"),
    ("updates_start", "I"), ("updates_count", "I"), ("channel", "B"), ("mode", "B"),
    ("reserved", "H"),
))
DpuInvariantRecord = Struct("DpuInvariantRecord", (
    ("label", "I"), ("inputs_start", "I"), ("inputs_count", "I"), ("output", "I"),
    ("weights", "i"), ("bias", "i"),
    ("kernel_start", "I"), ("kernel_count", "I"), ("stride_start", "I"), ("stride_count", "I"),
    ("pad_start", "I"), ("pad_count", "I"), ("dilation_start", "I"), ("dilation_count", "I"),
    ("post_params_start", "I"), ("post_params_count", "I"),
    ("waits_start", "I"), ("waits_count", "I"), ("updates_start", "I"), ("updates_count", "I"),
    ("variants_start", "I"), ("variants_count", "I"),
    ("op", "B"), ("tile", "B"), ("post_kind", "b"), ("mode", "B"),
    # format 1.5: the output's copies on other tiles (u32 pool of tensor indices), named
    # after NPU37XX's ODU_CAST registers (DPUInvariantRegisters.odu_cast); count 0: none
    ("odu_cast_start", "I"), ("odu_cast_count", "I"),
    # format 1.6: the integer mode: the scale table's tensor index plus one (0: none, so a
    # 1.5 record's missing words read as the float datapath) and the zero points
    ("quant_scale_plus_one", "I"), ("in_zero_point", "i"), ("out_zero_point", "i"),
))
DpuVariantRecord = Struct("DpuVariantRecord", (
    ("label", "I"), ("invariant", "I"), ("start_x", "i"), ("start_y", "i"), ("start_z", "i"),
    ("end_x", "i"), ("end_y", "i"), ("end_z", "i"),
    ("waits_start", "I"), ("waits_count", "I"), ("updates_start", "I"), ("updates_count", "I"),
    ("mode", "B"), ("reserved", "B"), ("reserved2", "H"),
))
ActKernelRangeRecord = Struct("ActKernelRangeRecord", (
    ("name", "I"), ("source_ref", "I"), ("origin", "I"), ("params_start", "I"),
    ("params_count", "I"), ("code_addr", "I"), ("entry_addr", "I"), ("code_offset", "I"),
    ("text_size", "I"), ("rodata_offset", "I"), ("rodata_size", "I"), ("data_offset", "I"),
    ("data_size", "I"), ("elf_offset", "I"), ("elf_size", "I"), ("entry", "I"),
    ("image_kernel", "i"), ("source_kind", "B"), ("has_image", "B"), ("reserved", "H"),
))
KernelContractRecord = Struct("KernelContractRecord", (
    ("name", "I"), ("dims_start", "I"), ("dims_count", "I"), ("is_memref", "B"),
    ("data_type", "B"), ("reserved", "H"),
))
ActKernelInvocationRecord = Struct("ActKernelInvocationRecord", (
    ("label", "I"), ("kernel", "I"), ("inputs_start", "I"), ("inputs_count", "I"),
    ("outputs_start", "I"), ("outputs_count", "I"), ("scalars_start", "I"),
    ("scalars_count", "I"), ("run_args_start", "I"), ("run_args_count", "I"),
    ("waits_start", "I"), ("waits_count", "I"), ("updates_start", "I"), ("updates_count", "I"),
    ("image_offset", "I"), ("image_size", "I"), ("args_offset", "I"), ("args_size", "I"),
    ("data_addr", "I"), ("args_addr", "I"), ("tile", "B"), ("has_image", "B"), ("reserved", "H"),
))
ScalarArgRecord = Struct("ScalarArgRecord", (
    ("name", "I"), ("data_type", "B"), ("is_int", "B"), ("reserved", "H"), ("value", "q"),
))
ConstantRecord = Struct("ConstantRecord", (("tensor", "I"), ("offset", "I"), ("size", "I")))

# What each record section holds, for the reader and for docs/inspect.
RECORD_SECTIONS: dict[str, tuple[int, Struct]] = {
    HEADER: (VpucShType.SHT_VPUC_HEADER, HeaderRecord),
    META: (VpucShType.SHT_VPUC_META, MetaRecord),
    MAPPED_INFERENCE: (VpucShType.SHT_VPUC_MAPPED_INFERENCE, TaskListRecord),
    TENSORS: (VpucShType.SHT_VPUC_TENSORS, TensorRecord),
    BARRIERS: (VpucShType.SHT_VPUC_BARRIERS, BarrierRecord),
    DPU_VARIANTS: (VpucShType.SHT_VPUC_DPU_VARIANTS, DpuVariantRecord),
    ACT_RANGES: (VpucShType.SHT_VPUC_ACT_KERNEL_RANGES, ActKernelRangeRecord),
    CONTRACTS: (VpucShType.SHT_VPUC_KERNEL_CONTRACTS, KernelContractRecord),
    SCALARS: (VpucShType.SHT_VPUC_SCALAR_ARGS, ScalarArgRecord),
    CONSTANT_RECORDS: (VpucShType.SHT_VPUC_CONSTANTS, ConstantRecord),
}
TASK_RECORDS = {
    VpucShType.SHT_VPUC_DMA_TASKS: DmaRecord,
    VpucShType.SHT_VPUC_DPU_INVARIANTS: DpuInvariantRecord,
    VpucShType.SHT_VPUC_ACT_KERNEL_INVOCATIONS: ActKernelInvocationRecord,
}


class Pool:
    """A pool of fixed-width words; identical lists are stored once."""

    def __init__(self) -> None:
        self.words: list[int] = []
        self._index: dict[tuple, int] = {}

    def add(self, values) -> tuple[int, int]:
        if values is None:
            return LIST_NONE, 0
        key = tuple(values)
        if not key:
            return 0, 0
        start = self._index.get(key)
        if start is None:
            start = self._index[key] = len(self.words)
            self.words.extend(key)
        return start, len(key)


class Strings:
    """The record string table: NUL-terminated UTF-8, each string once."""

    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self._index: dict[str, int] = {"": 0}

    def add(self, text: str | None) -> int:
        if text is None:
            return STR_NONE
        offset = self._index.get(text)
        if offset is None:
            offset = self._index[text] = len(self.data)
            self.data += text.encode("utf-8") + b"\0"
        return offset
