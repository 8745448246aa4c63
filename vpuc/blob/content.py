"""The blob's content as flat records: what both formats hold, field for field.

A ``BlobContent`` is the Program with every reference turned into an index
(tensors, barriers, kernels) and every enum into its schema code.  The writers
encode it (``writer_fb``, ``writer_elf``), the readers decode it back, and
``vpuc.blob.rebuild`` checks it and builds the Program.  Records hold only
ints, floats, strings, bytes, None and tuples, so two contents compare with
``==`` and hash the same way whichever format they came from.

Enum codes are the generated schema enums' values, looked up by the IR enum
member's name (the schema spells them the same), so the schema is the one
source of the numbering.

``content_hash`` is the hash blobs of format 1.0 to 1.2 carry: SHA-256 over the
compact JSON of the records, with each byte string replaced by the hex SHA-256
of its bytes (docs/blob-format.md, "Content hash"); since 1.3 a blob carries the
hash of its own bytes (``vpuc.blob.sealing``).
"""

from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

from schema.vpu_blob.ConstInitKind import ConstInitKind
from schema.vpu_blob.DataType import DataType as FbDataType
from schema.vpu_blob.DmaMode import DmaMode as FbDmaMode
from schema.vpu_blob.DpuOp import DpuOp as FbDpuOp
from schema.vpu_blob.Executor import Executor as FbExecutor
from schema.vpu_blob.KernelSourceKind import KernelSourceKind as FbKernelSourceKind
from schema.vpu_blob.MemoryLocation import MemoryLocation
from schema.vpu_blob.PostOpKind import PostOpKind as FbPostOpKind
from schema.vpu_blob.MpeMode import MpeMode as FbMpeMode
from schema.vpu_blob.VersionMajor import VersionMajor
from schema.vpu_blob.VersionMinor import VersionMinor
from vpuc.abi.dtypes import data_type
from vpuc.cost.modes import MODE_NAMES
from vpuc.ir.module import BufferKind, KernelSourceKind
from vpuc.ir.tasks import DmaMode, DpuOp, Executor, PostOpKind
from vpuc.ir.types import ElemType

FORMAT_VERSION = (VersionMajor.Current, VersionMinor.Current)
NONE_INDEX = -1


def _codes(ir_enum, fb_enum) -> tuple[dict, dict]:
    to_code = {member: getattr(fb_enum, member.name) for member in ir_enum}
    return to_code, {code: member for member, code in to_code.items()}


LOCATION_CODE, LOCATION_OF = _codes(BufferKind, MemoryLocation)
EXECUTOR_CODE, EXECUTOR_OF = _codes(Executor, FbExecutor)
DMA_MODE_CODE, DMA_MODE_OF = _codes(DmaMode, FbDmaMode)
DPU_OP_CODE, DPU_OP_OF = _codes(DpuOp, FbDpuOp)
POST_OP_CODE, POST_OP_OF = _codes(PostOpKind, FbPostOpKind)
SOURCE_KIND_CODE, SOURCE_KIND_OF = _codes(KernelSourceKind, FbKernelSourceKind)
INIT_VALUES, INIT_SPLAT, INIT_FILE = ConstInitKind.VALUES, ConstInitKind.SPLAT, ConstInitKind.FILE
# Element types: the ABI's dataType codes (the schema's DataType spells them the same).
ELEM_CODE = {e: getattr(FbDataType, data_type(e.value).code.name) for e in ElemType}
ELEM_OF = {code: e for e, code in ELEM_CODE.items()}
# DPU execution modes by name (vpuc/cost/modes.py); None is UNSET.
MPE_MODE_CODE = {name: getattr(FbMpeMode, name) for name in MODE_NAMES}
MPE_MODE_CODE[None] = FbMpeMode.UNSET
MPE_MODE_OF = {code: name for name, code in MPE_MODE_CODE.items() if name is not None}


class KeyValue(NamedTuple):
    key: str
    value: str


class ArchRec(NamedTuple):
    name: str
    version: int
    tiles: int
    cmx_bytes: int
    act_shaves_per_tile: int
    dpus_per_tile: int
    dma_channels: int
    barriers: int
    max_producers: int
    max_consumers: int
    window_size: int
    win_d_base: int
    win_e_base: int
    win_f_base: int


class TaskCounts(NamedTuple):
    dma: int
    dpu: int
    dpu_variants: int
    act_kernel: int
    barriers: int
    tensors: int
    kernels: int


class HeaderRec(NamedTuple):
    module_name: str
    arch: ArchRec
    network_inputs: tuple[int, ...]
    network_outputs: tuple[int, ...]
    task_counts: TaskCounts
    compiler_version: str
    options: tuple[KeyValue, ...]
    provenance: tuple[KeyValue, ...]
    attributes: tuple[KeyValue, ...]
    module_arch: str              # the module's own 'arch' (Program.arch may be an override)


class Number(NamedTuple):
    is_int: int
    value: int | float


class ConstInitRec(NamedTuple):
    kind: int
    values: tuple[Number, ...]
    path: str | None


class SliceRec(NamedTuple):
    start: int
    stop: int
    step: int


