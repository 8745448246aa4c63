"""``memory.byte_intervals``: the exact bytes of a strided region as merged rows, against
the bytes enumerated one by one (its nested-strides shortcut and its general path)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.memory import byte_intervals
from vpuc.ir.types import ElemType


class _Region:
    """What byte_intervals reads of a Region."""

    def __init__(self, shape, strides_bytes, elem: ElemType) -> None:
        self.strides_bits = tuple(s * 8 for s in strides_bytes)
        self.type = type("Type", (), {"elem": elem, "bound_shape": tuple(shape)})()


def _enumerated(shape, strides_bytes, nbytes: int, start: int) -> list[list[int]]:
    touched = set()
    for index in itertools.product(*[range(n) for n in shape]):
        first = start + sum(i * s for i, s in zip(index, strides_bytes))
        touched.update(range(first, first + nbytes))
    rows: list[list[int]] = []
    for byte in sorted(touched):
        if rows and rows[-1][1] == byte:
            rows[-1][1] = byte + 1
        else:
            rows.append([byte, byte + 1])
    return rows


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([ElemType.F16, ElemType.F32]),
       st.lists(st.tuples(st.integers(1, 4), st.integers(0, 48)), min_size=1, max_size=3))
def test_rows_are_the_bytes_the_region_touches(elem, dims):
    shape = [n for n, _ in dims]
    strides = [s * elem.nbytes for _, s in dims]
    rows = byte_intervals(_Region(shape, strides, elem), 4096).tolist()
    assert rows == _enumerated(shape, strides, elem.nbytes, 4096)


def test_a_channel_slice_of_an_nhwc_tensor_is_one_row_per_pixel():
    # 2 of 8 f16 channels over 3x4 pixels: 4-byte chunks, 16 bytes apart.
    rows = byte_intervals(_Region((1, 2, 3, 4), (0, 2, 64, 16), ElemType.F16), 0)
    assert rows.tolist() == [[p * 16, p * 16 + 4] for p in range(12)]
