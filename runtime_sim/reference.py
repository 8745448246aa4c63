"""The expected outputs of a program, computed with numpy op by op (``vpuc run --reference``).

Every buffer is a numpy array of its logical shape; views are numpy slices of
their base.  Units run one at a time in a topological order of the schedule
(any order the barriers allow gives the same result in a race-free program):
DMA copies, permutes and converts; each DPU variant computes the whole op with
the straightforward references of ``reference_ops`` and keeps its own output
box; library kernels use the table of ``kernel_refs``; generated (fused)
kernels run the subgraph body their object records, with
``vpuc.reference.graph.run_graph`` (the parsed bodies come from the caller:
``vpuc.api.simulate`` reads them with ``kernel_graph.load_graphs``).
Nothing here reads the simulator's memory, engines or cycle model.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from runtime_sim.engines.dma import convert
from runtime_sim.kernel_refs import PARTIAL_OUTPUT, REFERENCES, library_reference
from runtime_sim.memory import numpy_dtype
from runtime_sim.network import constant_value
from runtime_sim.reference_ops import dpu_op, integer_dpu_op
from vpuc.analysis.schedule import Schedule
from vpuc.diagnostics import VpucError
from vpuc.reference.graph import run_graph
from vpuc.ir.graph import Graph
from vpuc.ir.module import BufferKind, KernelSourceKind
from vpuc.ir.tasks import DmaMode, DmaTask, DpuOp, DpuTask, SwKernelTask
from vpuc.kernel_contracts import library_contract
from vpuc.program import Program


def _compute_type(*arrays: np.ndarray) -> type:
    return np.float64 if any(a.dtype == np.float64 for a in arrays) else np.float32


class Reference:
    def __init__(self, program: Program, extra: dict[str, Callable] | None = None,
                 graphs: dict[str, Graph] | None = None) -> None:
        """``extra`` adds references for kernels by kernel symbol (e.g. asm test kernels);
        ``graphs`` are the generated kernels' recorded bodies, by kernel name
        (``vpuc.fusion.generator.kernel_graph.load_graphs``); a generated kernel without
        one is an error when it runs."""
        self.program = program
        self.module = program.module
        self.extra = extra or {}
        self.graphs = graphs or {}
        self.views = {v.name: v for v in self.module.views}
        self.kernels = {k.name: k for k in self.module.kernels}
        self.arrays: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------ storage
    def array(self, name: str) -> np.ndarray:
        """A buffer's array, or a view's slice of its base (a numpy view)."""
        if name in self.arrays:
            return self.arrays[name]
        view = self.views[name]
        base = self.array(view.base)
        index = tuple(slice(s.start, size if s.stop == -1 else s.stop, s.step)
                      for s, size in zip(view.slices, base.shape))
        return base[index]

    def _root(self, name: str):
        while name in self.views:
            name = self.views[name].base
        return next(b for b in self.module.buffers if b.name == name)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for buffer in self.module.buffers:
            dtype = numpy_dtype(buffer.type.elem)
            if buffer.kind is BufferKind.INPUT:
                self.arrays[buffer.name] = np.asarray(inputs[buffer.name]).astype(dtype)
            elif buffer.kind is BufferKind.CONST:
                self.arrays[buffer.name] = constant_value(self.program, buffer)
            else:
                self.arrays[buffer.name] = np.zeros(buffer.type.bound_shape, dtype)
        schedule = Schedule(self.module, self.program.arch)
        if schedule.cycle_nodes:
            raise VpucError("--reference: the barriers form a cycle, so there is no order to "
                            "run the tasks in")
        n = len(schedule.units)
        for node in schedule.order:
            if node < 2 * n and node % 2 == 0:
                unit = schedule.units[node // 2]
                self._unit(unit.task, unit.variant, unit.name)
        return {b.name: self.arrays[b.name].copy() for b in self.module.buffers
                if b.kind is BufferKind.OUTPUT}

    # ------------------------------------------------------------ units
    def _unit(self, task, variant: int | None, name: str) -> None:
        if isinstance(task, DmaTask):
            self._dma(task)
        elif isinstance(task, DpuTask):
            self._dpu(task, variant)
        elif isinstance(task, SwKernelTask):
            self._kernel(task, name)

    def _set_dynamic(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Give a dynamic root buffer its actual dims (a fresh array of that shape)."""
        root = self._root(name)
        if root.type.is_static:
            return self.array(name)
        self.arrays[root.name] = np.zeros(shape, self.arrays[root.name].dtype)
        return self.arrays[root.name]

    def _dma(self, task: DmaTask) -> None:
        src = self.array(task.src)
        dst = self._set_dynamic(task.dst, src.shape)
        src_order = self._root(task.src).type.order.perm
        dst_order = self._root(task.dst).type.order.perm
        if task.mode is DmaMode.CONVERT:
            dst[...] = convert(src, dst.dtype)
        elif task.mode is DmaMode.PERMUTE or (src.shape == dst.shape and src_order == dst_order):
            dst[...] = src
        else:  # a reshaping copy keeps the bytes in memory order
            flat = src.transpose(src_order).reshape(-1)
            memory_shape = [dst.shape[d] for d in dst_order]
            dst.transpose(dst_order)[...] = flat.reshape(memory_shape)

    def _dpu(self, task: DpuTask, variant: int) -> None:
        inputs = [self.array(n) for n in task.inputs]
        weights = self.array(task.weights) if task.weights else None
        bias = self.array(task.bias).reshape(-1) if task.bias else None
        wide = _compute_type(*inputs)
        operands = [x.astype(wide) for x in inputs]
        w = weights.astype(wide) if weights is not None else None
        b = bias.astype(wide) if bias is not None else None
        kernel = task.kernel or (tuple(weights.shape[2:4]) if weights is not None and
                                 weights.ndim == 4 else (1, 1))
        window = (tuple(kernel), tuple(task.stride or (1, 1)), tuple(task.pad or (0, 0, 0, 0)),
                  tuple(task.dilation or (1, 1)))
        out = self.array(task.output)
        if task.quant is not None:      # the integer mode: its stored values, exact
            result = integer_dpu_op(task.op, inputs[0], weights, bias, window, task.quant,
                                    self.array(task.quant.scale), task.post, out.dtype)
        else:
            result = dpu_op(task.op, operands, w, b, window, task.post)
        if task.op is DpuOp.PERMUTE and out.shape[1] > result.shape[1]:   # zero channels
            result = np.pad(result, [(0, 0), (0, out.shape[1] - result.shape[1]), (0, 0), (0, 0)])
        v = task.variants[variant]
        (x0, y0, z0), (x1, y1, z1) = v.start, v.end
        if task.op is DpuOp.MATMUL:
            box = (slice(y0, y1 + 1), slice(z0, z1 + 1))
        else:
            box = (slice(None), slice(z0, z1 + 1), slice(y0, y1 + 1), slice(x0, x1 + 1))
        out[box] = convert(result[box], out.dtype)
        for name in task.broadcast_outputs:     # the same box of each copy on another tile
            copy = self.array(name)
            copy[box] = convert(result[box], copy.dtype)

    def _kernel(self, task: SwKernelTask, name: str) -> None:
        decl = self.kernels[task.kernel]
        fn = self.extra.get(decl.name)
        if fn is None and decl.source.kind is KernelSourceKind.LIBRARY:
            fn = library_reference(decl, name, task.loc)
        bound = {b.alias: b.buffer for b in task.inputs + task.outputs}
        if fn is None and decl.name in self.graphs:
            return self._generated(task, name, self.graphs[decl.name], bound)
        if fn is None:
            raise VpucError(f"--reference: {name} calls @{decl.name} from {decl.source}, which has "
                            "no numpy reference (the table covers the library kernels: "
                            f"{', '.join(sorted(REFERENCES))}; generated kernels are checked "
                            "against the graph their object records, which this one lacks); "
                            "compare with --expected instead", task.loc)
        consts = {c.name: c.value for c in task.consts}
        memrefs, scalars = [], []
        for arg, param in zip(task.run_args, decl.params):
            if param.is_memref:
                memrefs.append(bound[arg])
            else:
                scalars.append(consts[arg])
        contract = library_contract(decl.source.ref) \
            if decl.source.kind is KernelSourceKind.LIBRARY else None
        n_out = len(contract.memrefs) - len(contract.inputs) if contract is not None else 1
        inputs, outputs = memrefs[:-n_out], memrefs[-n_out:]
        if contract is not None and decl.source.ref in PARTIAL_OUTPUT:
            inputs += outputs
        values = [self.array(n) for n in inputs]
        wide = _compute_type(*values) if values else np.float32
        # Softmax and the reductions work over the last logical dim, whatever the dims order
        # (docs/kernels.md, "reduce row"): W for NCHW and NHWC alike, not the innermost dim
        # in memory.
        rank = values[0].ndim if values else 0
        axis = rank - 1 if rank else None
        results = fn(*[v.astype(wide) for v in values], *scalars, axis=axis)
        for output, result in zip(outputs, results if n_out > 1 else (results,)):
            result = np.asarray(result)
            target = self._set_dynamic(output, result.shape)
            try:
                target[...] = convert(np.broadcast_to(result, target.shape), target.dtype)
            except ValueError:
                raise VpucError(f"--reference: {name}: the reference of @{decl.name} gives shape "
                                f"{result.shape}, but its output %{output} has shape "
                                f"{target.shape}", task.loc) from None

    def _generated(self, task: SwKernelTask, name: str, graph: Graph, bound: dict) -> None:
        """A generated kernel: its recorded body on the arguments, inputs then outputs."""
        count = len(graph.parameters)
        inputs = {p.result: self.array(bound[arg])
                  for p, arg in zip(graph.parameters, task.run_args)}
        try:
            results = run_graph(graph, inputs)
        except VpucError as exc:
            raise VpucError(f"--reference: {name}: the graph recorded by @{task.kernel} cannot "
                            f"run: {exc.diagnostics[0].message}", task.loc) from None
        for arg, result in zip(task.run_args[count:], results):
            target = self._set_dynamic(bound[arg], result.shape)
            try:
                target[...] = convert(result, target.dtype)
            except ValueError:
                raise VpucError(f"--reference: {name}: the graph recorded by @{task.kernel} "
                                f"gives shape {result.shape}, but %{bound[arg]} has shape "
                                f"{target.shape}", task.loc) from None
