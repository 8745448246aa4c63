"""numpy references of the library's ACT SHAVE kernels, by library name.

Each function takes the kernel's memref arguments but the last (the output) as
float32 arrays of their logical shapes, then its scalar arguments, and
returns the output values in float32 (a tuple, one per output, for a kernel of
several: topk); the caller rounds them to each output's type.  Softmax and the reductions work along the last logical dim, passed as
``axis`` (None for a scalar): the kernels' contract (docs/kernels.md, "reduce
row"), whatever the dims order -- for NHWC that is W, not the innermost C.
gelu is the tanh approximation the kernel implements, not the exact erf form.

``library_reference`` hands out a reference only for a kernel declared with
the library's contract (``kernels/contracts.toml``): a program read from a blob
that declares, say, an extra scalar gets a clear error instead of a call with
the wrong arguments.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from vpuc.diagnostics import Loc, VpucError
from vpuc.ir.module import KernelDecl
from vpuc.kernel_contracts import library_contract


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:
    """The kernel's gelu: the tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x +
    0.044715 x^3), evaluated as the identical x sigmoid(2u) in float64 (no cancellation in
    1 + tanh u for x << 0) and returned in the input's type."""
    w = x.astype(np.float64)
    u = np.sqrt(2.0 / np.pi) * (w + 0.044715 * w * w * w)
    return (w * _sigmoid(2.0 * u)).astype(x.dtype)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _mvn(x: np.ndarray, eps: float, eps_outside: int, axis: int) -> np.ndarray:
    """The kernel's mvn in float64: (x - mean) / sqrt(var + eps), or / (sqrt(var) + eps)."""
    w = x.astype(np.float64)
    d = w - w.mean(axis=axis, keepdims=True)
    var = (d * d).mean(axis=axis, keepdims=True)
    scale = 1.0 / (np.sqrt(var) + eps) if eps_outside else 1.0 / np.sqrt(var + eps)
    return (d * scale).astype(x.dtype)


REFERENCES = {
    "copy": lambda x, axis: x,
    "convert": lambda x, axis: x,
    "relu": lambda x, axis: np.maximum(x, 0),
    "clamp": lambda x, lo, hi, axis: np.clip(x, lo, hi),
    "sigmoid": lambda x, axis: _sigmoid(x),
    "tanh": lambda x, axis: np.tanh(x),
    "gelu": lambda x, axis: _gelu(x),
    "hswish": lambda x, axis: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "swish": lambda x, axis: x * _sigmoid(x),
    "add": lambda a, b, axis: a + b,
    "sub": lambda a, b, axis: a - b,
    "mul": lambda a, b, axis: a * b,
    "max": lambda a, b, axis: np.maximum(a, b),
    "min": lambda a, b, axis: np.minimum(a, b),
    "softmax": lambda x, axis: _softmax(x, axis),
    "reduce_sum": lambda x, axis: x.sum(axis=axis, keepdims=True),
    "reduce_mean": lambda x, axis: x.mean(axis=axis, keepdims=True),
    "reduce_max": lambda x, axis: x.max(axis=axis, keepdims=True),
    "log_softmax": lambda x, axis: _log_softmax(x, axis),
    "mvn": lambda x, eps, eps_outside, axis: _mvn(x, eps, eps_outside, axis),
    "gather": lambda data, indices, out, first, extent, axis: _gather(data, indices, out,
                                                                      first, extent),
    "topk": lambda x, k, largest, axis: _topk(x, int(k), bool(largest)),
}
# kernels that write only part of their output: their reference takes it as it stands, after
# the inputs
PARTIAL_OUTPUT = frozenset({"gather"})


def _topk(x, k, largest) -> tuple[np.ndarray, np.ndarray]:
    """topk's rows of x [R, N]: the values [R, K] and their indices, best first, in
    onnxruntime's order: every NaN above +inf, -0 tying +0, ties to the lower index."""
    nan = np.isnan(x)
    key = np.where(nan, 0.0, x).astype(np.float64) + 0.0         # -0 -> +0
    key = key if largest else -key
    rank = nan if largest else ~nan
    order = np.stack([np.lexsort((np.arange(x.shape[1]), -row_key, -row_rank))[:k]
                      for row_key, row_rank in zip(key, rank.astype(np.int64))])
    indices = order.astype(np.int32).reshape(x.shape[0], k)
    return np.take_along_axis(x, indices, axis=1), indices


def _gather(data, indices, out, first, extent) -> np.ndarray:
    """gather's chunk: the rows whose (wrapped) index lies in [first, first + K) of data
    [A, K, R] into out [A, N, R], the other rows as they are."""
    if data.ndim == 2:                  # [K, R] and [N, R]: A = 1
        return _gather(data[None], indices, out[None], first, extent)[0]
    idx = indices.astype(np.int64).reshape(-1)
    idx = np.where(idx < 0, idx + int(extent), idx) - int(first)
    mine = (idx >= 0) & (idx < data.shape[1])
    result = out.copy()
    result[:, mine] = data[:, idx[mine]]
    return result


def _kinds(params) -> list[str]:
    return ["memref" if p.is_memref else str(p.scalar) for p in params]


def library_reference(kernel: KernelDecl, where: str, loc: Loc | None = None) -> Callable | None:
    """The numpy reference of library kernel ``kernel`` (None if the table has none), called
    ``fn(*inputs, *scalars, axis=...)``; a declaration whose memrefs and scalars differ from
    the library's contract is an error naming the task (``where``) and the contract."""
    library = kernel.source.ref
    fn, contract = REFERENCES.get(library), library_contract(library)
    if fn is None or contract is None:
        return None
    expected = ["memref" if a.memref else a.elem for a in contract.args]
    if _kinds(kernel.params) != expected:
        declared = ", ".join(str(p) for p in kernel.params)
        raise VpucError(f"--reference: {where} calls @{kernel.name}, declared ({declared}) from "
                        f"library \"{library}\", whose reference follows the library's "
                        f"contract: {contract.text()}", loc)
    return fn
