"""Model outputs that are a graph input or a constant, made tensors the program writes.

ONNX lets an output name a graph input (a pass-through, an Identity chain) or a constant
(an initializer, a subgraph folded at import).  A compiled program's outputs are tensors
its tasks write, so each such output becomes an identity ``Reshape`` of the value, which
the lowering copies with one DMA (input -> output, or constant -> output), as it copies
any Reshape whose bytes it cannot alias.
"""

from __future__ import annotations

from vpuc.ir.graph import CONSTANT, PARAMETER
from vpuc.onnx_import.builder import GraphBuilder


def copy_unwritten_outputs(b: GraphBuilder, outputs) -> None:
    """Give every output that names an input or a constant a copy of its own."""
    kinds = {op.result: op.kind for op in b.graph.ops if op.result is not None}
    copied: dict[str, str] = {}
    for name in outputs:
        if name not in b.values and b.is_known(name):    # its Constant named apart, the copy as it
            source = b.constant(b.known[name], f"{name}.value")
        elif kinds.get(b.values.get(name)) in (PARAMETER, CONSTANT):
            source = b.values[name]
        else:
            continue
        if source not in copied:
            copied[source] = b.op("Reshape", [source], {"shape": tuple(b.types[source].dims)}, out=name)
        b.values[name] = copied[source]
