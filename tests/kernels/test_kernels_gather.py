"""The library kernel gather (kernels/gather.s): rows picked by run-time indices, bit for
bit (numpy's take), negative indices wrapped, a chunk of the table per call, every index
checked before anything is written (status E_INDEX, the index in s1), and its contract
(types and the "gather" shape rule) as the kernel enforces it."""

import itertools

import ml_dtypes
import numpy as np
import pytest

from kernel_harness import Tensor, run
from vpuc.abi.params import ScalarArg
from vpuc.ir.types import ElemType
from vpuc.kernel_contracts import library_contracts
from vpuc.verifier.wiring import Operand, shape_problems

E_TYPE, E_SHAPE, E_ORDER, E_INDEX = 1, 2, 3, 4
ROW_TYPES = [np.float16, np.float32, ml_dtypes.bfloat16, np.int32, np.uint8, np.int8, np.int16]


def _gather(data, indices, out_shape=None, first=0, extent=None, status=0, output=None):
    extent = data.shape[1] if extent is None else extent
    shape = out_shape or (data.shape[0], len(indices), data.shape[2])
    out = Tensor(np.zeros(shape, data.dtype)) if output is None else output
    return run("gather", [Tensor(data), Tensor(np.asarray(indices))], out,
               [ScalarArg(ElemType.I32, first), ScalarArg(ElemType.I32, extent)],
               expect_status=status, reads_scalars=True)


@pytest.mark.parametrize("dtype", ROW_TYPES, ids=lambda t: np.dtype(t).name)
def test_rows_bit_for_bit(dtype):
    rng = np.random.default_rng(1)
    data = (rng.standard_normal((2, 11, 37)) * 50).astype(dtype)
    indices = rng.integers(-11, 11, 9).astype(np.int32)
    got = _gather(data, indices).output
    assert np.array_equal(got.view(np.uint8), np.take(data, indices, axis=1).view(np.uint8))


@pytest.mark.parametrize("row", [1, 8, 16, 31, 64, 200, 768])
def test_every_row_length(row):
    """The byte copy's paths: masked tail only, 32-byte pairs, 128-byte blocks."""
    data = np.arange(5 * row, dtype=np.float16).reshape(1, 5, row)
    indices = np.array([4, 0, -2], np.int32)
    assert np.array_equal(_gather(data, indices).output, np.take(data, indices, axis=1))


def test_negative_indices_wrap_as_onnx_says():
    data = np.arange(12, dtype=np.float32).reshape(1, 4, 3)
    got = _gather(data, np.array([-1, -4], np.int32)).output
    assert np.array_equal(got[0], data[0, [3, 0]])


def test_chunks_fill_one_output():
    """A table gathered in chunks [first, first + K): each call writes only its rows."""
    rng = np.random.default_rng(2)
    table = rng.standard_normal((1, 12, 20)).astype(np.float16)
    indices = np.array([11, 0, 5, -7, 6, 3], np.int32)
    output = Tensor(np.zeros((1, 6, 20), np.float16))
    written = np.zeros((1, 6, 20), np.float16)
    for first in range(0, 12, 4):
        chunk = np.ascontiguousarray(table[:, first:first + 4])
        got = _gather(chunk, indices, first=first, extent=12).output
        mine = ((indices % 12) >= first) & ((indices % 12) < first + 4)
        written[:, mine] = got[:, mine]
        output.values = got
    assert np.array_equal(written, np.take(table, indices, axis=1))


@pytest.mark.parametrize("bad", [4, -5, 2**31 - 1, -2**31])
def test_an_index_out_of_range_is_a_status_and_nothing_written(bad):
    data = np.ones((1, 4, 8), np.float16)
    result = _gather(data, np.array([0, bad, 1], np.int32), status=E_INDEX)
    assert result.status == E_INDEX


TYPES = {"f16": np.float16, "f32": np.float32, "i16": np.int16, "i32": np.int32,
         "u8": np.uint8}


@pytest.mark.parametrize("elems", list(itertools.product(TYPES, repeat=3)),
                         ids=lambda e: "-".join(e))
def test_kernel_accepts_exactly_the_contracts_types(elems):
    contract = library_contracts()["gather"]
    data_t, index_t, out_t = elems
    allowed = (data_t == out_t and ElemType(data_t) in contract.types["T"]
               and ElemType(index_t) in contract.types["I"])
    data = np.zeros((1, 3, 4), TYPES[data_t])
    indices = np.zeros(2, TYPES[index_t])
    out = Tensor(np.zeros((1, 2, 4), TYPES[out_t]))
    _gather(data, indices, output=out, status=0 if allowed else E_TYPE)


SHAPES = [((2, 5, 3), (4,), (2, 4, 3)), ((2, 5, 3), (4,), (1, 4, 3)), ((2, 5, 3), (4,), (2, 3, 3)),
          ((2, 5, 3), (4,), (2, 4, 2)), ((5, 3), (4,), (4, 3)), ((2, 5, 3), (2, 2), (2, 4, 3))]


@pytest.mark.parametrize("data_shape, index_shape, out_shape", SHAPES)
def test_shape_rule_matches_the_kernel(data_shape, index_shape, out_shape):
    operands = [Operand(None, "data", data_shape), Operand(None, "indices", index_shape)]
    allowed = not list(shape_problems("gather", operands, Operand(None, "output", out_shape)))
    data = np.zeros(data_shape, np.float16)
    out = Tensor(np.zeros(out_shape, np.float16))
    run("gather", [Tensor(data), Tensor(np.zeros(index_shape, np.int32))], out,
        [ScalarArg(ElemType.I32, 0), ScalarArg(ElemType.I32, 5)],
        expect_status=0 if allowed else E_SHAPE, reads_scalars=True)


def test_a_strided_row_is_refused():
    data = np.zeros((1, 3, 4), np.float16)
    strided = Tensor(data, strides=(12, 8, 2))       # every other element along the row
    strided.values = np.zeros((1, 3, 4), np.float16)
    run("gather", [strided, Tensor(np.zeros(2, np.int32))], Tensor(np.zeros((1, 2, 4), np.float16)),
        [ScalarArg(ElemType.I32, 0), ScalarArg(ElemType.I32, 3)], expect_status=E_SHAPE,
        reads_scalars=True)


@pytest.mark.parametrize("a, row, n, inside", [(1, 64, 8, 8), (1, 64, 16, 16), (1, 64, 16, 0),
                                              (1, 192, 16, 16), (2, 192, 16, 16), (1, 8, 16, 16),
                                              (1, 200, 16, 16), (1, 192, 32, 16), (1, 768, 8, 4)])
def test_the_cost_models_formula_is_the_kernels_count(a, row, n, inside):
    """vpuc/cost/gather.py against the interpreter: within 10 % (its constants are averages
    of the byte copy's block, pair and tail paths)."""
    from vpuc.cost.gather import gather_call_cycles
    data = np.zeros((a, 10, row), np.float16)
    indices = np.zeros(n, np.int32)
    indices[inside:] = 100                       # outside the chunk [0, 10) of 1000 rows
    got = run("gather", [Tensor(data), Tensor(indices)], Tensor(np.zeros((a, n, row), np.float16)),
              [ScalarArg(ElemType.I32, 0), ScalarArg(ElemType.I32, 1000)], reads_scalars=True,
              check_paths=False).cycles
    estimate = gather_call_cycles(n, inside * a, row * 2)
    assert abs(estimate - got) <= 0.1 * got, (estimate, got)
