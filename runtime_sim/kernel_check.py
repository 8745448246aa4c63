"""Generated kernels checked against the graphs their objects record (``vpuc run --reference``).

A kernel from the fusion pipeline records the subgraph body it computes in its
ELF object (``KernelImage.graph``; ``vpuc.fusion.generator.kernel_graph``), so
a blob alone says what each fused kernel should compute.  The compiler's side
parses those bodies and computes each kernel's tolerance (``vpuc.api.simulate``:
``kernel_graph.load_graphs``, ``kernel_tolerance``): the simulator never
imports the parser or the fusion pipeline.  ``KernelCheck`` is
the ACT SHAVE engine's observer: for every task that runs such a kernel,

1. before the kernel runs, it decodes the invocation's params struct (in its
   WIN_E image) with the generated contract -- one ``MemRefData`` per input,
   then one per output -- and copies every input tensor out of simulated memory
   (``dataAddr`` in WIN_F, the tile's CMX; dims and strides in WIN_E, or next to
   a dynamic tensor in WIN_F), in its logical shape;
2. after it ran, it reads the outputs the same way (a dynamic output with the
   dims the kernel wrote), runs ``vpuc.reference.graph.run_graph`` on the
   inputs, bound to the body's Parameters in order, and compares each Result
   with its output: bit for bit (NaN equal to NaN), or within the tolerance the
   generator's tests allow where the kernel legitimately differs (documented
   approximations; FMA contraction): the ``tolerances`` it is given.
   ``--rtol`` / ``--atol`` override it.

Mismatches are collected, not raised: the run goes on and ``cli_run`` prints
each (task, kernel, output, worst element) and how many tasks were checked.
A recorded graph that does not parse, or whose contract is not the kernel's,
stops the run before it starts (``kernel_graph.load_graphs``), naming the
kernel and section.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from runtime_sim.inputs import compare
from runtime_sim.memory import Memory
from vpuc.abi.contract import contract_slots
from vpuc.abi.dtypes import data_type, dims_order_permutation
from vpuc.abi.memref import MemRefData, unpack_dims, unpack_strides
from vpuc.abi.params import decode_params
from vpuc.diagnostics import VpucError
from vpuc.ir.graph import Graph
from vpuc.ir.tasks import Executor
from vpuc.program import InvocationImage, Program
from vpuc.reference.graph import run_graph

MAX_DIMS = 15
AGAINST = "the recorded graph"


def tensor_in_memory(memref: MemRefData, invocation: InvocationImage, cmx: np.ndarray,
                     win_e: int, win_f: int) -> np.ndarray:
    """A view, in logical shape, of the tensor a MemRefData describes (data in WIN_F)."""
    dtype = data_type(memref.dataType).numpy
    if dtype is None:
        raise VpucError(f"dataType {memref.dataType} has no storage type in the simulator")
    if memref.numDims > MAX_DIMS:
        raise VpucError(f"numDims is {memref.numDims}; at most {MAX_DIMS}")
    perm = dims_order_permutation(memref.dimsOrder) if memref.numDims else ()
    if len(perm) != memref.numDims:
        raise VpucError(f"dimsOrder {memref.dimsOrder:#x} has {len(perm)} dims, numDims is "
                        f"{memref.numDims}")
    meta, base = (invocation.window_e, win_e) if memref.isStatic else (cmx, win_f)
    dims = unpack_dims(meta, memref.numDims, memref.dimsAddr - base)
    strides = unpack_strides(meta, memref.numDims, memref.stridesAddr - base)
    if any(d < 0 for d in dims) or any(s < 0 or s % 8 for s in strides):
        raise VpucError(f"dims {dims} / strides in bits {strides} (innermost first) are not "
                        "non-negative dims and whole non-negative byte strides")
    shape = tuple(reversed(dims))                       # memory order, outermost first
    byte_strides = tuple(s // 8 for s in reversed(strides))
    start = memref.dataAddr - win_f
    last = start + sum((n - 1) * s for n, s in zip(shape, byte_strides)) + dtype.itemsize
    if start < 0 or (min(shape, default=1) > 0 and last > len(cmx)):
        raise VpucError(f"dataAddr {memref.dataAddr:#x} ({'x'.join(map(str, dims[::-1]))} "
                        f"elements) lies outside the tile's CMX (WIN_F {win_f:#x}, "
                        f"{len(cmx)} bytes in use)")
    array = np.ndarray(shape, dtype, buffer=cmx, offset=start, strides=byte_strides)
    return array.transpose(np.argsort(perm)) if perm else array


@dataclass
class _Kernel:
    name: str
    graph: Graph
    slots: list
    tolerance: tuple[float, float] | None


@dataclass
class Mismatch:
    task: str
    kernel: str
    tile: int
    message: str            # one line: the output, the count and the worst element

    def render(self) -> str:
        return f"task {self.task} (@{self.kernel} on tile {self.tile}): {self.message}"


@dataclass
class KernelCheck:
    """The ACT SHAVE engine's observer; see the module docstring."""

    program: Program
    graphs: dict[str, Graph]
    # (rtol, atol) per kernel within which it matches run_graph(body), None: bit for bit
    tolerances: dict[str, tuple[float, float] | None]
    rtol: float | None = None
    atol: float | None = None
    checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    worst: float = 0.0
    kernels_run: set = field(default_factory=set)

    def __post_init__(self) -> None:
        module = self.program.module
        decls = {k.name: k for k in module.kernels}
        act = next((tl for tl in module.task_lists if tl.executor is Executor.ACT_SHAVE), None)
        self._tasks = act.tasks if act is not None else []
        self._kernels = {name: _Kernel(name, graph, contract_slots(decls[name]),
                                       self.tolerances.get(name))
                         for name, graph in self.graphs.items()}
        arch = self.program.arch
        self._win_e, self._win_f = arch.window_base("WIN_E"), arch.window_base("WIN_F")

    def _kernel(self, invocation: InvocationImage) -> _Kernel | None:
        if 0 <= invocation.task_index < len(self._tasks):
            return self._kernels.get(self._tasks[invocation.task_index].kernel)
        return None

    def _tensors(self, invocation, memory: Memory, kernel: _Kernel, outputs: bool):
        struct = invocation.window_e[invocation.args_offset:
                                     invocation.args_offset + invocation.args_size]
        memrefs = [v for _, v in decode_params(kernel.slots, struct)]
        count = len(kernel.graph.parameters)
        chosen = memrefs[count:] if outputs else memrefs[:count]
        cmx = memory.cmx(invocation.tile)
        views = []
        for slot, memref in zip(kernel.slots[count:] if outputs else kernel.slots, chosen):
            try:
                views.append(tensor_in_memory(memref, invocation, cmx, self._win_e, self._win_f))
            except VpucError as exc:
                raise VpucError(f"MemRefData of %{slot.name}: {exc.diagnostics[0].message}") \
                    from None
        return views

    def before(self, invocation: InvocationImage, memory: Memory):
        """The inputs' values before the kernel runs (it may write an output over an input)."""
        kernel = self._kernel(invocation)
        if kernel is None:
            return None
        try:
            return kernel, [np.array(v) for v in self._tensors(invocation, memory, kernel, False)]
        except VpucError as exc:
            return kernel, exc.diagnostics[0].message

    def after(self, invocation: InvocationImage, memory: Memory, state, task: str) -> None:
        kernel, inputs = state
        self.checked += 1
        self.kernels_run.add(kernel.name)

        def fail(message: str) -> None:
            self.mismatches.append(Mismatch(task, kernel.name, invocation.tile, message))

        if isinstance(inputs, str):
            return fail(f"cannot read the inputs: {inputs}")
        try:
            outputs = self._tensors(invocation, memory, kernel, True)
        except VpucError as exc:
            return fail(f"cannot read the outputs: {exc.diagnostics[0].message}")
        try:
            expected = run_graph(kernel.graph, {p.result: x for p, x in
                                                zip(kernel.graph.parameters, inputs)})
        except VpucError as exc:
            return fail(f"the recorded graph cannot run on the inputs: "
                        f"{exc.diagnostics[0].message}")
        rtol, atol = kernel.tolerance or (0.0, 0.0)
        rtol = rtol if self.rtol is None else self.rtol
        atol = atol if self.atol is None else self.atol
        sw = self._tasks[invocation.task_index]      # names each output by its buffer
        buffers = {b.alias: b.buffer for b in sw.inputs + sw.outputs}
        args = list(sw.run_args)[len(inputs):]
        for i, (slot, got, want) in enumerate(zip(kernel.slots[len(inputs):], outputs,
                                                  expected)):
            name = f"{buffers.get(args[i], '?') if i < len(args) else '?'} ({slot.name})"
            ok, line = compare(name, got, want, rtol, atol, AGAINST)
            if not ok:
                fail(line)
            elif got.size:
                with np.errstate(invalid="ignore"):
                    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
                finite = diff[np.isfinite(diff)]
                self.worst = max(self.worst, float(finite.max()) if finite.size else 0.0)

    def summary(self) -> str:
        """One line: how many tasks were checked (of how many kernels), and the verdict."""
        kernels = len(self.kernels_run)
        what = (f"generated kernels: {self.checked:,} ACT SHAVE task"
                f"{'s' if self.checked != 1 else ''} checked against the graph their kernel "
                f"records ({kernels} kernel{'s' if kernels != 1 else ''})")
        bad = len({m.task for m in self.mismatches})
        if bad:
            return f"{what}: {bad:,} of {self.checked:,} differ"
        return f"{what}: all match (max |diff| {self.worst:.6g})"
