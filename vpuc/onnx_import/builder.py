"""Building a graph-dialect ``Graph`` from ONNX values, one op at a time.

The builder keeps two kinds of values apart: *known* values (initializers,
Constant nodes, anything folded) held as numpy arrays, and *graph* values,
which have a ``GraphOp`` producing them and a ``TensorType`` inferred by the
graph dialect's own shape rules (``vpuc/ir/graph_ops.py``) as each op is added.
A known value becomes a graph ``Constant`` only when a graph op reads it.

Value names follow the ONNX names, spelled as VIR allows (``%[A-Za-z0-9_.$]``).
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, Graph, GraphOp
from vpuc.ir.graph_ops import OPS, REQUIRED, InferError
from vpuc.ir.module import ConstInit
from vpuc.ir.provenance import OnnxNode, spelled
from vpuc.ir.types import DimsOrder, ElemType, TensorType

_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.$]")
FLOAT16_MAX = float(np.finfo(np.float16).max)

ELEM_OF_NUMPY = {
    np.dtype(np.float16): ElemType.F16, np.dtype(np.float32): ElemType.F32,
    np.dtype(np.float64): ElemType.F64, np.dtype(np.uint8): ElemType.U8,
    np.dtype(np.int8): ElemType.I8, np.dtype(np.int32): ElemType.I32,
    np.dtype(np.int64): ElemType.I64, np.dtype(np.bool_): ElemType.U8,
}
# Constants up to this many elements are written inline in the VIR; larger
# ones go to .npy files beside it.
INLINE_LIMIT = 16


def onnx_node(node) -> OnnxNode:
    return OnnxNode(spelled(node.name or (node.output[0] if node.output else node.op_type)),
                    node.op_type)


class NodeError(VpucError):
    """A problem with one ONNX node: the message names it."""


def describe_node(node, opset: int) -> str:
    domain = node.domain or "ai.onnx"
    name = node.name or "(unnamed)"
    return f"node '{name}' ({node.op_type}, domain {domain}, opset {opset})"


class GraphBuilder:
    def __init__(self, name: str, elem: ElemType, source: str, opset: int) -> None:
        self.graph = Graph(name)
        self.elem = elem                       # the float type the graph computes in
        self.source = source
        self.opset = opset
        self.known: dict[str, np.ndarray] = {}
        self.values: dict[str, str] = {}       # ONNX name -> graph value name
        self.types: dict[str, TensorType] = {}  # graph value name -> type
        self.arrays: dict[str, np.ndarray] = {}  # graph Constant name -> stored array
        self.origin: dict[str, str] = {}       # graph value name -> ONNX node it came from
        # Nodes an import-time rewrite merged, by the merged node's first output (fold.py,
        # patterns.py): a Conv with its BatchNormalization, a recognized layer norm.
        self.merged_from: dict[str, tuple[OnnxNode, ...]] = {}
        self._taken: set[str] = set()
        self.node = None                       # the ONNX node being converted
        # ONNX values whose shape rightly differs from what ONNX's shape inference says
        # (``beside_shape_inference``), and every value computed from them
        self.off_inference: set[str] = set()
        self.overflows: list[str] = []
        # QuantizeLinear outputs only DequantizeLinears read: fake quantizations, each mapped
        # to whether it is the identity (convert_quant.py)
        self.fake_quantized: dict[str, bool] = {}

    # ----------------------------------------------------------------- errors

    def error(self, message: str) -> NodeError:
        where = describe_node(self.node, self.opset) if self.node is not None else "the model"
        return NodeError(f"{self.source}: {where}: {message}")

    def beside_shape_inference(self, onnx_name: str) -> None:
        """``onnx_name`` follows the operator's spec where ONNX's shape inference does not
        (a MaxPool's ceil_mode window in the right padding): its shape is not checked
        against the inferred one, nor is anything computed from it."""
        self.off_inference.add(onnx_name)

    def axis(self, value: int, rank: int, what: str = "axis") -> int:
        """``value`` as an axis in [0, rank); ONNX allows [-rank, rank), anything else is
        refused here (a wrapped index would silently pick another axis)."""
        value = int(value)
        if not -rank <= value < rank:
            raise self.error(f"{what} {value} is out of range for rank {rank} "
                             f"(expected {-rank} to {rank - 1})")
        return value + rank if value < 0 else value

    # ----------------------------------------------------------------- names

    def fresh(self, base: str) -> str:
        name = _BAD_CHARS.sub("_", base.strip("/")) or "v"
        if not re.match(r"[A-Za-z0-9_]", name):
            name = "v" + name
        candidate, n = name, 0
        while candidate in self._taken:
            n += 1
            candidate = f"{name}.{n}"
        self._taken.add(candidate)
        return candidate

    # ----------------------------------------------------------------- values

    def is_known(self, onnx_name: str) -> bool:
        return onnx_name in self.known

    def array(self, onnx_name: str) -> np.ndarray:
        if onnx_name not in self.known:
            raise self.error(f"input '{onnx_name}' must be a constant (an initializer or "
                             "something computed from them); here it is computed at run time")
        return self.known[onnx_name]

    def shape(self, onnx_name: str) -> tuple[int, ...]:
        if onnx_name in self.known:
            return tuple(self.known[onnx_name].shape)
        return tuple(self.types[self.values[onnx_name]].dims)

    def value(self, onnx_name: str) -> str:
        """The graph value for an ONNX value; a known array becomes a Constant op."""
        if onnx_name in self.values:
            return self.values[onnx_name]
        if onnx_name in self.known:
            from vpuc.onnx_import.empty import refuse_as_operand
            refuse_as_operand(self, onnx_name)
            name = self.constant(self.known[onnx_name], onnx_name)
            self.values[onnx_name] = name       # later readers share the one Constant
            return name
        raise self.error(f"input '{onnx_name}' is not produced by any node, initializer or graph input")

    def constant(self, array: np.ndarray, hint: str) -> str:
        """A graph Constant holding ``array`` (floats in the graph's precision)."""
        stored = self._stored(np.asarray(array), hint)
        name = self.fresh(hint)
        elem = ELEM_OF_NUMPY.get(stored.dtype)
        if elem is None:
            raise self.error(f"constant '{hint}' has element type {stored.dtype}, which the graph "
                             "dialect cannot hold")
        ttype = TensorType(tuple(stored.shape), elem, DimsOrder.identity(stored.ndim))
        if stored.size <= INLINE_LIMIT:
            init = ConstInit(values=tuple(v.item() for v in stored.reshape(-1)))
        else:
            init = ConstInit(path=name + ".npy")      # made relative to the consts folder on write
            self.arrays[name] = stored
        self.graph.ops.append(GraphOp(CONSTANT, name, type=ttype, const=init))
        self.types[name] = ttype
        return name

    def _stored(self, array: np.ndarray, hint: str) -> np.ndarray:
        if array.dtype == np.bool_:
            return array.astype(np.uint8)
        if not np.issubdtype(array.dtype, np.floating):
            return array
        if self.elem is ElemType.F16:
            finite = array[np.isfinite(array)]
            if finite.size and np.max(np.abs(finite)) > FLOAT16_MAX:
                self.overflows.append(hint)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return array.astype(np.float16)
        return array.astype(np.float32)

    def parameter(self, onnx_name: str, shape: tuple[int, ...], elem: ElemType | None = None) -> None:
        """A graph input: floats in the graph's precision, integers and booleans as given."""
        name = self.fresh(onnx_name)
        ttype = TensorType(tuple(shape), elem or self.elem, DimsOrder.identity(len(shape)))
        self.graph.ops.append(GraphOp(PARAMETER, name, type=ttype))
        self.values[onnx_name] = name
        self.types[name] = ttype

    def result(self, onnx_name: str) -> None:
        self.graph.ops.append(GraphOp(RESULT, None, (self.value(onnx_name),)))

    def alias(self, onnx_name: str, source: str) -> None:
        """``onnx_name`` is the same value as ``source`` (Identity, Dropout, a no-op Cast)."""
        if source in self.known:
            self.known[onnx_name] = self.known[source]
        else:
            self.values[onnx_name] = self.value(source)

    # ----------------------------------------------------------------- ops

    def node_origin(self) -> tuple[OnnxNode, ...]:
        """The ONNX node(s) behind the node being converted (unnamed: its first output)."""
        node = self.node
        merged = self.merged_from.get(node.output[0]) if node.output else None
        return merged or (onnx_node(node),)

    def op(self, kind: str, operands: list[str], attrs: dict | None = None,
           out: str | None = None) -> str:
        """Append a graph op over graph values; returns its value name.

        ``out`` is the ONNX output this op defines (named after it); an
        intermediate op is named after the node's first output."""
        spec = OPS[kind]
        full = {a.name: a.default for a in spec.attrs if a.default is not None and a.default is not REQUIRED}
        full.update(attrs or {})
        base = out if out is not None else f"{self.node.output[0]}.{kind.lower()}"
        name = self.fresh(base)
        op = GraphOp(kind, name, tuple(operands), full)
        try:
            op.type = spec.infer(op, [self.types[o] for o in operands])
        except InferError as exc:
            raise self.error(f"as {kind}: {exc}") from None
        if spec.float_only and not op.type.elem.is_float:
            raise self.error(f"{kind} takes float tensors; got {op.type.elem}")
        self.graph.ops.append(op)
        self.types[name] = op.type
        if self.node is not None:
            self.origin[name] = self.node.name or self.node.output[0]
            op.origin = self.node_origin()
        if out is not None:
            self.values[out] = name
        return name
