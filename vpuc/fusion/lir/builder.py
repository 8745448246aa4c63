"""Build a Linear IR from a data-flow-optimized subgraph body (OpenVINO's LinearIR ctor).

Each body op becomes one expression, in body order (Parameters, Scalars, the
fused ops, Results), wired like the graph.  Port descriptors get memory
shapes over the *master shape* (the broadcast of every port): a dim is 1
where the port broadcasts and the master's size otherwise, so a run-time dim
is the same symbol ``Dk`` on every port that has it.  That is the kernel's
contract for dynamic dims: a port whose dim is dynamic has the master's run-time
size there (no run-time broadcasting of a dynamic dim).

A Result that reads a Parameter or a Scalar directly gets a ``Copy`` in
between, so every stored value is computed by an expression inside a loop.
"""

from __future__ import annotations

from vpuc.diagnostics import VpucError
from vpuc.fusion.lir.expression import Node, PortDescriptor
from vpuc.fusion.lir.kinds import COPY, PARAMETER, RESULT, SCALAR
from vpuc.fusion.lir.linear_ir import KernelArg, LinearIR, LoweringConfig
from vpuc.fusion.lir.values import Value
from vpuc.ir.graph import CONSTANT, Graph, GraphOp
from vpuc.ir.graph_ops import OPS, InferError, broadcast_shapes
from vpuc.ir.types import Dynamic, ElemType, TensorType


def vector_lanes(target, elem: ElemType) -> int:
    return target.lanes.get(elem, max(1, 16 // max(1, elem.nbytes)))


def build_lir(body: Graph, config: LoweringConfig) -> LinearIR:
    ops = body.ops
    for op in ops:
        spec = OPS.get(op.kind)
        if op.kind == CONSTANT and not op.is_scalar_constant:
            raise VpucError(f"@{body.name}: %{op.result} is a tensor constant; the Linear IR "
                            "expects it as a subgraph input", op.loc)
        if op.kind not in (PARAMETER, RESULT, SCALAR, CONSTANT) and (spec is None
                                                                       or not spec.elementwise):
            raise VpucError(f"@{body.name}: {op.kind} is not elementwise; the Linear IR lowers "
                            "elementwise bodies only", op.loc)
    typed = [op.type for op in ops if op.type is not None and not op.is_scalar_constant]
    try:
        master_dims = broadcast_shapes(*(t.dims for t in typed)) if typed else ()
    except InferError as exc:
        raise VpucError(f"@{body.name}: ports do not broadcast to one domain: {exc}") from None
    master_dims = master_dims or (1,)     # a rank-0 body runs as one element of rank 1
    rank = len(master_dims)
    master, bounds = [], {}
    for k, d in enumerate(master_dims):
        if isinstance(d, Dynamic):
            master.append(Value.sym(f"D{k}"))
            bounds[f"D{k}"] = d.bound
        else:
            master.append(Value(d))
    elems = {t.elem for t in typed}
    increment = min((vector_lanes(config.target, e) for e in elems), default=1)
    if elems and elems <= {ElemType.U8, ElemType.I8}:
        # bytes are computed expanded, one per 2-byte slot or wider (generator/forms.py):
        # a body of u8/i8 values alone (Not of a bool model input, an i8 -> u8 Convert)
        # runs as many as f16 would
        increment = min(increment, vector_lanes(config.target, ElemType.F16))
    lir = LinearIR(body.name, config, tuple(master), bounds, increment)

    def desc(t: TensorType) -> PortDescriptor:
        dims = (1,) * (rank - t.rank) + tuple(t.dims)
        return PortDescriptor(tuple(Value(1) if d == 1 else master[k] for k, d in enumerate(dims)),
                              t.elem)

    values = {}
    n_in = 0
    n_out = 0
    for op in ops:
        if op.kind == PARAMETER:
            memory = f"in{n_in}"
            d = desc(op.type)
            attrs = {"index": n_in, "memory": memory, **_layout(op)}
            expr = lir.create_expression(Node(PARAMETER, attrs), [],
                                         [d], names=[op.result])
            lir.io.append(KernelArg(len(lir.io), "input", memory, op.result, d.shape, d.elem))
            n_in += 1
        elif op.kind in (SCALAR, CONSTANT):
            expr = lir.create_expression(Node(SCALAR, {"value": op.scalar_value()}), [],
                                         [desc(op.type)], names=[op.result])
        elif op.kind == RESULT:
            source = values[op.operands[0]]
            if source.source.expr.kind in (PARAMETER, SCALAR):
                copy = lir.create_expression(Node(COPY), [source],
                                             [source.source.descriptor.clone()],
                                             names=[f"{op.operands[0]}.copy"])
                lir.exprs.append(copy)
                source = copy.outputs[0]
            memory = f"out{n_out}"
            d = desc(op.type)
            attrs = {"index": n_out, "memory": memory, **_layout(op)}
            expr = lir.create_expression(Node(RESULT, attrs),
                                         [source], [], in_descs=[d])
            lir.io.append(KernelArg(len(lir.io), "output", memory, op.operands[0], d.shape, d.elem))
            n_out += 1
        else:
            attrs = dict(op.attrs)
            if op.kind == "MoveBroadcast":
                attrs["dim"] = master[-1]
            expr = lir.create_expression(Node(op.kind, attrs), [values[o] for o in op.operands],
                                         [desc(op.type)], names=[op.result],
                                         in_descs=[desc(_type_of(ops, o)) for o in op.operands])
        lir.exprs.append(expr)
        if op.result is not None:
            values[op.result] = expr.outputs[0]
    _runtime_dims(lir)
    return lir


def _layout(op: GraphOp) -> dict:
    # The logical layout canonicalization chose for the port; propagate-layout hands it to
    # the kernel arguments.
    return {"layout": op.attrs["layout"]} if "layout" in op.attrs else {}


def _type_of(ops: list[GraphOp], name: str) -> TensorType:
    return next(op.type for op in ops if op.result == name)


def _runtime_dims(lir: LinearIR) -> None:
    """Where the kernel reads each run-time dim: the first argument that is not 1 there."""
    for k, dim in enumerate(lir.master_shape):
        if dim.static is not None:
            continue
        for arg in lir.io:
            if arg.shape[k] != 1:
                lir.runtime_dims[f"D{k}"] = (arg.index, lir.rank - 1 - k)
                break
