"""The reference executor: runs a graph in numpy, the oracle for every later stage.

Each op computes in float32 (float64 for f64 tensors) and rounds its result to
its stored element type, as the hardware does at the end of every kernel:
f16 and bf16 round to nearest even; integer results are truncated toward zero
and saturated (NaN gives 0), like the ISA's ``vcvt.i32.f32``.  ``FMA`` rounds
once, from float64, like ``vfma``.  bf16 arrays use ml_dtypes' ``bfloat16``.

Dynamic dims take their run-time size from the input arrays; a Broadcast's or
Result's dynamic dims take theirs from the operand.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import ml_dtypes
import numpy as np

from vpuc import const_files
from vpuc.diagnostics import VpucError
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT, SCALAR, Graph, GraphOp
from vpuc.ir.types import Dynamic, ElemType, TensorType
from vpuc.reference.graph_copy import COPY_LAYERS
from vpuc.reference.graph_nn import NN_LAYERS, NN_UNARY
from vpuc.reference.graph_quant import QUANT_LAYERS

STORAGE = {
    ElemType.F16: np.float16, ElemType.BF16: ml_dtypes.bfloat16, ElemType.F32: np.float32,
    ElemType.F64: np.float64, ElemType.U8: np.uint8, ElemType.I8: np.int8,
    ElemType.U16: np.uint16, ElemType.I16: np.int16, ElemType.U32: np.uint32,
    ElemType.I32: np.int32, ElemType.I64: np.int64,
}


def storage_dtype(elem: ElemType):
    return STORAGE[elem]


def round_to(values: np.ndarray, elem: ElemType) -> np.ndarray:
    """Round computed values to the stored type (see the module docstring)."""
    dtype = STORAGE[elem]
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        with np.errstate(invalid="ignore"):
            clean = np.nan_to_num(np.trunc(values.astype(np.float64)), nan=0.0)
        return np.clip(clean, info.min, info.max).astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):    # inf and NaN are the IEEE results
        return np.asarray(values).astype(dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    # Maclaurin series in float64: exact to ~1e-12 for |x| <= 4; beyond, erf rounds to +-1 in f32.
    x64 = x.astype(np.float64)
    small = np.clip(x64, -4.0, 4.0)
    term, total = small.copy(), small.copy()
    square = small * small
    for n in range(1, 90):
        term = term * -square / n
        total += term / (2 * n + 1)
    out = np.where(np.abs(x64) > 4.0, np.sign(x64), total * (2.0 / math.sqrt(math.pi)))
    return out.astype(x.dtype)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _gelu(x, attrs):
    if attrs["approximation"] == "tanh":
        c = np.asarray(math.sqrt(2 / math.pi), x.dtype)
        return 0.5 * x * (1 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x * x * x)))
    return 0.5 * x * (1 + _erf(x * np.asarray(1 / math.sqrt(2), x.dtype)))


def _hswish(x):
    # times 1/6 rather than over 6, as OpenVINO's CPU plugin computes it (one f32 ulp
    # apart at most); a division is a slow, unpipelined unit on most targets
    return x * np.clip(x + 3, 0, 6) * np.asarray(1 / 6, x.dtype)


def _elu(x, alpha):
    with np.errstate(over="ignore"):
        return np.where(x > 0, x, alpha * (np.exp(x) - 1))


def _power_static(x, power):
    """``x ** power``, with the exponents the kernel generator specializes spelled out as
    the operation it emits (vpuc/fusion/generator/emitters/math_ops.py, _power_static):
    the result must not depend on numpy's pow, which before 2.3 computes pow(x, 0.5) one
    f32 ulp off sqrt(x) and pow(-0, 0.5) = +0."""
    p = x.dtype.type(power)
    if p == 0:
        return np.ones_like(x)           # pow(nan, 0) = 1 too
    if p == 1:
        return x
    if p == 2:
        return x * x
    if p == 0.5:
        return np.sqrt(x)                # sqrt(-0) = -0
    if p == -1:
        return np.asarray(1, x.dtype) / x
    return np.power(x, p)


def _power(a, b):
    """Power with the same specializations wherever the exponent is one of them (the
    data-flow optimizer turns Power by a constant into PowerStatic)."""
    out = np.power(a, b)
    a, b = np.broadcast_arrays(a, b)
    for p in (0, 1, 2, 0.5, -1):
        out = np.where(b == p, _power_static(a, p), out)
    return out


UNARY = {
    "Abs": lambda x, a: np.abs(x), "Negative": lambda x, a: -x,
    "Relu": lambda x, a: np.maximum(x, 0), "Exp": lambda x, a: np.exp(x),
    "Sigmoid": lambda x, a: _sigmoid(x), "Tanh": lambda x, a: np.tanh(x),
    "Sqrt": lambda x, a: np.sqrt(x), "Floor": lambda x, a: np.floor(x),
    "HSwish": lambda x, a: _hswish(x), "Erf": lambda x, a: _erf(x),
    "Gelu": _gelu, "Swish": lambda x, a: x * _sigmoid(x * np.asarray(a["beta"], x.dtype)),
    "Elu": lambda x, a: _elu(x, np.asarray(a["alpha"], x.dtype)),
    "Clamp": lambda x, a: np.clip(x, a["min"], a["max"]).astype(x.dtype),
    "PowerStatic": lambda x, a: _power_static(x, a["power"]),
}
BINARY = {
    "Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Divide": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum, "Power": _power,
    "SquaredDifference": lambda a, b: (a - b) * (a - b),
}
COMPARE = {"Equal": np.equal, "NotEqual": np.not_equal, "Less": np.less,
           "LessEqual": np.less_equal, "Greater": np.greater, "GreaterEqual": np.greater_equal}


def const_base(op: GraphOp) -> Path:
    """The directory a relative ``file`` path of ``op`` starts at: its .vir file's."""
    return Path(op.loc.file).parent if op.loc.line > 0 else Path(".")


