"""Graph data-movement ops as DMA tasks: a *DMA segment* of ``lower-graph``.

``lower-graph`` makes one segment of each Reshape, Transpose, Concat, Slice,
Gather, Pad, DepthToSpace, SpaceToDepth and nearest Interpolate the tokenizer leaves out, and
calls ``emit_dma`` to add its tasks to the program being built.

Expects: a typed graph op of ``DMA_OPS`` with static shapes; its operands and
its result in DDR (``input``, ``const``, ``output`` or ``ddr`` buffers of the
whole tensor, in the graph's dims orders), declared by the caller.

Guarantees: the op is the DDR -> DDR copies of ``lower_dma_plan.plan``, one
``dma`` task per copy (``permute`` where the two sides have one logical
shape in different dims orders), each side a buffer or a view of it.  A copy
larger than ``SPLIT_BYTES`` is cut in two along an axis both sides split at
the same byte, so the halves can run at once.  Copies are spread over the (at most two)
DMA channels the target has, each to the one with fewer bytes queued so far.  The first
phase's tasks wait on ``gate``; each later phase waits on a barrier every task
of the phase before updates; every task of the last phase updates
``finish``.  Scratch tensors are ``ddr`` buffers, pad values ``const``
splats; all names carry ``prefix``.
"""

from __future__ import annotations

from vpuc.diagnostics import DiagnosticBag, VpucError
from vpuc.fusion.blocked_program import ProgramText, Value, label, type_text
from vpuc.fusion.lower_dma_plan import DMA_OPS, Copy, Part, Plan, full, plan
from vpuc.fusion.lower_gather import GATHER_OP
from vpuc.fusion.lower_topk import TOPK_OP
from vpuc.fusion.subgraph import Tokenization
from vpuc.fusion.tokenizer import Reason
from vpuc.ir.graph import Graph, GraphOp
from vpuc.ir.module import ConstInit

__all__ = ["DMA_OPS", "dma_ops", "dma_plan", "emit_dma"]

SPLIT_BYTES = 4096          # copies at least this large use both channels
CHANNELS = 2                # at most; fewer when the target has fewer


def dma_plan(op: GraphOp, types: dict) -> Plan:
    """The plan of ``op`` over graph values (``types``: value -> TensorType)."""
    x = op.operands[0]
    operands = [(v, types[v]) for v in op.operands]
    return plan(op, x, types[x], op.result, types[op.result], operands)


def emit_dma(prog: ProgramText, op: GraphOp, renamed: dict[str, Value], prefix: str,
             gate: tuple[str, ...], finish: str | None, in_place: frozenset = frozenset()) -> None:
    """Add the DMA tasks of ``op`` to ``prog``; ``renamed`` maps each graph value it reads
    or writes to its program value; the copies of the operands in ``in_place`` (graph
    values already written into their slice of a Concat's result) are left out."""
    types = {v: renamed[v].type for v in (*op.operands, op.result)}
    p = dma_plan(op, types)
    if in_place:
        p.phases = [[c for c in phase if c.src.buffer not in in_place] for phase in p.phases]
    names = {v: value.name for v, value in renamed.items()}
    for key, t in p.scratch.items():
        names[key] = f"{prefix}{key.rsplit('.', 1)[-1]}"
        prog.buffers.append(f"ddr %{names[key]} : {type_text(t)}")
    for key, (t, value) in p.fills.items():
        names[key] = f"{prefix}fill"
        number = value if t.elem.is_float else int(value)
        prog.buffers.append(f"const %{names[key]} : {type_text(t)} = "
                            f"{ConstInit(splat=number)}")
    emitter = _Emitter(prog, names, prefix)
    for n, phase in enumerate(p.phases):
        last = n == len(p.phases) - 1
        waits = list(gate) if n == 0 else [f"{prefix}phase{n}"]
        if last:
            updates = [finish] if finish else []
        else:
            updates = [f"{prefix}phase{n + 1}"]
            prog.barriers.append(f"barrier %{prefix}phase{n + 1}")
        for copy in phase:
            for piece in _halves(copy):
                emitter.task(piece, waits, updates)


