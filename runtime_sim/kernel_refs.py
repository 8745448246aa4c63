"""numpy references of the library's ACT SHAVE kernels, by library name.

Each function takes the kernel's memref arguments but the last (the output) as
float32 arrays of their logical shapes, then its scalar arguments, and
returns the output values in float32; the caller rounds them to the output
type.  Reductions and softmax work along the innermost dim in memory (the
kernels walk memory innermost first), passed as ``axis``.
"""

from __future__ import annotations

import numpy as np


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), as numpy has no erf.
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                          + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


REFERENCES = {
    "copy": lambda x, axis: x,
    "convert": lambda x, axis: x,
    "relu": lambda x, axis: np.maximum(x, 0),
    "clamp": lambda x, lo, hi, axis: np.clip(x, lo, hi),
    "sigmoid": lambda x, axis: _sigmoid(x),
    "tanh": lambda x, axis: np.tanh(x),
    "gelu": lambda x, axis: 0.5 * x * (1.0 + _erf(x / np.sqrt(np.float32(2.0)))),
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
}
