"""The library kernel topk (kernels/topk.s): the K largest or smallest of each row and their
i32 indices, sorted best first, ties to the lower index and NaN ranked as onnxruntime
ranks them (every NaN above +inf: first for largest, last for smallest; -0 ties +0), and
its contract (types, the "topk" shape rule, K in [1, N]) as the kernel enforces it."""

import itertools

import numpy as np
import pytest

from kernel_harness import Tensor, run
from vpuc.abi.params import ScalarArg
from vpuc.cost.topk import topk_call_cycles
from vpuc.ir.types import ElemType
from vpuc.kernel_contracts import library_contracts
from vpuc.verifier.wiring import Operand, shape_problems

E_TYPE, E_SHAPE = 1, 2


def reference(x: np.ndarray, k: int, largest: bool):
    """onnxruntime's order: key descending (largest) or ascending, NaN greatest, ties by
    the lower index; -0 and +0 one key."""
    rows = []
    for row in x.astype(np.float64):
        nan = np.isnan(row)
        value = np.where(nan, 0.0, row) + 0.0       # -0 -> +0
        key = value if largest else -value
        # sort by (not NaN for largest / NaN for smallest, key desc, index asc)
        rank = (nan if largest else ~nan).astype(int)
        order = np.lexsort((np.arange(len(row)), -key, -rank))
        rows.append(order[:k])
    idx = np.array(rows, np.int32).reshape(x.shape[0], k)
    return np.take_along_axis(x, idx, axis=1), idx


def _topk(x, k, largest=True, status=0, values_dtype=None, indices_dtype=np.int32,
          shapes=None):
    r = x.shape[0]
    vshape, ishape = shapes or ((r, k), (r, k))
    values = Tensor(np.zeros(vshape, values_dtype or x.dtype))
    indices = Tensor(np.zeros(ishape, indices_dtype))
    result = run("topk", [Tensor(x)], indices,
                 [ScalarArg(ElemType.I32, k), ScalarArg(ElemType.I32, int(largest))],
                 expect_status=status, reads_scalars=True, first_outputs=[values])
    return values.values, result.output, result


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("n,k", [(1, 1), (7, 1), (7, 7), (33, 5), (64, 20), (100, 100)])
def test_rows_against_the_reference(dtype, largest, n, k):
    rng = np.random.default_rng(n * 100 + k)
    x = (rng.standard_normal((3, n)) * 10).astype(dtype)
    values, indices, _ = _topk(x, k, largest)
    want_values, want_indices = reference(x, k, largest)
    assert np.array_equal(indices, want_indices)
    assert np.array_equal(values.view(np.uint8), want_values.view(np.uint8))


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_ties_go_to_the_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 3, 2, 2, 1, 3]], np.float32)
    for k in (1, 3, 5, 10):
        values, indices, _ = _topk(x, k, largest)
        want_values, want_indices = reference(x, k, largest)
        assert np.array_equal(indices, want_indices), (k, indices, want_indices)


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_nan_and_signed_zero_as_onnxruntime(dtype, largest):
    """onnxruntime 1.2x: [1, nan, 3, 2, -nan, 0] gives indices [1, 4, 2, 3, 0, 5] for
    largest and [5, 0, 3, 2, 1, 4] for smallest; -0 ties +0 by index."""
    x = np.array([[1, np.nan, 3, 2, -np.nan, 0], [0.0, -0.0, 1, -0.0, 0.0, -np.inf]], dtype)
    values, indices, _ = _topk(x, 6, largest)
    want = [[1, 4, 2, 3, 0, 5], [2, 0, 1, 3, 4, 5]] if largest else \
        [[5, 0, 3, 2, 1, 4], [5, 0, 1, 3, 4, 2]]
    assert indices.tolist() == want
    assert np.array_equal(values.view(np.uint8), np.take_along_axis(x, indices, 1).view(np.uint8))


def test_infinities_and_extremes():
    big = np.finfo(np.float32).max
    x = np.array([[-np.inf, big, np.inf, -big, 1e-45, -1e-45, np.inf]], np.float32)
    for largest in (True, False):
        _, indices, _ = _topk(x, 7, largest)
        assert np.array_equal(indices, reference(x, 7, largest)[1])


def test_sorted_input_worst_case():
    """Ascending input for largest: every later element replaces the root."""
    x = np.arange(300, dtype=np.float32)[None, :]
    values, indices, result = _topk(x, 50, True)
    assert indices[0].tolist() == list(range(299, 249, -1))
    assert np.array_equal(values[0], x[0, indices[0]])


def test_bad_types_and_shapes_are_statuses():
    x = np.ones((2, 8), np.float32)
    _topk(x, 3, values_dtype=np.float16, status=E_TYPE)
    _topk(x, 3, indices_dtype=np.int16, status=E_TYPE)
    _topk(x, 9, status=E_SHAPE, shapes=((2, 9), (2, 9)))
    _topk(x, 3, status=E_SHAPE, shapes=((2, 3), (2, 4)))
    _topk(x, 3, status=E_SHAPE, shapes=((1, 3), (1, 3)))


TYPES = {"f16": np.float16, "f32": np.float32, "i16": np.int16, "i32": np.int32}


@pytest.mark.parametrize("elems", list(itertools.product(TYPES, repeat=3)), ids="-".join)
def test_kernel_accepts_exactly_the_contracts_types(elems):
    contract = library_contracts()["topk"]
    x, v, i = (TYPES[e] for e in elems)
    allowed = elems[0] == elems[1] and ElemType(elems[0]) in contract.types["T"] and \
        ElemType(elems[2]) in contract.types["I"]
    _topk(np.ones((2, 5), x), 2, values_dtype=v, indices_dtype=i, status=0 if allowed else E_TYPE)


def test_shape_rule_in_the_verifier():
    def problems(data, values, indices):
        return list(shape_problems("topk", [Operand(None, "input", data), Operand(None, "values", values)],
                                   Operand(None, "indices", indices)))
    assert problems((4, 10), (4, 3), (4, 3)) == []
    assert problems((4, 10), (4, 3), (5, 3))
    assert problems((4, 10), (4, 3), (4, 2))
    assert problems((4, 10), (4, 3), (4, 3, 1))


@pytest.mark.parametrize("rows, n, k", [(1, 64, 4), (2, 100, 5), (2, 100, 100), (1, 300, 10),
                                        (2, 1000, 1), (1, 1000, 100), (1, 1000, 1000), (1, 2000, 500)])
def test_cost_formula_within_10_percent(rows, n, k):
    """vpuc/cost/topk.py against the interpreter on random rows (its sift count assumes
    them: the i-th value beats the root with probability K / i)."""
    x = np.random.default_rng(n + k).standard_normal((rows, n)).astype(np.float32)
    cycles = _topk(x, k)[2].cycles
    assert abs(topk_call_cycles(rows, n, k) - cycles) <= 0.1 * cycles, cycles
