"""Empty values at import: tensors with a dim of 0 (a Slice that selects nothing, a Split
part of size 0, a Pad that crops everything, a Tile by 0).

An empty tensor holds no data, so it is a *known* value like a constant: a numpy array of
its shape, which graph ops never read (the graph dialect has no empty tensors).  What a
node does with one:

- a node whose inputs are all known folds as any constant subgraph does (``fold.py``);
- Concat leaves its empty operands out (``concat_operands``): they add nothing;
- any other node reading one alongside run-time values makes empty outputs when ONNX's
  shape inference gives each of them a dim of 0 (an elementwise op broadcasting against
  the empty value); else its converter may read it as a constant array (a Resize's empty
  roi), and a graph op reading it as an operand is refused, the node named
  (``refuse_as_operand``: graph ops take no empty tensors);
- a model output that is empty is no graph Result (the blob has no tensor of size 0):
  ``empty_outputs`` names it and gives its type, which the program records
  (``Program.empty_outputs``, in the blob's header: ``vpuc/blob/empty_outputs.py``) and
  the simulation returns as an empty array beside the outputs the program writes.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.types import DimsOrder, TensorType
from vpuc.onnx_import.builder import ELEM_OF_NUMPY, GraphBuilder


def make_empty(b: GraphBuilder, onnx_name: str, shape) -> None:
    b.known[onnx_name] = np.zeros(tuple(int(d) for d in shape), np.float32)


def is_empty(b: GraphBuilder, onnx_name: str) -> bool:
    return bool(onnx_name) and b.is_known(onnx_name) and b.known[onnx_name].size == 0


def concat_operands(b: GraphBuilder, names) -> list[str]:
    """A Concat's operands that hold data."""
    return [n for n in names if n and not is_empty(b, n)]


def _text(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def empty_through(b: GraphBuilder, node, shapes: dict[str, tuple[int, ...]]) -> bool:
    """Whether ``node`` (not folded: it reads run-time values) reads an empty value and
    ONNX's shape inference makes every output of it empty too: then they are made empty
    values here, and the node is done."""
    if node.op_type == "Concat" or not any(is_empty(b, n) for n in node.input):
        return False
    outs = [n for n in node.output if n]
    if not all(n in shapes and 0 in shapes[n] for n in outs):
        return False            # its converter reads the empty input as an array, or refuses
    for n in outs:
        make_empty(b, n, shapes[n])
    return True


def refuse_as_operand(b: GraphBuilder, onnx_name: str) -> None:
    """An empty value a graph op would read: refused at the node reading it."""
    if is_empty(b, onnx_name):
        raise b.error(f"input '{onnx_name}' is empty ({_text(b.shape(onnx_name))}) and this "
                      f"{b.node.op_type} would compute from it; vpuc takes empty tensors only "
                      "where they vanish (a Concat's operands) or stay empty")


def empty_outputs(b: GraphBuilder, outputs,
                  declared: dict[str, np.dtype]) -> dict[str, tuple[str, TensorType]]:
    """The model outputs that are empty: ONNX name -> (the program's name for it, a fresh
    graph name as a Parameter's; its type: floats in the graph's precision as any
    computed output, other types as the model declares them)."""
    found: dict[str, tuple[str, TensorType]] = {}
    for name in dict.fromkeys(outputs):
        if not is_empty(b, name):
            continue
        dtype = declared.get(name, np.dtype(np.float32))
        elem = b.elem if np.issubdtype(dtype, np.floating) else ELEM_OF_NUMPY.get(dtype)
        if elem is None:
            raise b.error(f"model output '{name}' is empty ({_text(b.shape(name))}) of element "
                          f"type {dtype}, which vpuc has no tensors of")
        shape = b.shape(name)
        found[name] = (b.fresh(name),
                       TensorType(tuple(shape), elem, DimsOrder.identity(len(shape))))
    return found
