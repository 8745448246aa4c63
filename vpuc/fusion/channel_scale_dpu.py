"""``--schedule default``: a per-channel scale ``x * s`` (``s`` a ``[1, C, 1, 1]`` constant)
as a DPU depthwise 1x1 convolution of weights ``s``.

A BatchNormalization that no Conv precedes (DenseNet-121's pre-activation blocks: BN,
Relu, then the 1x1) imports as ``Multiply(x, s)``, ``Add(., t)``: a fused elementwise
ACT SHAVE segment over the whole map, two ACT SHAVEs per tile at a few elements a cycle.
As a depthwise 1x1 ``GroupConvolution`` (G = C, weights ``[C, 1, 1, 1, 1]``) the DPU
does the product with the following ``Add`` as its bias and a ``Relu`` as its post-op,
as it does every Conv's (``lower_dpu_nn``): the NPU compiler's ``ConvertScaleShiftToDW``
(vpux ``ConvertScaleShiftToDWPass``) rewrites a ScaleShift the same way.  On
DenseNet-121 the normalizations' ACT SHAVE segments were the busiest engine.

Rounding: the DPU multiplies the f16 ``x`` by the f16 ``s`` exactly into its f32
accumulator and adds the bias before one rounding to f16, where the ACT SHAVE kernel
rounded the product and the sum: one rounding fewer.

Expects: a typed graph.  Guarantees: every ``Multiply`` of a 4-D static float value by a
``[1, C, 1, 1]`` Constant (C its channels) is a ``GroupConvolution``; the graph is
re-typed; the value keeps its name, location and provenance.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph import CONSTANT, Graph, GraphOp, fresh_in
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, TensorType
from vpuc.reference.graph import constant_value
from vpuc.verifier.graph import infer_graph


def _scale_operand(op: GraphOp, producer: dict[str, GraphOp]) -> int | None:
    """Which operand of the Multiply ``op`` is the per-channel scale, when the other is a
    4-D static float map of as many channels; else None."""
    if op.kind != "Multiply" or len(op.operands) != 2 or op.type is None:
        return None
    for side in (0, 1):
        s, x = producer.get(op.operands[side]), producer.get(op.operands[1 - side])
        if s is None or x is None or s.kind != CONSTANT or x.kind == CONSTANT:
            continue
        xt, st = x.type, s.type
        if (xt is not None and st is not None and xt.rank == 4 and xt.is_static
                and xt.elem.is_float and st.elem == xt.elem and st.rank == 4
                and tuple(st.dims) == (1, xt.dims[1], 1, 1) and tuple(op.type.dims) == tuple(xt.dims)):
            return side
    return None


def channel_scales_to_dpu(graph: Graph) -> bool:
    """Rewrite ``graph`` in place; True when some scale became a depthwise convolution."""
    producer = {op.result: op for op in graph.ops if op.result is not None}
    taken = set(producer)
    ops: list[GraphOp] = []
    changed = False
    for op in graph.ops:
        side = _scale_operand(op, producer)
        if side is None:
            ops.append(op)
            continue
        scale = producer[op.operands[side]]
        channels = scale.type.dims[1]
        name = fresh_in(f"{op.result}.dw_weights", taken)
        taken.add(name)
        weights = constant_value(scale).astype(np.float64).reshape(-1)
        ops.append(GraphOp(CONSTANT, name, (), {},
                           TensorType((channels, 1, 1, 1, 1), scale.type.elem, DimsOrder.identity(5)),
                           ConstInit(values=tuple(weights.tolist())), loc=op.loc))
        ops.append(GraphOp("GroupConvolution", op.result, (op.operands[1 - side], name),
                           {"strides": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0),
                            "dilations": (1, 1)}, loc=op.loc, origin=op.origin))
        changed = True
    if changed:
        graph.ops = ops
        infer_graph(graph)
    return changed
