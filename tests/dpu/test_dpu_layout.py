"""Layouts: permutations, blocked formats, strides, offsets and round trips."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.dpu import Block, Layout, from_layout, to_layout
from vpuc.diagnostics import VpucError

PLAIN = {
    # layout: (logical shape, numpy transpose from the logical array)
    "NCHW": ((2, 3, 4, 5), (0, 1, 2, 3)),
    "NHWC": ((2, 3, 4, 5), (0, 2, 3, 1)),
    "NC": ((3, 7), (0, 1)),
    "C": ((7,), (0,)),
    "CHW": ((3, 4, 5), (0, 1, 2)),
    "HWC": ((3, 4, 5), (1, 2, 0)),
    "NCDHW": ((2, 3, 2, 4, 5), (0, 1, 2, 3, 4)),
    "NDHWC": ((2, 3, 2, 4, 5), (0, 2, 3, 4, 1)),
    "HWIO": ((6, 3, 2, 4), (2, 3, 1, 0)),
    "GOIHW": ((2, 6, 3, 2, 4), (0, 1, 2, 3, 4)),
}


@pytest.mark.parametrize("name", PLAIN)
def test_plain_layouts_are_transposes(name):
    shape, perm = PLAIN[name]
    logical = np.arange(np.prod(shape)).reshape(shape)
    stored = to_layout(logical, name)
    np.testing.assert_array_equal(stored, logical.transpose(perm))
    assert stored.flags.c_contiguous
    np.testing.assert_array_equal(from_layout(stored.ravel(), name, shape), logical)
    # Logical strides agree with numpy's strides of the transposed-back view.
    view = from_layout(stored, name, shape)
    assert Layout.parse(name).strides(shape) == tuple(s // stored.itemsize for s in view.strides)


def test_nchw16c_matches_manual_blocking_and_pads_channels():
    logical = np.random.default_rng(0).standard_normal((2, 20, 3, 4)).astype(np.float16)
    layout = Layout.parse("nChw16c")
    assert layout.dims == "NCHW" and layout.is_blocked
    assert layout.physical_shape(logical.shape) == (2, 2, 3, 4, 16)
    stored = to_layout(logical, layout)
    padded = np.concatenate([logical, np.zeros((2, 12, 3, 4), np.float16)], axis=1)
    np.testing.assert_array_equal(stored, padded.reshape(2, 2, 16, 3, 4).transpose(0, 1, 3, 4, 2))
    np.testing.assert_array_equal(from_layout(stored, "NCHW16c", logical.shape), logical)


@pytest.mark.parametrize("name, shape", [
    ("nChw16c", (1, 40, 3, 2)),
    ("NCHW8c", (2, 8, 1, 3)),
    ("nCdhw4c", (1, 6, 2, 3, 2)),
    ("OIHW16i16o", (20, 36, 3, 3)),
    ("OIhw4i16o4i", (17, 30, 1, 2)),
    ("gOIhw2o2i", (2, 3, 5, 3, 3)),
    ("NHWC4c", (1, 5, 2, 2)),
])
def test_blocked_round_trip_and_offsets(name, shape):
    layout = Layout.parse(name)
    logical = np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape)
    stored = to_layout(logical, layout)
    assert stored.size == layout.num_elements(shape)
    np.testing.assert_array_equal(from_layout(stored.ravel(), layout, shape), logical)
    # Every logical element sits at layout.offsets(index); padding holds zeros.
    index = np.indices(shape)
    offsets = layout.offsets(shape, tuple(index))
    np.testing.assert_array_equal(stored.ravel()[offsets], logical)
    assert np.count_nonzero(stored) == logical.size


def test_blocks_list_every_memory_block_with_strides():
    blocks = Layout.parse("nChw16c").blocks((1, 32, 5, 7))
    assert blocks == (Block("N", 1, 2 * 5 * 7 * 16), Block("C", 2, 5 * 7 * 16), Block("H", 5, 7 * 16),
                      Block("W", 7, 16), Block("C", 16, 1))


def test_from_perm_matches_named_orders():
    assert Layout.from_perm((0, 2, 3, 1)).name == "NHWC"
    assert Layout.from_perm((1, 2, 0)).dims == "CHW"
    assert Layout.from_perm((0, 2, 3, 4, 1)).name == "NDHWC"


@pytest.mark.parametrize("text, message", [
    ("NCHX", "unknown dim"),
    ("NCHWC", "appears twice"),
    ("N16cHW", "no outer part"),
    ("NC-HW", "expected letters"),
    ("", "expected letters"),
    ("nChw0c", "block size"),
])
def test_bad_layouts_raise(text, message):
    with pytest.raises(VpucError, match=message):
        Layout.parse(text)


def test_shape_errors_raise():
    with pytest.raises(VpucError, match="rank"):
        to_layout(np.zeros((2, 3)), "NCHW")
    with pytest.raises(VpucError, match="elements"):
        from_layout(np.zeros(10), "NCHW", (1, 2, 2, 2))
    with pytest.raises(VpucError, match="blocked layout"):
        Layout.parse("nChw16c").strides((1, 16, 2, 2))