class _Emitter:
    def __init__(self, prog: ProgramText, names: dict[str, str], prefix: str) -> None:
        self.prog, self.names, self.prefix = prog, names, prefix
        self.queued = [0] * min(CHANNELS, prog.dma_channels)
        self.count = 0
        self.views = 0

    def ref(self, part: Part) -> str:
        base = self.names[part.buffer]
        if part.spans is None or part.spans == full(part.type):
            return f"%{base}"
        slices = ", ".join(f"{a}:{b}" if s == 1 else f"{a}:{b}:{s}" for a, b, s in part.spans)
        name = f"{self.prefix}v{self.views}"
        self.views += 1
        self.prog.views.append(f"view %{name} = %{base}[{slices}]")
        return f"%{name}"

    def task(self, copy: Copy, waits: list[str], updates: list[str]) -> None:
        channel = min(range(len(self.queued)), key=lambda c: self.queued[c])
        self.queued[channel] += copy.src.nbytes
        mode = "permute " if copy.mode == "permute" else ""
        wait = ", ".join(f"%{w}" for w in waits)
        update = f" updates({', '.join(f'%{u}' for u in updates)})" if updates else ""
        self.prog.dma.append(f"  {label(self.prefix)}dma{self.count}: dma {mode}"
                             f"{self.ref(copy.src)} -> {self.ref(copy.dst)} channel {channel} "
                             f"waits({wait}){update}")
        self.count += 1


def _halves(copy: Copy) -> list[Copy]:
    """``copy`` in two when it is large: element for element along its largest axis (the
    halves differ by a row when it is odd); else when both sides split at the same byte,
    along one logical axis of each that is outermost in memory among the dims > 1."""
    if copy.src.nbytes < SPLIT_BYTES:
        return [copy]
    same_shape = copy.src.dims == copy.dst.dims
    if same_shape:          # element for element: halve the same logical axis
        axis = max(range(len(copy.src.dims)), key=lambda a: copy.src.dims[a])
        axes = (axis, axis)
    else:
        axes = (_outer(copy.src), _outer(copy.dst))
    # Element for element any split point works (a ViT's 197 tokens: 98 and 99 rows); two
    # different shapes must split at the same byte, in the middle of both.
    if None in axes or copy.src.dims[axes[0]] < 2 or (not same_shape and any(
            side.dims[a] % 2 for side, a in zip((copy.src, copy.dst), axes))):
        return [copy]
    first, second = [], []
    for side, axis in zip((copy.src, copy.dst), axes):
        spans = list(side.spans or full(side.type))
        start, stop, step = spans[axis]
        middle = start + step * (side.dims[axis] // 2)
        lo, hi = list(spans), list(spans)
        lo[axis], hi[axis] = (start, middle, step), (middle, stop, step)
        first.append(Part(side.buffer, side.type, tuple(lo)))
        second.append(Part(side.buffer, side.type, tuple(hi)))
    halves = [Copy(*first), Copy(*second)]
    if not same_shape and any(h.src.dims == h.dst.dims for h in halves):
        return [copy]        # halves of equal shapes would be read element for element
    return halves


def _outer(side: Part) -> int | None:
    """The axis outermost in memory among the part's dims > 1, when splitting it splits the
    part's bytes in memory order (every axis outside it has one element)."""
    for axis in side.type.order.perm:
        if side.dims[axis] > 1:
            return axis
    return None



def dma_ops(graph: Graph, tok: Tokenization) -> dict[int, GraphOp]:
    """The data-movement ops the tokenizer left out (by op index), each checked to have a
    plan; one VpucError naming every op that has none."""
    bag = DiagnosticBag()
    index = graph.index()
    found = {}
    for i, decision in tok.left_out.items():
        op = graph.ops[i]
        if op.kind in (GATHER_OP, TOPK_OP) and decision.reason is not Reason.DEAD:
            found[i] = op                         # data decides: lower_gather's, lower_topk's
            continue
        if op.kind not in DMA_OPS or decision.reason is Reason.DEAD:
            continue
        types = {v: index.producer(v).type for v in op.operands}
        types[op.result] = op.type
        try:
            dma_plan(op, types)
        except VpucError as exc:
            bag.items += exc.diagnostics
            bag.error_count += len(exc.errors)
            continue
        found[i] = op
    bag.raise_if_errors()
    return found
