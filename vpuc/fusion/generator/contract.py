"""The generated argument contract: a ``KernelDecl`` for a subgraph's kernel.

One memref per body Parameter (the subgraph's inputs, in order), then one per
Result (its outputs): ``in0, in1, ..., out0, ...``, each with the tensor's
element type and dims (``?`` where a dim is dynamic), and no scalars -- the
body's constants are immediates in the code.  The kernel expects every operand
dense in the dims order of its body type (what the compiler's CMX buffers are)
and reads run-time dims from the MemRefData; a dynamic output whose
``isStatic`` is 0 gets its dims and strides written by the kernel.
"""

from __future__ import annotations

from vpuc.ir.graph import Graph
from vpuc.ir.module import KernelDecl, KernelParam, KernelSource, KernelSourceKind
from vpuc.ir.types import Dynamic, MemRefPattern, TensorType


def pattern(t: TensorType) -> MemRefPattern:
    return MemRefPattern(t.elem, tuple(None if isinstance(d, Dynamic) else d for d in t.dims))


def kernel_decl(name: str, body: Graph) -> KernelDecl:
    params = [KernelParam(f"in{i}", pattern(op.type)) for i, op in enumerate(body.parameters)]
    params += [KernelParam(f"out{j}", pattern(op.type)) for j, op in enumerate(body.results)]
    return KernelDecl(name, params, KernelSource(KernelSourceKind.GENERATED))
