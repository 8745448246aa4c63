"""Per-layer reference check (``vpuc run MODEL --reference``): each layer of a compiled
graph against vpuc's f16 graph reference fed with the inputs the simulation gave it.

The lowering keeps every value one segment hands to another in a DDR buffer named after
it (``ddr``, or the network's ``input``/``output``), and never reuses them, so after a
run the memory holds every such value as simulated; a value kept whole in CMX between
segments (``vpuc/fusion/resident.py``), whose bytes later buffers may reuse, is read as
its last write by any engine left it (``Network.kept``).  Walking the graph in order, each op
is computed by the reference executor (``vpuc.reference.graph.run_op``: f32 arithmetic,
each result rounded to f16) from its operands' **simulated** values where the program
materialized them, and from the reference's own values inside a segment (a fused chain,
a DPU layer's folded post-ops).  Every materialized value a segment writes is then
compared with its reference, and the comparison is filed under the layer of the task
that writes it (``Module.layers``: its ONNX nodes).  So an error is caught at the layer
that makes it, not blurred by the f16 drift of the layers before.

The bound, per element (docs/simulator.md, "Per-layer reference"), for a value whose
chain from materialized inputs has ``depth`` ops with ``n`` accumulated terms in all:

    |sim - ref| <= ULPS * u16 * (|sim| + |ref| + depth * rms(ref) + I) + 2 gamma_n(f32) * S + eta

``u16`` = 2^-11 (f16 unit roundoff), ``ULPS`` = 2: the two sides round each op's result to
f16 at different places (a DPU applies bias and activation before its one rounding, the
reference rounds after each op; a generated kernel contracts Multiply + Add into one FMA
and evaluates transcendental functions by its own approximations), each such rounding
worth one f16 ulp of the values it touches, which the ``depth * rms`` term carries through
a chain whose output is smaller than its intermediates on the whole, and ``I``, the sum of
the chain's intermediate results' magnitudes (per element through elementwise ops, their
rms through others), where it is so element by element (a convolution's channel of large
outputs that a batch norm's bias brings back near 0, rounded to f16 by the reference
before the add).  ``S`` is the sum of |terms| of
every accumulating op (Convolution, MatMul, pools, reductions: the reference op run on
the operands' magnitudes), ``2 gamma_n(f32) S`` Higham's bound for two f32 accumulation
orders (tests/tolerances.py), ``eta`` half the smallest f16 subnormal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from runtime_sim.kept_values import value_buffer
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, SCALAR, Graph
from vpuc.ir.module import BufferKind
from vpuc.ir.provenance import LayerIndex
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask
from vpuc.reference.graph import constant_value, run_op

ULPS = 2
U16 = 2.0 ** -11
U32 = 2.0 ** -24
ETA16 = 2.0 ** -25               # half the smallest f16 subnormal
# Ops that sum terms (``_terms`` says how many per output element).
ACCUMULATING = {"Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul",
                "AvgPool", "ReduceMean", "ReduceSum"}


@dataclass
class LayerResult:
    layer: str
    nodes: str
    op_types: str
    values: int = 0
    elements: int = 0
    failures: int = 0             # elements beyond the bound
    worst_fraction: float = 0.0   # max |sim - ref| / bound
    worst_value: str = ""

    def as_dict(self) -> dict:
        return {"layer": self.layer, "onnx_nodes": self.nodes, "onnx_op_types": self.op_types,
                "values": self.values, "elements": self.elements, "failures": self.failures,
                "worst_fraction": round(self.worst_fraction, 6), "worst_value": self.worst_value}


@dataclass
class LayerCheck:
    layers: list[LayerResult] = field(default_factory=list)

    @property
    def failed(self) -> list[LayerResult]:
        return [r for r in self.layers if r.failures]

    @property
    def worst_fraction(self) -> float:
        return max((r.worst_fraction for r in self.layers), default=0.0)

    def summary(self) -> str:
        return (f"per-layer reference: {len(self.layers)} layers checked, "
                f"{len(self.failed)} beyond the bound, worst {self.worst_fraction:.3g} of the "
                f"bound ({ULPS} f16 ulps per rounding + f32 accumulation)")

    def as_dict(self) -> dict:
        return {"bound_ulps": ULPS, "layers_checked": len(self.layers),
                "layers_failed": len(self.failed), "worst_fraction":
                round(self.worst_fraction, 6), "layers": [r.as_dict() for r in self.layers]}


def _writers(program) -> dict[str, str]:
    """Root buffer -> label of the first task writing it."""
    symbols = SymbolTable(program.module)
    out: dict[str, str] = {}

    def wrote(name: str, label: str) -> None:
        region = symbols.region(name)
        if region is not None:
            out.setdefault(region.root.name, label)

    for task_list in program.module.task_lists:
        for t in task_list.tasks:
            label = t.label or ""
            if isinstance(t, DmaTask):
                wrote(t.dst, label)
            elif isinstance(t, DpuTask):
                for name in (t.output, *t.broadcast_outputs):
                    wrote(name, label)
            elif isinstance(t, SwKernelTask):
                for b in t.outputs:
                    wrote(b.buffer, label)
    return out


def check_layers(program, network, graph: Graph) -> LayerCheck:
    module = program.module
    # a value kept in CMX between segments is read as its last DMA write left it
    buffers = {b.name: b for b in module.buffers
               if b.kind in (BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.DDR)
               or (b.kind is BufferKind.CMX and b.name in network.kept)}
    index = LayerIndex(module.layers)
    writers = _writers(program)
    ref: dict[str, np.ndarray] = {}
    sim: dict[str, np.ndarray] = {}
    depth: dict[str, int] = {}
    terms: dict[str, int] = {}
    mag: dict[str, float] = {}       # largest sum of |terms| of the chain's accumulations
    inter: dict[str, object] = {}    # sum of |intermediate results| of the chain (``I``)
    results: dict[str, LayerResult] = {}
    for op in graph.ops:
        v = op.result
        if op.kind == RESULT or v is None:
            continue
        buffer = buffers.get(value_buffer(v))
        if op.kind in (CONSTANT, SCALAR):
            ref[v] = constant_value(op)
            depth[v], terms[v], mag[v] = 0, 0, 0.0
            continue
        if op.kind == PARAMETER:
            ref[v] = network.output(buffer.name) if buffer is not None else None
            sim[v] = ref[v]
            depth[v], terms[v], mag[v] = 0, 0, 0.0
            continue
        args = [sim[o] if o in sim else ref.get(o) for o in op.operands]
        if any(a is None for a in args):
            ref[v] = None             # an input the run did not hold: nothing to check after
            continue
        ref[v] = run_op(op, args)
        fed = [o for o in op.operands if o not in sim]
        depth[v] = 1 + max((depth[o] for o in fed), default=0)
        terms[v] = sum(terms[o] for o in fed)
        mag[v] = sum((mag[o] for o in fed), 0.0)
        inter[v] = _intermediates([o for o in fed if depth[o]], ref, inter, np.shape(ref[v]))
        if op.kind in ACCUMULATING:
            with np.errstate(all="ignore"):
                absolute = np.asarray(run_op(op, [np.abs(a) for a in args]), np.float64)
            terms[v] += _terms(op, args, ref[v])
            mag[v] += float(np.max(absolute)) if absolute.size else 0.0
        if buffer is None:
            continue                  # a value inside a segment (CMX only)
        held = _held(buffer, network, np.shape(ref[v]))
        if held is None:
            continue
        sim[v] = held
        label = writers.get(buffer.name, "")
        source = index.layer(label) if index else None
        key = source.key if source is not None else label.split(".", 1)[0]
        result = results.get(key)
        if result is None:
            result = results[key] = LayerResult(
                key, source.names if source else "", source.op_types if source else "")
        _compare(result, v, sim[v], ref[v], depth[v], terms[v], mag[v], inter.pop(v))
    return LayerCheck(list(results.values()))


def _held(buffer, network, shape: tuple[int, ...]) -> np.ndarray | None:
    """The simulated value of the graph value of ``shape`` that ``buffer`` holds: its DDR
    buffer, its CMX buffer as recorded (``Network.kept``), the real channels of a CMX
    buffer held with padded channels (``resident.padded_channels``: N, C, H, W with more
    C); None when the buffer holds something else."""
    dims = tuple(buffer.type.dims)
    if buffer.kind is not BufferKind.CMX:
        return network.output(buffer.name) if dims == tuple(shape) else None
    value = network.kept[buffer.name]
    if dims == tuple(shape):
        return value
    if len(dims) == len(shape) == 4 and dims[1] > shape[1] \
            and dims[:1] + dims[2:] == tuple(shape[:1]) + tuple(shape[2:]):
        return value[:, :shape[1]]
    return None


def _terms(op, args, out) -> int:
    """Terms summed per output element (an upper bound where the op's layout varies)."""
    if op.kind in ("Convolution", "GroupConvolution"):
        return int(np.prod(np.shape(args[1])[1:]))          # I/groups x kh x kw
    if op.kind == "ConvolutionBackpropData":
        w = np.shape(args[1])
        return int(w[0] * np.prod(w[2:]))
    if op.kind == "MatMul":
        return int(max(np.shape(args[0])[-2:]))
    if op.kind == "AvgPool":
        return int(np.prod(op.attrs.get("kernel", (1,))))
    return max(1, math.ceil(np.size(args[0]) / max(1, np.size(out))))    # reductions


def _intermediates(fed: list[str], ref: dict, inter: dict, shape: tuple[int, ...]):
    """``I`` of a value of ``shape`` whose chain feeds on ``fed`` (intermediate results the
    reference rounded): each one's magnitude plus its own ``I``, per element when it
    broadcasts to ``shape``, else its rms."""
    total = 0.0
    for o in fed:
        with np.errstate(all="ignore"):
            here = np.abs(np.asarray(ref[o], np.float32)) + inter.get(o, 0.0)
            try:
                np.broadcast_shapes(np.shape(here), shape)
            except ValueError:
                finite = here[np.isfinite(here)]
                here = float(np.sqrt(np.mean(np.square(finite, dtype=np.float64)))) \
                    if finite.size else 0.0
            total = total + here
    return total


def _compare(result: LayerResult, name: str, got, want, depth: int, terms: int,
             mag: float, inter=0.0) -> None:
    got64 = np.asarray(got, np.float64)
    want64 = np.asarray(want, np.float64)
    with np.errstate(all="ignore"):
        finite = want64[np.isfinite(want64)]
        rms = float(np.sqrt(np.mean(finite ** 2))) if finite.size else 0.0
        nu = min(terms * U32, 0.5)
        bound = (ULPS * U16 * (np.abs(got64) + np.abs(want64) + depth * rms + inter)
                 + 2 * nu / (1 - nu) * mag + ETA16)
        same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))
        error = np.where(same, 0.0, np.abs(got64 - want64))
        error = np.where(np.isnan(error), np.inf, error)
        fraction = error / bound
    result.values += 1
    result.elements += got64.size
    result.failures += int(np.count_nonzero(fraction > 1))
    worst = float(np.max(fraction)) if fraction.size else 0.0
    if worst > result.worst_fraction or not result.worst_value:
        result.worst_fraction = max(result.worst_fraction, worst)
        result.worst_value = f"%{name}"
