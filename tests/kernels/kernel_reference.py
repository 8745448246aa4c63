"""numpy references and the documented tolerances of the library kernels (docs/kernels.md)."""

from __future__ import annotations

import numpy as np

from kernel_harness import ulp_distance

EPS32 = 2.0 ** -24           # half an ulp of 1.0 in f32: the unit roundoff
K0 = 2 * np.sqrt(2 / np.pi)  # gelu: x * sigmoid(x (K0 + K1 x^2))
K1 = K0 * 0.044715
CLAMP_BOUNDS = (-1.5, 2.25)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# Kernels whose result is exactly numpy's in the tensor's type (f16 arithmetic in
# numpy is f32 arithmetic rounded once, as the ISA's f16 lanes are).
EXACT_UNARY = {
    "copy": lambda x: x,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "clamp": lambda x: np.minimum(np.maximum(x, x.dtype.type(CLAMP_BOUNDS[0])),
                                  x.dtype.type(CLAMP_BOUNDS[1])),
    "tanh": lambda x: np.tanh(np.ascontiguousarray(x, np.float32)).astype(x.dtype),
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
          "min": np.minimum}

# Kernels computed in f32: (float64 reference, the argument z of their exp, or None)
F32_MATH = {
    "sigmoid": (_sigmoid, lambda x: x),
    "swish": (lambda x: x * _sigmoid(x), lambda x: x),
    "gelu": (lambda x: x * _sigmoid(x * (K0 + K1 * x * x)), lambda x: x * (K0 + K1 * x * x)),
    "hswish": (lambda x: x * np.clip(x + 3, 0, 6) / 6, None),
}
# tanh's documented bound vs the float64 function (beyond being numpy's f32 tanh)
TANH_F32_ULP = 3


def gelu_tanh_form(x):
    """The textbook tanh approximation; the same function as F32_MATH['gelu']."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def check_f32_math(name: str, x: np.ndarray, out: np.ndarray) -> None:
    """f16: within 1 ulp of the float64 value rounded to f16.  f32: relative error
    <= (4 + 2|z|) eps32, z the argument of exp (its rounding error is amplified by
    |z|), plus 1e-30 absolute where the result underflows; hswish 4 eps32."""
    ref_fn, z_fn = F32_MATH[name]
    wide = x.astype(np.float64)
    ref = ref_fn(wide)
    if out.dtype == np.float16:
        assert_ulp(out, ref.astype(np.float16), 1)
        return
    z = np.abs(z_fn(wide)) if z_fn else 0.0
    bound = (4 + 2 * z) * EPS32 * np.abs(ref) + 1e-30
    assert_within(out, ref, bound)


def assert_ulp(out: np.ndarray, ref: np.ndarray, ulps: int) -> None:
    distance = ulp_distance(out, ref)
    if distance.size and distance.max() > ulps:
        i = np.unravel_index(np.argmax(distance), distance.shape)
        raise AssertionError(f"{distance.max()} ulp > {ulps} at {i}: {out[i]} vs {ref[i]}")


def assert_within(out: np.ndarray, ref: np.ndarray, bound) -> None:
    error = np.abs(out.astype(np.float64) - ref)
    bound = np.broadcast_to(bound, error.shape)
    bad = ~(error <= bound)
    if bad.any():
        i = np.unravel_index(np.argmax(bad), bad.shape)
        raise AssertionError(f"{int(bad.sum())} elements out of tolerance, e.g. at {i}: "
                             f"{out[i]} vs {ref[i]} (error {error[i]:.3g} > {bound[i]:.3g})")


# --- softmax and reductions over the last logical axis ------------------------------

def softmax_ref(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check_softmax(x: np.ndarray, out: np.ndarray) -> None:
    """f16: 1 ulp of the float64 softmax rounded to f16.  f32: relative error
    <= (8 + 2|x - max| + n/4) eps32: exp of a rounded argument, f32 sums of n/4 terms
    per lane, the reciprocal and the scaling."""
    ref = softmax_ref(x)
    if out.dtype == np.float16:
        assert_ulp(out, ref.astype(np.float16), 1)
        return
    wide = x.astype(np.float64)
    z = np.abs(wide - wide.max(-1, keepdims=True))
    n = x.shape[-1] if x.ndim else 1
    assert_within(out, ref, (8 + 2 * z + n / 4) * EPS32 * ref + 1e-38)


def check_reduction(x: np.ndarray, out: np.ndarray, mean: bool) -> None:
    """|out - ref| <= n eps32 sum|x| (f32 accumulation, n terms) [/ n for the mean],
    plus the output's rounding: 1 ulp of f16, or eps32 |ref| for f32."""
    wide = x.astype(np.float64).reshape(x.shape if x.ndim else (1,))
    n = wide.shape[-1]
    ref = wide.sum(-1, keepdims=True)
    bound = n * EPS32 * np.abs(wide).sum(-1, keepdims=True)
    if mean:
        ref, bound = ref / n, bound / n
    ref = ref.reshape(out.shape)
    bound = bound.reshape(out.shape)
    if out.dtype == np.float16:
        bound = bound + np.abs(np.spacing(ref.astype(np.float16))).astype(np.float64)
    else:
        bound = bound + 2 * EPS32 * np.abs(ref)
    assert_within(out, ref, bound)
