"""ONNX Gather whose indices are a run-time tensor: an embedding lookup (BERT's, GPT-2's
word embeddings on the model's token ids), any axis.

The indices are the graph's ``i32`` (int64 ones are converted at the model's boundary,
``boundary_types``); the op is the dialect's ``IndexedGather``, which the lowering runs
as the ACT SHAVE library kernel ``gather`` (``vpuc/fusion/lower_gather.py``).  Negative
indices count from the end, as ONNX says; one out of range stops the run with the
kernel's status, naming the index.  Indices of another type (a float tensor, a boolean)
are refused, naming the node.
"""

from __future__ import annotations

from vpuc.ir.types import ElemType


def gather_runtime_indices(b, node, attrs) -> None:
    data, indices = b.value(node.input[0]), b.value(node.input[1])
    shape = b.shape(node.input[0])
    axis = b.axis(attrs.get("axis", 0), len(shape))
    elem = b.types[indices].elem
    if elem is not ElemType.I32:
        raise b.error(f"Gather indices '{node.input[1]}' are {elem} at run time; expected "
                      "integers (int32 or int64, which vpuc holds as i32)")
    b.op("IndexedGather", [data, indices], {"axis": axis}, out=node.output[0])
