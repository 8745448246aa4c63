"""The op kinds of the graph dialect: arity, attributes and shape inference.

One ``OpSpec`` per kind, in one table (``OPS``).  The verifier, the printer's
default-attribute elision, the reference executor and the tokenizer all key on
it.  ``group`` says what an op is to the fusion pipeline:

- ``io``: Parameter, Constant, Result (and the snippets ``Scalar``);
- ``eltwise``: elementwise ops the tokenizer may fuse, including Broadcast;
- ``layer``: ops the tokenizer leaves alone (Convolution, MatMul, Softmax,
  MaxPool, Reshape, Transpose);
- ``snippets``: elementwise ops only the data-flow optimizer creates
  (PowerStatic, FMA, MoveBroadcast), parseable so its output can be read back.

Broadcasting is numpy's: shapes are right-aligned, a dim of 1 stretches.  A
dynamic dim ``?<=N`` broadcast with a static ``k > 1`` gives ``k`` (at run time
it must be 1 or k); two dynamic dims give a dynamic dim with the larger bound.
Comparisons produce ``u8`` (0 or 1): the dialect's boolean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vpuc.ir.graph import GraphOp
from vpuc.ir.types import Dim, DimsOrder, Dynamic, ElemType, TensorType

REQUIRED = object()   # an attribute without a default
BOOL = ElemType.U8    # what comparisons produce and Select's condition is
FLOAT_TYPES = frozenset({ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.F64})


class InferError(Exception):
    """A shape or type rule an op breaks; the verifier reports it at the op."""


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: str            # float, int, bool, elem, ints, floats, dims, dim, str, or enum:a|b|c
    default: object = REQUIRED   # None: optional, absent unless given

    def describe(self) -> str:
        if self.kind.startswith("enum:"):
            return "one of " + ", ".join(self.kind[5:].split("|"))
        return {"float": "a number", "int": "an integer", "bool": "true or false",
                "elem": "an element type such as f32", "ints": "a list of integers",
                "floats": "a list of numbers",
                "dims": "a list of dims such as [1, 64, ?<=128]", "dim": "a dim such as 16",
                "str": "a name or a string"}[self.kind]


@dataclass(frozen=True)
class OpSpec:
    name: str
    arity: int
    group: str
    infer: Callable[[GraphOp, list[TensorType]], TensorType]
    attrs: tuple[AttrSpec, ...] = ()
    float_only: bool = False

    @property
    def elementwise(self) -> bool:
        return self.group in ("eltwise", "snippets")

    def attr(self, name: str) -> AttrSpec | None:
        return next((a for a in self.attrs if a.name == name), None)


# ----------------------------------------------------------------- broadcasting

def broadcast_dim(a: Dim, b: Dim) -> Dim:
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    if isinstance(a, Dynamic) and isinstance(b, Dynamic):
        return Dynamic(max(a.bound, b.bound))
    if isinstance(a, Dynamic):
        return b
    if isinstance(b, Dynamic):
        return a
    raise InferError


def broadcast_shapes(*shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """Numpy broadcasting of several shapes; InferError names the clashing pair."""
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    out: list[Dim] = []
    for axis in range(rank):
        dim: Dim = 1
        for shape in padded:
            try:
                dim = broadcast_dim(dim, shape[axis])
            except InferError:
                raise InferError(_mismatch(shapes)) from None
        out.append(dim)
    return tuple(out)


def broadcasts_to(shape: tuple[Dim, ...], target: tuple[Dim, ...]) -> bool:
    """Whether ``shape`` stretches to exactly ``target`` (dims equal or 1)."""
    if len(shape) > len(target):
        return False
    padded = (1,) * (len(target) - len(shape)) + tuple(shape)
    return all(s == t or s == 1 for s, t in zip(padded, target))


def _shape_text(dims: tuple[Dim, ...]) -> str:
    return "x".join(str(d) for d in dims) if dims else "scalar"


def _mismatch(shapes) -> str:
    return "shapes " + " and ".join(_shape_text(tuple(s)) for s in shapes) + " do not broadcast"


def _order_like(ins: list[TensorType], rank: int) -> DimsOrder:
    # The output keeps the layout of the first operand that has its rank.
    for t in ins:
        if t.rank == rank:
            return t.order
    return DimsOrder.identity(rank)


def _same_elem(op: GraphOp, types: list[TensorType]) -> ElemType:
    elems = {t.elem for t in types}
    if len(elems) > 1:
        listed = " and ".join(str(t.elem) for t in types)
        raise InferError(f"{op.kind} operands have element types {listed}; expected one type "
                         "(insert a Convert{to = ...})")
    return types[0].elem


# ----------------------------------------------------------------- inference rules

def _declared(op: GraphOp, ins: list[TensorType]) -> TensorType:
    if op.type is None:
        raise InferError(f"{op.kind} needs a type, as in ': 1x16xf16'")
    return op.type


def _eltwise(op: GraphOp, ins: list[TensorType]) -> TensorType:
    elem = _same_elem(op, ins)
    dims = broadcast_shapes(*(t.dims for t in ins))
    return TensorType(dims, elem, _order_like(ins, len(dims)))


def _compare(op: GraphOp, ins: list[TensorType]) -> TensorType:
    out = _eltwise(op, ins)
    return TensorType(out.dims, BOOL, out.order)


def _select(op: GraphOp, ins: list[TensorType]) -> TensorType:
    if ins[0].elem is not BOOL:
        raise InferError(f"Select's condition has element type {ins[0].elem}; expected {BOOL} "
                         "(the result of a comparison)")
    elem = _same_elem(op, ins[1:])
    dims = broadcast_shapes(*(t.dims for t in ins))
    return TensorType(dims, elem, _order_like(ins[1:] + ins[:1], len(dims)))


def _convert(op: GraphOp, ins: list[TensorType]) -> TensorType:
    return TensorType(ins[0].dims, op.attrs["to"], ins[0].order)


def _clamp(op: GraphOp, ins: list[TensorType]) -> TensorType:
    if op.attrs["min"] > op.attrs["max"]:
        raise InferError(f"Clamp has min {op.attrs['min']} > max {op.attrs['max']}")
    return ins[0]


def _broadcast(op: GraphOp, ins: list[TensorType]) -> TensorType:
    target = tuple(op.attrs["shape"])
    source = ins[0].dims
    if not broadcasts_to(source, target):
        raise InferError(f"Broadcast cannot stretch {_shape_text(source)} to {_shape_text(target)}")
    offset = len(target) - len(source)
    for axis, dim in enumerate(target):
        # A broadcast cannot invent a run-time size: a dynamic target dim must come from the input.
        if isinstance(dim, Dynamic) and (axis < offset or not isinstance(source[axis - offset], Dynamic)):
            raise InferError(f"Broadcast target dim {dim} at axis {axis} has no dynamic input dim "
                             "to take its size from")
    return TensorType(target, ins[0].elem, _order_like(ins, len(target)))


def _move_broadcast(op: GraphOp, ins: list[TensorType]) -> TensorType:
    # Fills a vector with the one innermost element: the innermost dim grows from 1 to ``dim``.
    source = ins[0]
    if source.rank and source.dims[-1] != 1:
        raise InferError(f"MoveBroadcast stretches an innermost dim of 1; the input is "
                         f"{_shape_text(source.dims)}")
    dims = source.dims[:-1] + (op.attrs["dim"],)
    return TensorType(dims, source.elem, source.order if source.rank else DimsOrder.identity(1))


def _fma(op: GraphOp, ins: list[TensorType]) -> TensorType:
    return _eltwise(op, ins)


def _result(op: GraphOp, ins: list[TensorType]) -> TensorType:
    # A Result produces its operand, or (in a fused body) its operand stretched to the output type.
    if op.type is None:
        return ins[0]
    if op.type.elem is not ins[0].elem or not broadcasts_to(ins[0].dims, op.type.dims):
        raise InferError(f"Result of type {op.type} cannot hold its operand of type {ins[0]}")
    return op.type


def _out_size(size: Dim, kernel: int, stride: int, pad: int, dilation: int = 1) -> Dim:
    bound = size.bound if isinstance(size, Dynamic) else size
    out = (bound + pad - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        raise InferError(f"window of {kernel} (dilation {dilation}) does not fit in dim {size}")
    return Dynamic(out) if isinstance(size, Dynamic) else out


def _pairs(op: GraphOp, *names: str) -> list[tuple[int, ...]]:
    values = []
    for name in names:
        value = tuple(op.attrs[name])
        if len(value) != 2 or any(v < (0 if name.startswith("pads") else 1) for v in value):
            raise InferError(f"{op.kind} attribute '{name}' is {list(value)}; expected 2 values, "
                             + ("each >= 0" if name.startswith("pads") else "each >= 1"))
        values.append(value)
    return values


def _convolution(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, w = ins
    if x.rank != 4 or w.rank != 4:
        raise InferError(f"Convolution takes NCHW data and OIHW weights (rank 4); got ranks "
                         f"{x.rank} and {w.rank}")
    if not w.is_static:
        raise InferError("Convolution weights must have static dims")
    elem = _same_elem(op, ins)
    strides, pb, pe, dil = _pairs(op, "strides", "pads_begin", "pads_end", "dilations")
    if x.dims[1] != w.dims[1] and not isinstance(x.dims[1], Dynamic):
        raise InferError(f"Convolution input has {x.dims[1]} channels but the weights expect "
                         f"{w.dims[1]}")
    oh = _out_size(x.dims[2], w.dims[2], strides[0], pb[0] + pe[0], dil[0])
    ow = _out_size(x.dims[3], w.dims[3], strides[1], pb[1] + pe[1], dil[1])
    return TensorType((x.dims[0], w.dims[0], oh, ow), elem, x.order)


def _max_pool(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    if x.rank != 4:
        raise InferError(f"MaxPool takes NCHW data (rank 4); got rank {x.rank}")
    kernel, strides, pb, pe = _pairs(op, "kernel", "strides", "pads_begin", "pads_end")
    oh = _out_size(x.dims[2], kernel[0], strides[0], pb[0] + pe[0])
    ow = _out_size(x.dims[3], kernel[1], strides[1], pb[1] + pe[1])
    return TensorType(x.dims[:2] + (oh, ow), x.elem, x.order)


def _matmul(op: GraphOp, ins: list[TensorType]) -> TensorType:
    a, b = ins
    if a.rank < 2 or b.rank < 2:
        raise InferError(f"MatMul takes operands of rank >= 2; got ranks {a.rank} and {b.rank}")
    elem = _same_elem(op, ins)
    m, k = a.dims[-2:] if not op.attrs["transpose_a"] else a.dims[:-3:-1]
    k2, n = b.dims[-2:] if not op.attrs["transpose_b"] else b.dims[:-3:-1]
    if k != k2 and not (isinstance(k, Dynamic) or isinstance(k2, Dynamic)):
        raise InferError(f"MatMul inner dims differ: {k} and {k2}")
    try:
        batch = broadcast_shapes(a.dims[:-2], b.dims[:-2])
    except InferError:
        raise InferError("MatMul batch dims: " + _mismatch((a.dims[:-2], b.dims[:-2]))) from None
    dims = batch + (m, n)
    return TensorType(dims, elem, DimsOrder.identity(len(dims)))


def _softmax(op: GraphOp, ins: list[TensorType]) -> TensorType:
    axis = op.attrs["axis"]
    if not -ins[0].rank <= axis < ins[0].rank:
        raise InferError(f"Softmax axis {axis} is out of range for rank {ins[0].rank}")
    return ins[0]


def _reshape(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    shape = list(op.attrs["shape"])
    if shape.count(-1) > 1 or any(isinstance(d, int) and d < 1 and d != -1 for d in shape):
        raise InferError(f"Reshape shape {shape} has a dim < 1; expected sizes >= 1 and at most one -1")
    known = 1
    for d in shape:
        if d != -1:
            known *= d.bound if isinstance(d, Dynamic) else d
    if -1 in shape:
        if x.num_elements % known:
            raise InferError(f"Reshape cannot infer -1: {x.num_elements} elements are not a "
                             f"multiple of {known}")
        fill = x.num_elements // known
        shape[shape.index(-1)] = fill if x.is_static else Dynamic(fill)
    elif x.is_static and all(isinstance(d, int) for d in shape) and known != x.num_elements:
        raise InferError(f"Reshape from {_shape_text(x.dims)} ({x.num_elements} elements) to "
                         f"{_shape_text(tuple(shape))} ({known} elements)")
    return TensorType(tuple(shape), x.elem, DimsOrder.identity(len(shape)))


def _transpose(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x, order = ins[0], tuple(op.attrs["order"])
    if sorted(order) != list(range(x.rank)):
        raise InferError(f"Transpose order {list(order)} is not a permutation of 0..{x.rank - 1}")
    return TensorType(tuple(x.dims[i] for i in order), x.elem, DimsOrder.identity(x.rank))


# ----------------------------------------------------------------- the table

_LAYOUT = AttrSpec("layout", "str", None)   # set by canonicalization on body ports
_UNARY_FLOAT = ("Exp", "Sigmoid", "Tanh", "Sqrt", "Floor", "HSwish", "Erf")
_BINARY_ANY = ("Add", "Subtract", "Multiply", "Maximum", "Minimum")
_BINARY_FLOAT = ("Divide", "Power", "SquaredDifference")
_COMPARISONS = ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual")
_WINDOW = (AttrSpec("strides", "ints", (1, 1)), AttrSpec("pads_begin", "ints", (0, 0)),
           AttrSpec("pads_end", "ints", (0, 0)))

_SPECS = [
    OpSpec("Parameter", 0, "io", _declared, (_LAYOUT,)),
    OpSpec("Constant", 0, "io", _declared),
    OpSpec("Result", 1, "io", _result, (_LAYOUT,)),
    OpSpec("Scalar", 0, "io", _declared),
    *(OpSpec(n, 1, "eltwise", lambda op, ins: ins[0]) for n in ("Abs", "Negative", "Relu")),
    *(OpSpec(n, 1, "eltwise", lambda op, ins: ins[0], float_only=True) for n in _UNARY_FLOAT),
    OpSpec("Clamp", 1, "eltwise", _clamp, (AttrSpec("min", "float"), AttrSpec("max", "float"))),
    OpSpec("Gelu", 1, "eltwise", lambda op, ins: ins[0],
           (AttrSpec("approximation", "enum:erf|tanh", "erf"),), float_only=True),
    OpSpec("Swish", 1, "eltwise", lambda op, ins: ins[0], (AttrSpec("beta", "float", 1.0),),
           float_only=True),
    OpSpec("Elu", 1, "eltwise", lambda op, ins: ins[0], (AttrSpec("alpha", "float"),),
           float_only=True),
    OpSpec("Convert", 1, "eltwise", _convert, (AttrSpec("to", "elem"),)),
    OpSpec("Broadcast", 1, "eltwise", _broadcast, (AttrSpec("shape", "dims"),)),
    *(OpSpec(n, 2, "eltwise", _eltwise) for n in _BINARY_ANY),
    *(OpSpec(n, 2, "eltwise", _eltwise, float_only=True) for n in _BINARY_FLOAT),
    *(OpSpec(n, 2, "eltwise", _compare) for n in _COMPARISONS),
    OpSpec("Select", 3, "eltwise", _select),
    OpSpec("PowerStatic", 1, "snippets", lambda op, ins: ins[0], (AttrSpec("power", "float"),),
           float_only=True),
    OpSpec("FMA", 3, "snippets", _fma, float_only=True),
    OpSpec("MoveBroadcast", 1, "snippets", _move_broadcast, (AttrSpec("dim", "dim"),)),
    OpSpec("Convolution", 2, "layer", _convolution, _WINDOW + (AttrSpec("dilations", "ints", (1, 1)),)),
    OpSpec("MatMul", 2, "layer", _matmul, (AttrSpec("transpose_a", "bool", False),
                                           AttrSpec("transpose_b", "bool", False))),
    OpSpec("Softmax", 1, "layer", _softmax, (AttrSpec("axis", "int", 1),), float_only=True),
    OpSpec("MaxPool", 1, "layer", _max_pool, (AttrSpec("kernel", "ints"),) + _WINDOW),
    OpSpec("Reshape", 1, "layer", _reshape, (AttrSpec("shape", "dims"),)),
    OpSpec("Transpose", 1, "layer", _transpose, (AttrSpec("order", "ints"),)),
]
# The ops of imported models live in their own module; it builds on the helpers above.
from vpuc.ir.graph_ops_nn import NN_SPECS  # noqa: E402
from vpuc.ir.graph_ops_copy import COPY_SPECS  # noqa: E402
from vpuc.ir.graph_ops_quant import QUANT_SPECS  # noqa: E402

_SPECS += NN_SPECS + COPY_SPECS + QUANT_SPECS
OPS: dict[str, OpSpec] = {spec.name: spec for spec in _SPECS}
ELEMENTWISE = frozenset(n for n, s in OPS.items() if s.group == "eltwise")