def constant_value(op: GraphOp, base_dir: str | Path | None = None) -> np.ndarray:
    """The array a Constant or Scalar holds, in its storage type.  A relative ``file``
    path starts at ``base_dir``, by default the directory of the .vir file that wrote
    the op (as a task-level ``const`` does)."""
    t, init = op.type, op.const
    shape = t.bound_shape
    if init.path is not None:
        try:
            data = const_files.load(init.path, const_base(op) if base_dir is None else base_dir)
        except (OSError, ValueError) as exc:
            raise VpucError(f"cannot load constant %{op.result} from {init.path}: {exc}", op.loc) from None
        if data.size != t.num_elements:
            raise VpucError(f"constant %{op.result}: {init.path} holds {data.size} values; "
                            f"expected {t.num_elements}", op.loc)
        data = data.reshape(shape)
    elif init.splat is not None:
        data = np.full(shape, init.splat, dtype=np.float64)
    else:
        data = np.asarray(init.values, dtype=np.float64).reshape(shape)
    return round_to(np.asarray(data), t.elem)


def runtime_dims(dims, like: tuple[int, ...]) -> tuple[int, ...]:
    """Static dims as written; dynamic dims from the right-aligned operand shape."""
    offset = len(dims) - len(like)
    return tuple(like[i - offset] if isinstance(d, Dynamic) else d for i, d in enumerate(dims))


def _window(x: np.ndarray, k: int, axis: int, start: int, stride: int, count: int, dilation=1):
    index = [slice(None)] * x.ndim
    first = start * dilation
    index[axis] = slice(first, first + stride * (count - 1) + 1, stride)
    return x[tuple(index)]


def _conv(x, w, attrs):
    (s0, s1), (pb0, pb1), (pe0, pe1), (d0, d1) = (attrs[n] for n in
                                                  ("strides", "pads_begin", "pads_end", "dilations"))
    xp = np.pad(x, ((0, 0), (0, 0), (pb0, pe0), (pb1, pe1)))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - d0 * (kh - 1) - 1) // s0 + 1
    ow = (xp.shape[3] - d1 * (kw - 1) - 1) // s1 + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), x.dtype)
    for i in range(kh):
        rows = _window(xp, kh, 2, i, s0, oh, d0)
        for j in range(kw):
            patch = _window(rows, kw, 3, j, s1, ow, d1)
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def _max_pool(x, attrs):
    (k0, k1), (s0, s1) = attrs["kernel"], attrs["strides"]
    (pb0, pb1), (pe0, pe1) = attrs["pads_begin"], attrs["pads_end"]
    xp = np.pad(x, ((0, 0), (0, 0), (pb0, pe0), (pb1, pe1)), constant_values=-np.inf)
    oh, ow = (xp.shape[2] - k0) // s0 + 1, (xp.shape[3] - k1) // s1 + 1
    out = np.full(x.shape[:2] + (oh, ow), -np.inf, x.dtype)
    for i in range(k0):
        rows = _window(xp, k0, 2, i, s0, oh)
        for j in range(k1):
            out = np.maximum(out, _window(rows, k1, 3, j, s1, ow))
    return out


