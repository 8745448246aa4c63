"""Tolerances derived from the arithmetic, for comparing computed floats (docs/testing.md).

A sum of n terms evaluated in floating point, in any order and with any blocking
(a BLAS GEMM, numpy's pairwise ``sum``, a tiled convolution), is within

    |fl(sum) - sum| <= gamma_n * sum |t_i|,   gamma_n = n u / (1 - n u)

of the exact sum, u being the unit roundoff of the accumulation type (half its
machine epsilon).  This is Higham's bound for a dot product, "Accuracy and
Stability of Numerical Algorithms" (2nd ed.), eq. (3.5): |fl(x^T y) - x^T y| <=
gamma_n |x|^T |y|.  Two evaluations that differ only in summation order (a
region of a convolution against the whole of it; one BLAS kernel against another)
are therefore within 2 gamma_n sum |t_i| of each other.  Nothing tighter holds
in general, and nothing looser is needed.

When both sums are then rounded once to a storage type (float32 accumulation
stored as float16), each rounding adds at most u_out |value| (plus half the
smallest subnormal where the value underflows), so two stored results are within

    2 gamma_n sum |t_i| + u_out (|a| + |b|) + eta_out

of each other: usually identical, at most one storage ulp apart near a tie.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def _finfo(dtype):
    return ml_dtypes.finfo(dtype) if np.dtype(dtype) == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)


def unit_roundoff(dtype) -> float:
    """u = eps / 2: the largest relative error of one rounding to nearest in ``dtype``."""
    return float(_finfo(dtype).eps) / 2


def gamma(n: int, dtype) -> float:
    """Higham's gamma_n = n u / (1 - n u) for ``dtype``'s unit roundoff (requires n u < 1)."""
    nu = n * unit_roundoff(dtype)
    assert nu < 1, f"gamma_{n} is unbounded in {np.dtype(dtype)}"
    return nu / (1 - nu)


def sum_bound(magnitude, terms: int, dtype, evaluations: int = 2) -> np.ndarray:
    """The largest |a - b| between two evaluations of the same sums, elementwise.

    ``magnitude`` is sum |t_i| per element (for a matrix product, |A| @ |B|; for a
    convolution, the convolution of |x| with |w| plus |bias|), ``terms`` the number
    n of terms in each sum, ``dtype`` the accumulation type.  ``evaluations=2``
    when both sides are rounded sums (two orders, two blockings); 1 when one side
    is exact (or computed in a much wider type)."""
    return evaluations * gamma(terms, dtype) * np.asarray(magnitude, dtype=np.float64)


def stored_sum_bound(got, want, magnitude, terms: int, accumulate, store) -> np.ndarray:
    """``sum_bound`` for two sums accumulated in ``accumulate`` and each rounded once
    to ``store``: adds u_store (|got| + |want|) and half the smallest subnormal."""
    info = _finfo(store)
    eta = float(info.smallest_subnormal) / 2
    rounding = unit_roundoff(store) * (np.abs(np.asarray(got, np.float64)) + np.abs(np.asarray(want, np.float64)))
    return sum_bound(magnitude, terms, accumulate) + rounding + 2 * eta


def assert_within_bound(got, want, bound) -> None:
    """|got - want| <= bound elementwise (NaN only where both are NaN, infinities equal)."""
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got64.shape == want64.shape, (got64.shape, want64.shape)
    same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))
    with np.errstate(invalid="ignore"):
        error = np.abs(got64 - want64)
    bad = ~same & ~(error <= np.broadcast_to(bound, error.shape))
    if bad.any():
        i = tuple(int(n) for n in np.unravel_index(np.argmax(bad), bad.shape))
        limit = float(np.broadcast_to(bound, error.shape)[i])
        raise AssertionError(f"{int(bad.sum())} of {bad.size} elements beyond the derived bound, "
                             f"e.g. at {i}: {float(got64[i])!r} vs {float(want64[i])!r} "
                             f"(|diff| {float(error[i]):.3g} > {limit:.3g})")


def assert_sums_close(got, want, magnitude, terms: int, dtype, evaluations: int = 2) -> None:
    """Two evaluations of the same sums in ``dtype`` agree within ``sum_bound``."""
    assert_within_bound(got, want, sum_bound(magnitude, terms, dtype, evaluations))


def assert_stored_sums_close(got, want, magnitude, terms: int, accumulate, store) -> None:
    """Two sums accumulated in ``accumulate`` and stored as ``store`` agree within
    ``stored_sum_bound`` (at most one ``store`` ulp apart in practice)."""
    assert_within_bound(got, want, stored_sum_bound(got, want, magnitude, terms, accumulate, store))


def conv_magnitude(w, b, pads, strides, groups=1, op="Conv"):
    """sum |t_i| of a convolution, as a function of its input x: |x| convolved with |w|
    (float64, via onnx's reference evaluator), plus |b|."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node(op, ["x", "w", "b"], ["y"], pads=pads, strides=strides,
                            group=groups, kernel_shape=list(w.shape[2:]))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE,
                                                                           None)
                                            for n in ("x", "w", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = ReferenceEvaluator(helper.make_model(graph))
    return lambda x: model.run(None, {"x": np.abs(x), "w": np.abs(w).astype(np.float64),
                                      "b": np.abs(b).astype(np.float64)})[0]
