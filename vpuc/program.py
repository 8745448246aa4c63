"""The compiled program: the module after the passes, with every decision made.

This is the *program* level of OpenVINO's GPU graph design.  It holds the final module (CMX offsets,
physical barriers) plus what the passes derived for ACT SHAVE kernels:

- one ``KernelImage`` per kernel function (the blob's ``ActKernel`` and its
  ``KernelData``), linked for its window, however many invocations it has;
- one ``InvocationImage`` per ACT SHAVE task (``ActKernelInvocation``): the
  bytes its WIN_E window maps, with the packed params at ``args_offset``.

Windows (see docs/shave-isa.md, "ABI"): like the NPU runtime's
``textWindowBase`` / ``dataWindowBase``, the runtime points WIN_D at the
invoked kernel's code and WIN_E at the invocation's data before each call, and
WIN_F at the tile's CMX.  So every kernel is linked once, with ``.text`` at
WIN_D + 0, ``.rodata`` after it and ``.data`` at WIN_E + 0; each invocation's
WIN_E image is ``[.data copy][params][dims][strides]``.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from vpuc.arch import Arch
from vpuc.ir.module import Module

if TYPE_CHECKING:
    from vpuc.ir.graph import Graph
    from vpuc.ir.types import TensorType
    from vpuc.shave import KernelObject
    from vpuc.shave.kernel_notes import ExprTags
    from vpuc.task_tables import TaskTables


@dataclass
class KernelImage:
    name: str            # the kernel symbol (@name)
    origin: str          # where the code came from: 'library "clamp"', 'asm "k.s"', ...
    elf: bytes           # the kernel object as built (the blob's KernelData)
    text: bytes          # .text, relocated for WIN_D
    rodata: bytes        # .rodata, relocated, at WIN_D + rodata_offset
    data: bytes          # .data template, copied into each invocation's WIN_E image
    entry: int           # entry point offset in .text
    rodata_offset: int   # from the WIN_D base
    # A generated kernel's record of what it computes: the subgraph body as VIR text, from
    # its kernel object's .note.vpuc.graph (vpuc.fusion.generator.kernel_graph); else None.
    graph: str | None = None
    # ... and the LIR expression each .text instruction came from (``ExprTags``, run-length;
    # vpuc.shave.kernel_notes), from the same section; else None.
    tags: ExprTags | None = None
    # (elf, the KernelObject it was written from) when this process built ``elf`` (the
    # compiler's assign-windows): reading ``elf`` back gives that object again (a test
    # checks the library's and the zoo's kernels), so a simulation takes it instead of
    # parsing the ELF (``runtime_sim.engines.shave``), while ``elf`` is still those bytes.
    # None for an image read from a blob.  Not part of the image's value.
    built: tuple[bytes, KernelObject] | None = field(default=None, compare=False, repr=False)


@dataclass
class InvocationImage:
    task_index: int      # position in the ACT_SHAVE task list
    kernel: str
    tile: int
    window_e: bytes      # what WIN_E maps for this invocation
    args_offset: int     # params struct, from the WIN_E base
    args_size: int       # sizeof(params): the runtime passes (argsAddr, argsSize)


class InvocationRow(NamedTuple):
    """An ``InvocationImage``'s fields as a tuple (made in C, a row of an
    ``InvocationTable``): what a simulation's plan reads of each ACT SHAVE task."""

    task_index: int
    kernel: str
    tile: int
    window_e: bytes
    args_offset: int
    args_size: int

    def __eq__(self, other) -> bool:        # equal to the image it stands for
        if isinstance(other, InvocationImage):
            return tuple(self) == (other.task_index, other.kernel, other.tile, other.window_e,
                                   other.args_offset, other.args_size)
        return tuple.__eq__(self, other)

    def __ne__(self, other) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