class TensorRec(NamedTuple):
    name: str
    location: int
    tile: int                      # -1: none
    offset: int                    # -1: not placed
    data_offset: int
    dims: tuple[int, ...]
    dynamic_dims: tuple[int, ...]  # 0/1 per dim; () when all static
    strides: tuple[int, ...]       # bits
    data_type: int
    dims_order: tuple[int, ...]
    base: int                      # -1: a buffer
    slices: tuple[SliceRec, ...]
    const_init: ConstInitRec | None


class BarrierRec(NamedTuple):
    id: int
    physical_id: int               # -1: virtual
    name: str
    producer_count: int
    consumer_count: int


class DmaRec(NamedTuple):
    label: str | None
    src: int
    dst: int
    channel: int
    mode: int
    waits: tuple[int, ...]
    updates: tuple[int, ...]


class PostOpRec(NamedTuple):
    kind: int
    params: tuple[float, ...]


class VariantRec(NamedTuple):
    label: str | None
    start: tuple[int, int, int]
    end: tuple[int, int, int]
    waits: tuple[int, ...]
    updates: tuple[int, ...]
    mode: int = 0                  # MpeMode code; 0: unset


class DpuRec(NamedTuple):
    label: str | None
    op: int
    tile: int
    inputs: tuple[int, ...]
    output: int
    weights: int                   # -1: none
    bias: int                      # -1: none
    kernel: tuple[int, ...] | None
    stride: tuple[int, ...] | None
    pad: tuple[int, ...] | None
    dilation: tuple[int, ...] | None
    post_op: PostOpRec | None
    waits: tuple[int, ...]
    updates: tuple[int, ...]
    variants: tuple[VariantRec, ...]
    mode: int = 0                  # MpeMode code; 0: unset
    odu_cast: tuple[int, ...] = ()  # the output's copies on other tiles (format 1.5)
    quant_scale: int = -1          # the integer mode's scale table (format 1.6); -1: none
    in_zero_point: int = 0
    out_zero_point: int = 0


class BindingRec(NamedTuple):
    tensor: int
    alias: str


class ScalarRec(NamedTuple):
    name: str
    data_type: int
    value: Number


class InvocationRec(NamedTuple):
    window: bytes                  # the WIN_E image
    args_offset: int
    args_size: int


class ActTaskRec(NamedTuple):
    label: str | None
    kernel: int
    tile: int
    inputs: tuple[BindingRec, ...]
    outputs: tuple[BindingRec, ...]
    scalars: tuple[ScalarRec, ...]
    run_args: tuple[str, ...]
    invocation: InvocationRec | None
    waits: tuple[int, ...]
    updates: tuple[int, ...]


class TaskListRec(NamedTuple):
    executor: int
    tasks: tuple


class ParamRec(NamedTuple):
    name: str
    is_memref: int
    data_type: int
    dims: tuple[int, ...] | None   # memrefs: -1 for '?'; None: any rank


class KernelImageRec(NamedTuple):
    origin: str
    text: bytes
    rodata: bytes
    data: bytes
    elf: bytes
    entry: int
    rodata_offset: int


class KernelRec(NamedTuple):
    name: str
    source_kind: int
    source_ref: str
    params: tuple[ParamRec, ...]
    image: KernelImageRec | None
    image_kernel: int              # Program.kernel_aliases: the kernel whose image it uses; -1


class RuntimeRec(NamedTuple):
    kernel: int
    stack_sizes: tuple[int, ...]


class ConstantRec(NamedTuple):
    tensor: int
    data: bytes


class OnnxNodeRec(NamedTuple):
    name: str
    op_type: str


class LayerSourceRec(NamedTuple):
    key: str
    nodes: tuple[OnnxNodeRec, ...]


class BlobContent(NamedTuple):
    header: HeaderRec
    tensors: tuple[TensorRec, ...]
    barriers: tuple[BarrierRec, ...]
    task_lists: tuple[TaskListRec, ...]
    kernels: tuple[KernelRec, ...]
    runtime: RuntimeRec | None
    constants: tuple[ConstantRec, ...]
    layer_sources: tuple[LayerSourceRec, ...] = ()     # 1.2: the layer table (provenance)


def image_of(kernels: tuple[KernelRec, ...], index: int) -> KernelImageRec | None:
    """The image kernel ``index`` runs: its own, or the one dedupe-kernels kept."""
    k = kernels[index]
    if k.image is None and 0 <= k.image_kernel < len(kernels):
        return kernels[k.image_kernel].image
    return k.image


def _digest_bytes(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    raise TypeError(f"blob content holds a {type(value).__name__}")


def content_hash(content: BlobContent) -> bytes:
    """SHA-256 of the records (the hash of blobs before 1.3): the same for both formats of
    one program.  A content without a layer table hashes as in format 1.1."""
    # task lists, barriers and tensors a reader keeps as columns (``record_table``) hash as the
    # tuples they equal
    content = content._replace(task_lists=tuple(TaskListRec(tl.executor, tuple(tl.tasks))
                                                for tl in content.task_lists),
                               barriers=tuple(content.barriers),
                               tensors=tuple(content.tensors))
    records = tuple(content) if content.layer_sources else tuple(content)[:-1]
    text = json.dumps(records, default=_digest_bytes, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).digest()
