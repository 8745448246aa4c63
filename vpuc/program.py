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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vpuc.arch import Arch
from vpuc.ir.module import Module

if TYPE_CHECKING:
    from vpuc.ir.graph import Graph
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


@dataclass
class InvocationImage:
    task_index: int      # position in the ACT_SHAVE task list
    kernel: str
    tile: int
    window_e: bytes      # what WIN_E maps for this invocation
    args_offset: int     # params struct, from the WIN_E base
    args_size: int       # sizeof(params): the runtime passes (argsAddr, argsSize)


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
    invocations: list[InvocationImage] = field(default_factory=list)
    constants: dict[str, bytes] = field(default_factory=dict)
    # Declared kernel → the kernel image it uses (dedupe-kernels merges identical code).
    kernel_aliases: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    # The graph the program was lowered from, when compiled in this process (not in the
    # blob): what ``vpuc run --reference`` checks each layer against (runtime_sim/layer_check).
    source_graph: Graph | None = field(default=None, compare=False, repr=False)
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