class InvocationTable(MutableSequence):
    """A program read from a blob: its invocation images kept as columns (one entry per
    image, ``InvocationImage``'s fields), an ``InvocationImage`` made only when one is
    asked for (printing, inspect, writing, equality); a simulation's plan reads the rows
    (``by_task``).  Changed like a list: it becomes one first."""

    def __init__(self, columns: tuple[list, ...]) -> None:
        self._columns: tuple[list, ...] | None = columns     # InvocationImage field order
        self._items: list[InvocationImage] | None = None

    def _list(self) -> list[InvocationImage]:
        if self._items is None:
            self._items = list(map(InvocationImage, *self._columns))
            self._columns = None
        return self._items

    def by_task(self, tasks: int) -> list:
        """Each of the first ``tasks`` ACT SHAVE tasks' invocation (an ``InvocationRow``
        while the columns stand, else the image), None for a task without one."""
        out = [None] * tasks
        if self._columns is None:
            rows = [inv for inv in self._items if inv.task_index < tasks]
        else:
            rows = map(partial(tuple.__new__, InvocationRow), zip(*self._columns))
        for row in rows:
            if row.task_index < tasks:
                out[row.task_index] = row
        return out

    def __len__(self) -> int:
        return len(self._columns[0]) if self._columns is not None else len(self._items)

    def __getitem__(self, index):
        if self._columns is None:
            return self._items[index]
        if isinstance(index, slice):
            return [InvocationImage(*row) for row in zip(*(c[index] for c in self._columns))]
        return InvocationImage(*(c[index] for c in self._columns))

    def __iter__(self):
        if self._columns is None:
            return iter(self._items)
        return map(InvocationImage, *self._columns)

    def __setitem__(self, index, value) -> None:
        self._list()[index] = value

    def __delitem__(self, index) -> None:
        del self._list()[index]

    def insert(self, index: int, value) -> None:
        self._list().insert(index, value)

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, InvocationTable)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass
class Program:
    """Everything a blob holds.

    ``module`` is final: every CMX buffer has an offset and every barrier a
    physical id, with ``module.barriers`` listed so that the virtual barriers
    sharing one physical id appear in the order the runtime reuses it.
    ``constants`` maps each const buffer to its bytes in memory order (dims
    order applied), ready to be copied to DDR.
    """

    module: Module
    arch: Arch
    kernels: dict[str, KernelImage] = field(default_factory=dict)
    # A list; read from a blob, an ``InvocationTable`` (its images made when asked).
    invocations: list[InvocationImage] | InvocationTable = field(default_factory=list)
    constants: dict[str, bytes] = field(default_factory=dict)
    # Declared kernel → the kernel image it uses (dedupe-kernels merges identical code).
    kernel_aliases: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    # The graph the program was lowered from, when compiled in this process (not in the
    # blob): what ``vpuc run --reference`` checks each layer against (runtime_sim/layer_check).
    source_graph: Graph | None = field(default=None, compare=False, repr=False)
    # Compiled from ONNX in this process: each ONNX input and output name -> the program's
    # buffer name, which spells it as VIR allows ('gpu_0/data_0' -> 'gpu_0_data_0'), so
    # ``vpuc run --input``, ``--output`` and ``--expected`` take the model's own names.
    source_names: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # Outputs of an ONNX model with a dim of 0 (a Slice that selects nothing): no task
    # writes them and the blob has no tensor of size 0, so the program records each one's
    # name and type (the blob's header: vpuc/blob/empty_outputs.py) and a simulation
    # returns an empty array of it beside the outputs the program writes.
    empty_outputs: dict[str, TensorType] = field(default_factory=dict)
    # Read from a blob: the task lists as numpy columns (vpuc/task_tables.py), what a
    # timing-only simulation reads while the module's task lists are not built.
    tables: TaskTables | None = field(default=None, compare=False, repr=False)

    @property
    def layers(self) -> list:
        """The layer table: the ONNX nodes behind each layer's tasks (``Module.layers``,
        vpuc/ir/provenance.py; empty for a program without provenance)."""
        return self.module.layers

    def kernel_image(self, declared: str) -> KernelImage:
        return self.kernels[self.kernel_aliases.get(declared, declared)]
