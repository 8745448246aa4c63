"""Element types, f32 compute, rounding to the stored type, and post-ops.

The DPU computes in float32: inputs of any supported type are widened to f32,
products are accumulated in f32, bias and the post-op activation are applied
in f32, and only then is the result rounded once to the output type.  Two
exceptions keep the library useful for testing: float64 inputs are computed in
float64 (so identities can be checked to ~1e-12), and integer outputs are
rounded half-to-even and saturated, the way the DPU's output stage does.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from vpuc.diagnostics import VpucError

BF16 = np.dtype(ml_dtypes.bfloat16)

DTYPES_BY_NAME: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": BF16,
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "u8": np.dtype(np.uint8),
    "i8": np.dtype(np.int8),
    "i32": np.dtype(np.int32),
}
INPUT_DTYPES = frozenset(DTYPES_BY_NAME.values())

DTypeLike = str | np.dtype | type


_RESOLVED: dict = {}     # what resolve_dtype was given -> its answer (asked for every operand)


def resolve_dtype(dtype: DTypeLike) -> np.dtype:
    """Accept "f16"/"bf16"/... names as well as numpy dtypes."""
    try:
        return _RESOLVED[dtype]
    except (KeyError, TypeError):
        pass
    resolved = _resolve_dtype(dtype)
    try:
        _RESOLVED[dtype] = resolved
    except TypeError:       # unhashable: answered, not remembered
        pass
    return resolved


def _resolve_dtype(dtype: DTypeLike) -> np.dtype:
    if isinstance(dtype, str) and dtype in DTYPES_BY_NAME:
        return DTYPES_BY_NAME[dtype]
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None or resolved not in INPUT_DTYPES:
        names = ", ".join(DTYPES_BY_NAME)
        raise VpucError(f"DPU: unsupported element type {dtype!r} (expected one of {names})")
    return resolved


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def compute_dtype(*arrays: np.ndarray | None) -> np.dtype:
    """f32, unless some operand is f64 (then the whole op runs in f64)."""
    for a in arrays:
        if a is not None and a.dtype == _F64:
            return _F64
    return _F32


def check_input(array: np.ndarray, what: str) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise VpucError(f"DPU: {what} must be a numpy array, got {type(array).__name__}")
    resolve_dtype(array.dtype)
    return array


_F16_TO_F32_TABLE: np.ndarray | None = None


def _f16_table() -> np.ndarray:
    # numpy's own f16->f32 cast is scalar code (~1.5 ns/element here); a 256 KiB
    # lookup table indexed by the raw bits is exact and about 3x faster.
    global _F16_TO_F32_TABLE
    if _F16_TO_F32_TABLE is None:
        bits = np.arange(1 << 16, dtype=np.uint16)
        _F16_TO_F32_TABLE = bits.view(np.float16).astype(np.float32)
    return _F16_TO_F32_TABLE


def to_compute(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Widen ``array`` to the compute type (returns it unchanged if already so)."""
    if array.dtype == dtype:
        return array
    if array.dtype == np.float16 and dtype == np.float32:
        return _f16_table().take(array.view(np.uint16))
    return array.astype(dtype)


def round_to(values: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """Round compute-type ``values`` once to the stored type ``dtype``; a converted result
    is C-contiguous whatever the layout of ``values`` (a strided GEMM output)."""
    target = resolve_dtype(dtype)
    if target == values.dtype:
        return values
    if target.kind in "iu":
        info = np.iinfo(target)
        rounded = np.rint(values)  # half to even
        np.clip(rounded, info.min, info.max, out=rounded)
        return rounded.astype(target, order="C")
    return values.astype(target, order="C")  # float16 and bfloat16 round to nearest even


POST_OP_KINDS = ("none", "relu", "leaky_relu", "clamp", "sigmoid", "tanh")


@dataclass(frozen=True)
class PostOp:
    """The activation fused after bias, applied in the compute type."""

    kind: str = "none"
    slope: float = 0.0            # leaky_relu: y = x if x >= 0 else slope * x
    low: float = float("-inf")    # clamp bounds
    high: float = float("inf")

    def __post_init__(self) -> None:
        if self.kind not in POST_OP_KINDS:
            raise VpucError(f"DPU: unknown post-op {self.kind!r} "
                            f"(expected one of {', '.join(POST_OP_KINDS)})")
        if self.kind == "clamp" and not self.low <= self.high:
            raise VpucError(f"DPU: clamp post-op needs low <= high, got [{self.low}, {self.high}]")

    @staticmethod
    def relu() -> "PostOp":
        return PostOp("relu")

    @staticmethod
    def leaky_relu(slope: float) -> "PostOp":
        return PostOp("leaky_relu", slope=float(slope))

    @staticmethod
    def clamp(low: float, high: float) -> "PostOp":
        return PostOp("clamp", low=float(low), high=float(high))

    @staticmethod
    def sigmoid() -> "PostOp":
        return PostOp("sigmoid")

    @staticmethod
    def tanh() -> "PostOp":
        return PostOp("tanh")


def as_post_op(post_op: PostOp | str | None) -> PostOp:
    if post_op is None:
        return _NO_POST_OP
    if isinstance(post_op, str):
        return PostOp(post_op)
    return post_op


_NO_POST_OP = PostOp()


def apply_post_op(values: np.ndarray, post_op: PostOp | str | None) -> np.ndarray:
    """Apply the activation in place on a compute-type array and return it."""
    op = as_post_op(post_op)
    if op.kind == "relu":
        np.maximum(values, 0, out=values)
    elif op.kind == "leaky_relu":
        np.multiply(values, op.slope, out=values, where=values < 0)
    elif op.kind == "clamp":
        np.clip(values, op.low, op.high, out=values)
    elif op.kind == "sigmoid":
        # 1 / (1 + exp(-x)), written to stay finite for large |x|.
        np.negative(values, out=values)
        with np.errstate(over="ignore"):  # exp overflow -> inf -> sigmoid 0, as wanted
            np.exp(values, out=values)
        values += 1
        np.reciprocal(values, out=values)
    elif op.kind == "tanh":
        np.tanh(values, out=values)
    return values


def finish(values: np.ndarray, bias: np.ndarray | None, channel_axis: int,
           post_op: PostOp | str | None, out_dtype: DTypeLike) -> np.ndarray:
    """The DPU output stage: + bias[channel], activation, one rounding."""
    if bias is not None:
        shape = [1] * values.ndim
        shape[channel_axis] = -1
        values += to_compute(bias, values.dtype).reshape(shape)
    apply_post_op(values, post_op)
    return round_to(values, out_dtype)
