"""tests/tolerances.py: the derived bounds hold for sums in different orders, and catch
anything beyond them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tolerances import (assert_stored_sums_close, assert_sums_close, gamma, stored_sum_bound,
                              unit_roundoff)


def test_unit_roundoff_and_gamma():
    assert unit_roundoff(np.float64) == 2.0 ** -53 and unit_roundoff(np.float16) == 2.0 ** -11
    assert gamma(10, np.float32) == pytest.approx(10 * 2.0 ** -24, rel=1e-6)
    with pytest.raises(AssertionError, match="unbounded"):
        gamma(2 ** 11, np.float16)


def test_sums_in_any_order_stay_within_the_bound():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 300)).astype(np.float32), rng.standard_normal((300, 30)).astype(np.float32)
    blas = a @ b
    products = a[:, :, None] * b[None, :, :]                    # exact in f64, rounded in f32
    backwards = np.zeros((40, 30), np.float32)
    for k in range(299, -1, -1):                                # one term at a time, reversed
        backwards += products[:, k, :]
    magnitude = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert_sums_close(blas, backwards, magnitude, terms=300, dtype=np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert_sums_close(blas, exact, magnitude, terms=300, dtype=np.float32, evaluations=1)
    # Moving one element just past the bound fails.
    bound = 2 * gamma(300, np.float32) * magnitude[3, 4]
    off = backwards.astype(np.float64)
    off[3, 4] = blas[3, 4] + 1.01 * bound
    with pytest.raises(AssertionError, match=r"1 of 1200 elements beyond the derived bound, e.g. at \(3, 4\)"):
        assert_sums_close(blas, off, magnitude, terms=300, dtype=np.float32)


def test_a_tie_stored_as_f16_is_one_ulp_apart_and_within_the_bound():
    tie = 1 + 2.0 ** -11                                         # halfway between two f16 values
    below, above = np.float32(tie - 2.0 ** -20), np.float32(tie + 2.0 ** -20)
    got, want = np.float16(below).reshape(1), np.float16(above).reshape(1)
    assert want[0] - got[0] == np.float16(2.0 ** -10)            # one f16 ulp apart
    assert_stored_sums_close(got, want, np.array([1.0]), 2, np.float32, np.float16)
    assert stored_sum_bound(got, want, np.array([1.0]), 2, np.float32, np.float16)[0] < 2.0 ** -9
    with pytest.raises(AssertionError):
        assert_stored_sums_close(got, want + np.float16(2.0 ** -9), np.array([1.0]), 2, np.float32, np.float16)
