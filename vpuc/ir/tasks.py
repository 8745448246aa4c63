"""Tasks and task lists: what the DMA, DPU and ACT SHAVE executors run.

Scheduling follows the Software Layers HLD: every task (and every DPU *variant*, which the
runtime schedules on its own) waits on some barriers and updates others.  A DPU
task may also list barriers at task level; they apply to each of its variants.
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass, field
from enum import Enum

from vpuc.diagnostics import UNKNOWN_LOC, Loc
from vpuc.ir.types import ElemType


def _loc() -> Loc:
    return field(default=UNKNOWN_LOC, compare=False, repr=False)


class Executor(Enum):
    DMA = "DMA"
    DPU = "DPU"
    ACT_SHAVE = "ACT_SHAVE"

    def __str__(self) -> str:
        return self.value


class DmaMode(Enum):
    COPY = "copy"         # same element type and byte size (strides may differ)
    CONVERT = "convert"   # element type conversion (e.g. f32 -> f16)
    PERMUTE = "permute"   # same data, other dims order (e.g. NCHW -> NHWC)

    def __str__(self) -> str:
        return self.value


class DpuOp(Enum):
    CONV = "conv"
    DWCONV = "dwconv"
    MATMUL = "matmul"     # also fully connected
    ADD = "add"
    MUL = "mul"
    MAXPOOL = "maxpool"
    AVGPOOL = "avgpool"
    # NCE permute: the input copied into the output's dims order, its channels zero-padded
    # to the output's (the NPU compiler's NCEPermute, an ELTWISE workload whose output data
    # unit writes another order; docs/vir.md, DPU tasks)
    PERMUTE = "permute"

    def __str__(self) -> str:
        return self.value

    @property
    def num_inputs(self) -> int:
        return 2 if self in (DpuOp.ADD, DpuOp.MUL) else 1

    @property
    def has_weights(self) -> bool:
        return self in (DpuOp.CONV, DpuOp.DWCONV, DpuOp.MATMUL)

    @property
    def has_window(self) -> bool:
        """Whether kernel/stride/pad/dilation apply."""
        return self in (DpuOp.CONV, DpuOp.DWCONV, DpuOp.MAXPOOL, DpuOp.AVGPOOL)


class PostOpKind(Enum):
    RELU = "relu"
    LRELU = "lrelu"       # one param: negative slope
    CLAMP = "clamp"       # two params: min, max
    SIGMOID = "sigmoid"
    TANH = "tanh"

    def __str__(self) -> str:
        return self.value


POST_OP_ARITY = {PostOpKind.RELU: 0, PostOpKind.LRELU: 1, PostOpKind.CLAMP: 2,
                 PostOpKind.SIGMOID: 0, PostOpKind.TANH: 0}


@dataclass(slots=True)
class PostOp:
    kind: PostOpKind
    params: tuple[float, ...] = ()
    loc: Loc = _loc()


@dataclass(slots=True)
class DpuQuant:
    """The DPU's integer mode (``quant scale(%s) zero_point(zx, zy)``, docs/vir.md): u8/i8
    activations times i8 weights summed exactly in int32, the input's zero point as the
    value of padded cells, the i32 bias (the input zero point already folded into it), then
    the PPE's per-output-channel requantization by ``scale``: i32 ``[C, 2]`` rows (mult,
    shift) to a u8/i8 output with ``out_zero_point``, or f32 ``[C]`` to an f16 output."""

    scale: str
    in_zero_point: int
    out_zero_point: int
    loc: Loc = _loc()


@dataclass(slots=True)
class Task:
    """Common scheduling information (``VPURT.Task``)."""

    label: str | None
    waits: tuple[str, ...]
    updates: tuple[str, ...]


@dataclass(slots=True)
class DmaTask(Task):
    src: str
    dst: str
    channel: int = 0
    mode: DmaMode = DmaMode.COPY
    loc: Loc = _loc()


@dataclass(slots=True)
class DpuVariant:
    """One workload: an output cuboid, inclusive ``start``..``end`` over (x=W, y=H, z=C)."""

    label: str | None
    start: tuple[int, int, int]
    end: tuple[int, int, int]
    waits: tuple[str, ...] = ()
    updates: tuple[str, ...] = ()
    loc: Loc = _loc()
    mode: str | None = None       # execution mode (vpuc.cost.modes); None: the task's, else chosen


@dataclass(slots=True)
class DpuTask(Task):
    op: DpuOp
    tile: int
    inputs: tuple[str, ...]
    output: str
    weights: str | None = None
    bias: str | None = None
    kernel: tuple[int, ...] | None = None
    stride: tuple[int, ...] | None = None
    pad: tuple[int, ...] | None = None        # top, bottom, left, right
    dilation: tuple[int, ...] | None = None
    post: PostOp | None = None
    variants: list[DpuVariant] = field(default_factory=list)
    loc: Loc = _loc()
    mode: str | None = None       # execution mode of variants that do not pin their own
    # The same output written also into the CMX of other tiles, one buffer or view each
    # (`out(%y0, %y1)`): the NPU compiler's DUPLICATED|SEGMENTED output of a SplitOverKernel
    # layer, whose per-cluster NCE task writes its channel segment into every cluster's CMX
    # (openvinotoolkit/npu_plugin, tests/lit/NPU/dialect/VPUIP/passes/
    # unroll_cluster_tiling_sok_37XX.mlir, @UnrollNCE: outputs on [@CMX_NN, [0, 1]]).
    broadcast_outputs: tuple[str, ...] = ()
    quant: DpuQuant | None = None   # the integer mode; None: the float datapath
    # Where each of kernel/stride/pad/dilation was written, for diagnostics.
    param_locs: dict[str, Loc] = field(default_factory=dict, compare=False, repr=False)


@dataclass(slots=True)
class ScalarConst:
    """A scalar constant inside a SW kernel's region: ``%minVal = const 0.0 : f16``."""

    name: str
    value: float | int
    elem: ElemType
    loc: Loc = _loc()


@dataclass(slots=True)
class Binding:
    """``%buffer as %arg``: maps an outer buffer to a name of the inner region."""

    buffer: str
    alias: str


@dataclass(slots=True)
class SwKernelTask(Task):
    """``VPUIP.SW.Kernel``: one ACT SHAVE kernel invocation on a tile."""

    kernel: str
    tile: int
    inputs: tuple[Binding, ...]
    outputs: tuple[Binding, ...]
    consts: tuple[ScalarConst, ...]
    run_args: tuple[str, ...]
    run_loc: Loc = _loc()
    loc: Loc = _loc()


AnyTask = DmaTask | DpuTask | SwKernelTask


@dataclass(slots=True)
class TaskList:
    executor: Executor
    tasks: list[AnyTask] = field(default_factory=list)
    loc: Loc = _loc()


def copy_task_list(task_list: TaskList) -> TaskList:
    """A copy whose tasks (and a DPU task's variants) are new objects, what a scheduling
    step changes (waits, updates, channels, sources, order); the tuples they hold shared."""
    tasks = []
    for task in task_list.tasks:
        twin = copy(task)
        if isinstance(task, DpuTask):
            twin.variants = [copy(v) for v in task.variants]
        tasks.append(twin)
    return TaskList(task_list.executor, tasks, task_list.loc)