def _softmax(x, axis):
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def _reshape(x, dims):
    shape = [-1 if isinstance(d, Dynamic) else d for d in dims]
    if shape.count(-1) > 1:
        raise VpucError(f"Reshape to {list(dims)}: more than one size is only known at run time")
    return x.reshape(shape)


def _matmul(a, b, attrs):
    if attrs["transpose_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


LAYERS = {
    "Convolution": lambda args, a: _conv(args[0], args[1], a),
    "MatMul": lambda args, a: _matmul(args[0], args[1], a),
    "Softmax": lambda args, a: _softmax(args[0], a["axis"]),
    "MaxPool": lambda args, a: _max_pool(args[0], a),
    "Reshape": lambda args, a: _reshape(args[0], a["shape"]),
    "Transpose": lambda args, a: np.transpose(args[0], a["order"]),
}

# The ops of imported models (vpuc/ir/graph_ops_nn.py) have their semantics in their own module.
UNARY.update(NN_UNARY)
LAYERS.update(NN_LAYERS)
LAYERS.update(COPY_LAYERS)


def run_op(op: GraphOp, args: list[np.ndarray], base_dir: str | Path | None = None) -> np.ndarray:
    """One op on stored-type arrays; returns its result in its stored type."""
    kind, attrs, out = op.kind, op.attrs, op.type
    if kind in (CONSTANT, SCALAR):
        return constant_value(op, base_dir)
    if kind == "Select":
        return round_to(np.where(args[0] != 0, args[1], args[2]), out.elem)
    if kind == "Convert":
        return round_to(args[0].astype(np.float64), out.elem)
    if kind == "Broadcast":
        return np.broadcast_to(args[0], runtime_dims(attrs["shape"], args[0].shape)).copy()
    if kind == "MoveBroadcast":
        return np.broadcast_to(args[0], args[0].shape[:-1] + (attrs["dim"],)).copy()
    if kind in QUANT_LAYERS:          # exact integers: never through the float path below
        return QUANT_LAYERS[kind](args, attrs)
    if kind == "FMA":
        a, b, c = (x.astype(np.float64) for x in args)
        return round_to(a * b + c, out.elem)
    wide = out.elem is ElemType.F64 or any(x.dtype == np.float64 for x in args)
    compute = np.float64 if wide else np.float32
    xs = [x.astype(compute) for x in args]
    with np.errstate(all="ignore"):
        if kind in COMPARE:
            return COMPARE[kind](*xs).astype(np.uint8)
        if kind in UNARY:
            value = UNARY[kind](xs[0], attrs)
        elif kind in BINARY:
            value = BINARY[kind](*xs)
        elif kind in LAYERS:
            value = LAYERS[kind](xs, attrs)
        else:
            raise VpucError(f"the reference executor has no rule for {kind}", op.loc)
    return round_to(np.asarray(value), out.elem)


def check_input(op: GraphOp, array: np.ndarray) -> np.ndarray:
    """An input array fitted to a Parameter: same rank, static dims equal, dynamic within bound."""
    t: TensorType = op.type
    array = np.asarray(array)
    ok = array.ndim == t.rank and all(
        (a <= d.bound if isinstance(d, Dynamic) else a == d) for a, d in zip(array.shape, t.dims))
    if not ok:
        raise VpucError(f"input %{op.result} has shape {list(array.shape)}; the Parameter's type is {t}",
                        op.loc)
    with np.errstate(invalid="ignore"):      # a signalling NaN input widens to a quiet one
        return round_to(array.astype(np.float64), t.elem)


def run_graph_values(graph: Graph, inputs: Mapping[str, np.ndarray],
                     base_dir: str | Path | None = None) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Every value of ``graph`` by name, and the Results' arrays in order."""
    values: dict[str, np.ndarray] = {}
    outputs: list[np.ndarray] = []
    for op in graph.ops:
        if op.kind == PARAMETER:
            if op.result not in inputs:
                raise VpucError(f"no input given for %{op.result}", op.loc)
            values[op.result] = check_input(op, inputs[op.result])
        elif op.kind == RESULT:
            value = values[op.operands[0]]
            outputs.append(np.broadcast_to(value, runtime_dims(op.type.dims, value.shape)).copy())
        else:
            values[op.result] = run_op(op, [values[o] for o in op.operands], base_dir)
    return values, outputs


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray],
              base_dir: str | Path | None = None) -> list[np.ndarray]:
    """The Results of ``graph`` for ``inputs`` (arrays keyed by Parameter name)."""
    return run_graph_values(graph, inputs, base_dir)[1]
