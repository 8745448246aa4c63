"""MemRefData packing, dataType and dimsOrder: golden bytes and round trips."""

import struct

import numpy as np
import pytest

from vpuc.abi import (MEMREF_FORMAT, MEMREF_OFFSETS, MEMREF_SIZE, NAMED_ORDERS, DataType,
                      MemRefData, compact_strides_bits, data_type, data_type_of, dims_order_code,
                      dims_order_permutation, identity_order, memory_dims, pack_dims, pack_strides,
                      unpack_dims, unpack_strides)
from vpuc.diagnostics import VpucError

WIN_E, WIN_F = 0x1E000000, 0x1F000000


def test_layout_matches_the_seed():
    assert MEMREF_FORMAT == "<IIIIIIQ" and MEMREF_SIZE == 32
    assert MEMREF_OFFSETS == {"dataAddr": 0, "isStatic": 4, "numDims": 8, "dimsAddr": 12,
                              "stridesAddr": 16, "dataType": 20, "dimsOrder": 24}


def test_dims_order_codes_follow_vpux():
    assert dims_order_code([0, 1, 2, 3]) == NAMED_ORDERS["NCHW"] == 0x1234
    assert dims_order_code([0, 2, 3, 1]) == NAMED_ORDERS["NHWC"] == 0x1342
    assert dims_order_code([0, 2, 3, 4, 1]) == NAMED_ORDERS["NDHWC"] == 0x13452
    assert identity_order(3) == 0x123
    for code in NAMED_ORDERS.values():
        assert dims_order_code(dims_order_permutation(code)) == code
    for bad in (0x1134, 0x1204, 0x1235):
        with pytest.raises(VpucError, match="not a packed permutation"):
            dims_order_permutation(bad)


def test_data_types_follow_vpux_numbering():
    assert data_type("f16").code == DataType.NN_FP16 == 2
    assert data_type(DataType.NN_BF16).numpy.itemsize == 2 and data_type("bf16").byte_size == 2
    assert [data_type(n).code for n in ("f32", "u8", "i8", "i32", "f64")] == [1, 7, 11, 9, 0]
    assert data_type_of(np.int16).name == "i16"
    with pytest.raises(VpucError, match="unknown element type 'f17'"):
        data_type("f17")
    with pytest.raises(VpucError, match="not whole bytes"):
        data_type("i4").byte_size


def test_dims_and_strides_are_memory_order_innermost_first():
    assert memory_dims([1, 16, 32, 32], 0x1342) == [16, 32, 32, 1]        # C, W, H, N
    assert memory_dims([1, 16, 32, 32], 0x1234) == [32, 32, 16, 1]        # W, H, C, N
    assert compact_strides_bits([1, 16, 32, 32], 0x1342, 16) == [16, 256, 8192, 262144]


# ClampParams {MemRefData input, output; f16 minVal, maxVal} for a 1x16x32x32 f16 NHWC
# tensor: params at WIN_E+0 (68 bytes); dims/strides after it in WIN_E (8-aligned):
# input dims @0x48, input strides @0x58, output dims @0x78, output strides @0x88;
# data in WIN_F: input @+0x0, output @+0x8000 (16*32*32*2 bytes each).
CLAMP_GOLDEN = bytes.fromhex(
    "0000001f" "01000000" "04000000" "4800001e" "5800001e" "02000000" "4213000000000000"
    "0080001f" "01000000" "04000000" "7800001e" "8800001e" "02000000" "4213000000000000"
    "0000"      # minVal = 0.0
    "0046")     # maxVal = 6.0
DIMS_GOLDEN = bytes.fromhex("10000000" "20000000" "20000000" "01000000")
STRIDES_GOLDEN = bytes.fromhex("1000000000000000" "0001000000000000" "0020000000000000"
                               "0000040000000000")


def _clamp_params(min_val, max_val):
    shape, order = [1, 16, 32, 32], NAMED_ORDERS["NHWC"]
    memref = lambda data, dims_at: MemRefData(
        dataAddr=data, isStatic=1, numDims=len(shape), dimsAddr=dims_at, stridesAddr=dims_at + 16,
        dataType=data_type("f16").code, dimsOrder=order)
    params = (memref(WIN_F, WIN_E + 0x48).pack() + memref(WIN_F + 0x8000, WIN_E + 0x78).pack()
              + np.float16(min_val).tobytes() + np.float16(max_val).tobytes())
    arrays = pack_dims(memory_dims(shape, order)) + pack_strides(
        compact_strides_bits(shape, order, data_type("f16").bits))
    return params, arrays


def test_clamp_params_golden_bytes():
    params, arrays = _clamp_params(0.0, 6.0)
    assert len(params) == 68
    assert params == CLAMP_GOLDEN
    assert arrays == DIMS_GOLDEN + STRIDES_GOLDEN


def test_dynamic_shape_golden_bytes():
    # A dynamic output: dims/strides in WIN_F after the data; the kernel fills them in.
    out = MemRefData(dataAddr=WIN_F + 0x8000, isStatic=0, numDims=4, dimsAddr=WIN_F + 0x10000,
                     stridesAddr=WIN_F + 0x10010, dataType=DataType.NN_FP32, dimsOrder=0x1234)
    assert out.pack() == bytes.fromhex("0080001f" "00000000" "04000000" "0000011f" "1000011f"
                                       "01000000" "3412000000000000")


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(3)
    for _ in range(100):
        values = [int(v) for v in rng.integers(0, 1 << 32, 6, dtype=np.uint64)]
        memref = MemRefData(*values, int(rng.integers(0, 1 << 63)))
        blob = b"\xee" * 5 + memref.pack()
        assert MemRefData.unpack(blob, 5) == memref
    dims, strides = [3, -1, 7], [16, -32, 1 << 40]
    assert unpack_dims(pack_dims(dims), 3) == dims
    assert unpack_strides(pack_strides(strides), 3) == strides
    params, _ = _clamp_params(-1.5, 2.0)
    assert MemRefData.unpack(params, 32).dataAddr == WIN_F + 0x8000
    assert struct.unpack_from("<2e", params, 64) == (-1.5, 2.0)


def test_pack_unpack_errors():
    with pytest.raises(VpucError, match=r"MemRefData.numDims = -1 does not fit in u32"):
        MemRefData(0, 1, -1, 0, 0, 2, 0x1).pack()
    with pytest.raises(VpucError, match="truncated MemRefData: need 32 bytes at offset 0x10"):
        MemRefData.unpack(bytes(40), 16, "args.bin")
    with pytest.raises(VpucError, match="do not fit in int32"):
        pack_dims([1 << 31])
    with pytest.raises(VpucError, match="truncated dims array"):
        unpack_dims(bytes(8), 3)
