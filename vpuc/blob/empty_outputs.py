"""A program's outputs of size 0 in the blob: key-values of the header's provenance.

An ONNX output with a dim of 0 (a Slice that selects nothing) is no tensor of the
program: no task writes it, and a tensor record of 0 bytes would be a buffer every
reader, verifier and allocator has to special-case.  What a run needs of it is its name
and type, so the header records one pair per such output, ``empty-output:NAME`` ->
``DIMSxELEM`` (``1x4x0xf16``), where `vpuc inspect` shows them with the rest of the
provenance; a blob reader puts them back into ``Program.empty_outputs``.
"""

from __future__ import annotations

from vpuc.blob.content import KeyValue
from vpuc.ir.types import DimsOrder, ElemType, TensorType

PREFIX = "empty-output:"


def empty_output_pairs(empty: dict[str, TensorType]) -> dict[str, str]:
    """The header's key-values for ``Program.empty_outputs``."""
    return {PREFIX + name: t.shape_str() for name, t in empty.items()}


def split_empty_outputs(pairs: tuple[KeyValue, ...], fail) -> tuple[dict[str, str],
                                                                   dict[str, TensorType]]:
    """The header's provenance pairs apart from the empty outputs, and those read back;
    ``fail(where, message)`` makes the error for a value that is no empty type."""
    provenance: dict[str, str] = {}
    empty: dict[str, TensorType] = {}
    for kv in pairs:
        if not kv.key.startswith(PREFIX):
            provenance[kv.key] = kv.value
            continue
        name = kv.key[len(PREFIX):]
        *dims, elem = kv.value.split("x")
        try:
            shape = tuple(int(d) for d in dims)
            elem_type = ElemType(elem)
        except ValueError:
            shape, elem_type = (), None
        if not name or elem_type is None or 0 not in shape or min(shape) < 0:
            raise fail(f"provenance '{kv.key}'", f"'{kv.value}' is not the type of an empty "
                       "output (dims with a 0, then the element type: 1x4x0xf16)")
        empty[name] = TensorType(shape, elem_type, DimsOrder.identity(len(shape)))
    return provenance, empty
