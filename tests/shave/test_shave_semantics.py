"""The ISA semantics, instruction class by class, against numpy references; and the
batched form (the fast path's) against the per-row form (the interpreter's)."""

import ml_dtypes
import numpy as np
import pytest

from runtime_sim.isa.sem_values import lanes, to_bytes
from runtime_sim.isa.semantics import SEMANTICS
from shave_testlib import WIN_E, WIN_F, make_memory, semantics_of as op, u32, vec
from vpuc.shave import BY_MNEMONIC, INSTRUCTIONS

RNG = np.random.default_rng(7)
SPECIAL_WORDS = [0, 1, 2, 31, 32, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x3F800000,
                 0xBFC00000, 0x7FC00000, 0x7F800000, 0x00003C00, 0x0000FBFF, 12345678]


@pytest.fixture(autouse=True)
def quiet():
    with np.errstate(all="ignore"):
        yield


# --- batched == per row ----------------------------------------------------------------

def _random_read(kind, ins, batch):
    if kind in ("sa", "su", "sa2"):
        words = RNG.integers(0, 1 << 32, batch, dtype=np.uint64).astype(np.uint32)
        words[: len(SPECIAL_WORDS)] = SPECIAL_WORDS[:batch]
        return words
    if kind in ("va", "vu"):
        raw = RNG.integers(0, 256, (batch, 16), dtype=np.uint8)
        floats = RNG.standard_normal((batch, 4)).astype(np.float32) * 4
        raw[: batch // 2] = floats.view(np.uint8)[: batch // 2]
        return raw
    if kind == "ma":
        return RNG.integers(0, 2, (batch, 16)).astype(bool)
    low, high = ins.imm_range or (0, (1 << 32) - 1)
    return np.uint32(RNG.integers(low, high + 1))


def _reads(ins):
    kinds = []
    for operand in ins.operands:
        if operand.kind in ("sa", "va", "ma", "su", "vu", "imm", "f32", "f16", "sym"):
            kinds.append(operand.kind)
        elif operand.kind == "sa2":
            kinds += ["sa", "sa"]
    return kinds


def _row(value, row, batch):
    if isinstance(value, tuple):
        return tuple(_row(v, row, batch) for v in value)
    value = np.asarray(value)
    return value[row] if value.ndim and value.shape[0] == batch else value


def _same(x, y):
    if isinstance(x, tuple):
        return all(_same(a, b) for a, b in zip(x, y))
    return np.array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("ins", [i for i in INSTRUCTIONS if SEMANTICS[i.opcode].kind == "op"],
                         ids=lambda i: i.mnemonic)
def test_batched_matches_rows(ins):
    batch = 24
    fn = SEMANTICS[ins.opcode].fn
    args = [_random_read(kind, ins, batch) for kind in _reads(ins)]
    batched = fn(*args)
    for row in range(batch):
        single = fn(*[_row(a, row, batch) if np.ndim(a) else a for a in args])
        assert _same(single, _row(batched, row, batch)), (ins.mnemonic, row)


def test_batched_memory_matches_rows():
    mem, arrays = make_memory()
    arrays["WIN_F"][:] = RNG.integers(0, 256, arrays["WIN_F"].size, dtype=np.uint8)
    base = u32(WIN_F + np.arange(10) * 40)
    mask = RNG.integers(0, 2, (10, 16)).astype(bool)
    stride = u32([6] * 5 + [0xFFFFFFFE] * 5)
    for name, args in (("vld", (base, 4)), ("lw", (base, 3)), ("lh", (base, 1)), ("lb", (base, 0)),
                       ("ld", (base, 8)), ("vld.m", (base, 0, mask)), ("vlds.h", (base, 64, stride)),
                       ("vlds.m.w", (base, 64, stride, mask)), ("vldb.h", (base, 2))):
        fn = op(name)
        batched = fn(mem, *[np.uint32(a) if np.ndim(a) == 0 else a for a in args])
        for row in range(10):
            single = fn(mem, *[np.uint32(a) if np.ndim(a) == 0 else a[row] for a in args])
            assert _same(single, _row(batched, row, 10)), name
    data = RNG.integers(0, 256, (10, 16), dtype=np.uint8)
    op("vst")(mem, data, u32(WIN_E + 16 * np.arange(10)), np.uint32(0))
    assert np.array_equal(arrays["WIN_E"][:160].reshape(10, 16), data)


# --- scalar integer ----------------------------------------------------------------------

def _signed(x):
    return x - (1 << 32) if x >= 1 << 31 else x


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


SCALAR_REFERENCE = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "mulh": lambda a, b: (_signed(a) * _signed(b)) >> 32, "mulhu": lambda a, b: (a * b) >> 32,
    "div": lambda a, b: -1 if b == 0 else _trunc_div(_signed(a), _signed(b)),
    "divu": lambda a, b: 0xFFFFFFFF if b == 0 else a // b,
    "rem": lambda a, b: a if b == 0 else _signed(a) - _trunc_div(_signed(a), _signed(b)) * _signed(b),
    "remu": lambda a, b: a if b == 0 else a % b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "sll": lambda a, b: a << (b & 31), "srl": lambda a, b: a >> (b & 31),
    "sra": lambda a, b: _signed(a) >> (b & 31),
    "slt": lambda a, b: int(_signed(a) < _signed(b)), "sltu": lambda a, b: int(a < b),
    "seq": lambda a, b: int(a == b), "sne": lambda a, b: int(a != b),
    "min": lambda a, b: min(_signed(a), _signed(b)), "max": lambda a, b: max(_signed(a), _signed(b)),
    "minu": min, "maxu": max,
}


@pytest.mark.parametrize("name", sorted(SCALAR_REFERENCE))
def test_scalar_integer_ops(name):
    fn, ref = op(name), SCALAR_REFERENCE[name]
    for a in SPECIAL_WORDS:
        for b in SPECIAL_WORDS:
            got = fn(np.uint32(a), np.uint32(b))
            assert isinstance(got, np.uint32), (name, type(got))
            assert int(got) == ref(a, b) & 0xFFFFFFFF, (name, a, b)
    if name + "i" in BY_MNEMONIC:
        assert op(name + "i") is fn


def test_scalar_float_ops():
    a, b = np.float32(1.5), np.float32(-0.1)
    bits = lambda x: np.uint32(np.float32(x).view(np.uint32))
    assert op("fadd")(bits(a), bits(b)) == bits(a + b)
    assert op("fdiv")(bits(a), bits(b)) == bits(a / b)
    assert op("fmax")(bits(a), bits(np.nan)) == bits(np.nan)
    assert op("flt")(bits(b), bits(a)) == 1 and op("fle")(bits(a), bits(b)) == 0
    assert op("fneg")(bits(a)) == bits(-a) and op("fabs")(bits(b)) == bits(0.1)
    assert op("fcvt.f32.i32")(np.uint32(0xFFFFFFFD)) == bits(-3.0)
    assert op("fcvt.f32.u32")(np.uint32(0xFFFFFFFF)) == bits(4294967296.0)
    convert = op("fcvt.i32.f32")
    assert [int(convert(bits(x))) for x in (-2.7, 2.7, 3e9, -3e9, np.nan)] == [
        0xFFFFFFFE, 2, 0x7FFFFFFF, 0x80000000, 0]
    assert op("fcvt.f32.f16")(np.uint32(0xABCD3C00)) == bits(1.0)     # upper half ignored
    assert op("fcvt.f16.f32")(bits(65519.0)) == 0x7BFF                 # rounds to max f16
    assert op("fcvt.f16.f32")(bits(65520.0)) == 0x7C00                 # overflow -> inf


# --- vector floating point ------------------------------------------------------------------

def _random_f16(n):
    values = (RNG.standard_normal(n) * np.exp(RNG.uniform(-8, 8, n))).astype(np.float16)
    values[:6] = [0.0, -0.0, np.inf, -np.inf, 65504, 6e-8]
    return values


@pytest.mark.parametrize("name,ref", [("vadd", np.add), ("vsub", np.subtract),
                                      ("vmul", np.multiply), ("vdiv", np.divide)])
def test_f16_arithmetic_is_correctly_rounded(name, ref):
    a, b = _random_f16(4096).reshape(-1, 8), _random_f16(4096)[::-1].reshape(-1, 8)
    got = lanes(op(f"{name}.f16")(to_bytes(a, np.float16), to_bytes(b, np.float16)), np.float16)
    want = ref(a.astype(np.float64), b.astype(np.float64)).astype(np.float16)
    assert np.array_equal(got, want, equal_nan=True)


def test_f16_sqrt_fma_min_max_abs_neg():
    a, b, c = (_random_f16(800).reshape(-1, 8) for _ in range(3))
    va, vb, vc = (to_bytes(x, np.float16) for x in (a, b, c))
    f16 = lambda v: lanes(v, np.float16)
    assert np.array_equal(f16(op("vsqrt.f16")(va)), np.sqrt(a.astype(np.float64)).astype(np.float16),
                          equal_nan=True)
    fma = (a.astype(np.float64) * b + c.astype(np.float64)).astype(np.float16)
    assert np.array_equal(f16(op("vfma.f16")(va, vb, vc)), fma, equal_nan=True)
    assert np.array_equal(f16(op("vmax.f16")(va, vb)), np.maximum(a, b))
    assert np.array_equal(lanes(op("vabs.f16")(va), np.uint16), a.view(np.uint16) & 0x7FFF)
    assert np.array_equal(lanes(op("vneg.f16")(va), np.uint16), a.view(np.uint16) ^ 0x8000)


def test_f32_arithmetic_and_compare():
    a = RNG.standard_normal((50, 4)).astype(np.float32)
    b = RNG.standard_normal((50, 4)).astype(np.float32)
    va, vb = to_bytes(a, np.float32), to_bytes(b, np.float32)
    assert np.array_equal(lanes(op("vmul.f32")(va, vb), np.float32), a * b)
    assert np.array_equal(lanes(op("vsub.f32")(va, vb), np.float32), a - b)
    mask = op("vcmplt.f32")(va, vb)
    assert mask.shape == (50, 16) and np.array_equal(mask, np.repeat(a < b, 4, axis=-1))
    assert np.array_equal(op("vcmple.f16")(vec([1, 2, 3, np.nan, 0, 0, 0, 0], np.float16),
                                           vec([2, 2, 2, np.nan, 0, 0, 0, 0], np.float16)),
                          np.repeat([True, True, False, False, True, True, True, True], 2))


@pytest.mark.parametrize("name,ref,domain,ulps32", [
    ("vexp", np.exp, (-20, 10), 3), ("vlog", np.log, (1e-3, 1e4), 3),
    ("vtanh", np.tanh, (-8, 8), 3), ("vrcp", lambda x: 1 / x, (0.01, 100), 0.5),
    ("vrsqrt", lambda x: 1 / np.sqrt(x), (0.01, 100), 3)])
def test_transcendental_accuracy(name, ref, domain, ulps32):
    for dtype, bound, width in ((np.float32, ulps32, 4), (np.float16, 1, 8)):
        x = RNG.uniform(*domain, 4096).astype(dtype)
        got = lanes(op(f"{name}.{'f32' if dtype == np.float32 else 'f16'}")(
            to_bytes(x.reshape(-1, width), dtype)), dtype).reshape(-1).astype(np.float64)
        exact = ref(x.astype(np.float64))
        ulp = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
        finite = np.isfinite(exact) & (np.abs(exact) < np.finfo(dtype).max)
        assert (np.abs(got - exact)[finite] <= bound * ulp[finite]).all(), name


def test_reductions():
    x = np.array([1e4, 1, -1e4, 1, 3, 0.5, 2, -7], np.float16)
    tree = ((x[0] + np.float32(x[1])) + (np.float32(x[2]) + x[3])) + (
        (np.float32(x[4]) + x[5]) + (np.float32(x[6]) + x[7]))
    total = op("vredsum.f16")(to_bytes(x, np.float16))
    assert isinstance(total, np.uint32) and total.view(np.float32) == np.float32(tree)
    assert op("vredmax.f16")(to_bytes(x, np.float16)).view(np.float32) == 1e4
    assert op("vredmin.f32")(vec([3, -2, 5, 1], np.float32)).view(np.float32) == -2
    assert op("vredsum.i32")(vec([0x7FFFFFFF, 1, 0, 5], np.uint32)) == 0x80000005


# --- conversions -----------------------------------------------------------------------------

def test_f16_f32_lane_mapping():
    x = np.arange(8, dtype=np.float16) + np.float16(0.5)
    v = to_bytes(x, np.float16)
    low, high = op("vcvtl.f32.f16")(v), op("vcvth.f32.f16")(v)
    assert np.array_equal(lanes(low, np.float32), x[:4]) and np.array_equal(lanes(high, np.float32), x[4:])
    assert np.array_equal(op("vcvt.f16.f32")(low, high), v)


def test_bf16_and_int_conversions():
    f = np.array([1.00390625, -3.5, 1e30, np.nan], np.float32)
    packed = op("vcvt.bf16.f32")(to_bytes(f, np.float32), to_bytes(f[::-1].copy(), np.float32))
    want = np.concatenate([f, f[::-1]]).astype(ml_dtypes.bfloat16)
    assert np.array_equal(lanes(packed, np.uint16), want.view(np.uint16))
    assert np.array_equal(lanes(op("vcvth.f32.bf16")(packed), np.float32),
                          want[4:].astype(np.float32), equal_nan=True)
    g = vec([2.5, -2.5, 3e9, np.nan], np.float32)
    assert list(lanes(op("vcvt.i32.f32")(g), np.int32)) == [2, -2, 2**31 - 1, 0]
    assert list(lanes(op("vcvtr.i32.f32")(g), np.int32)) == [2, -2, 2**31 - 1, 0]
    assert list(lanes(op("vcvtr.i32.f32")(vec([3.5, -0.5, 0.5001, -3e9], np.float32)), np.int32)) == [
        4, 0, 1, -2**31]
    assert list(lanes(op("vcvt.f32.i32")(vec([16777217, -3, 0, 7], np.int32)), np.float32)) == [
        16777216, -3, 0, 7]


# --- integers, lanes, masks --------------------------------------------------------------------

def test_vector_integer_ops():
    a = RNG.integers(-2**31, 2**31, (20, 4), dtype=np.int64).astype(np.int32)
    b = RNG.integers(-2**31, 2**31, (20, 4), dtype=np.int64).astype(np.int32)
    va, vb = to_bytes(a, np.int32), to_bytes(b, np.int32)
    assert np.array_equal(lanes(op("vadd.i32")(va, vb), np.int32), a + b)
    assert np.array_equal(lanes(op("vmul.i32")(va, vb), np.int32), a * b)
    assert np.array_equal(lanes(op("vmin.i32")(va, vb), np.int32), np.minimum(a, b))
    assert np.array_equal(lanes(op("vsrai.i32")(va, np.uint32(3)), np.int32), a >> 3)
    assert np.array_equal(lanes(op("vsrli.i16")(va, np.uint32(15)), np.uint16),
                          a.view(np.uint16) >> 15)
    assert np.array_equal(op("vcmplt.i32")(va, vb), np.repeat(a < b, 4, axis=-1))
    assert np.array_equal(lanes(op("vmax.u8")(va, vb), np.uint8),
                          np.maximum(a.view(np.uint8), b.view(np.uint8)))


def test_broadcast_extract_insert():
    assert np.array_equal(lanes(op("vbcast.h")(np.uint32(0xABCD1234)), np.uint16), [0x1234] * 8)
    v = vec(np.arange(4) * 11, np.uint32)
    assert op("vext.w")(v, np.uint32(2)) == 22
    inserted = op("vins.h")(v, np.uint32(0xFFFF7777), np.uint32(7))
    assert lanes(inserted, np.uint16)[7] == 0x7777 and np.array_equal(inserted[:14], v[:14])
    batched = op("vins.b")(v, u32([1, 2, 3]), np.uint32(0))
    assert batched.shape == (3, 16) and list(batched[:, 0]) == [1, 2, 3]


def test_masks():
    assert np.array_equal(op("vmask.h")(np.uint32(3)), np.arange(16) < 6)
    assert op("vmask.w")(np.uint32(100)).all() and not op("vmask.b")(np.uint32(0)).any()
    assert np.array_equal(op("vmask.w")(u32([0, 1, 4])).sum(axis=-1), [0, 4, 16])
    m = op("mset")(np.uint32(0x1234A5A5))
    assert op("mget")(m) == 0xA5A5 and op("mget")(op("mnot")(m)) == 0x5A5A
    a, b = vec(np.arange(16), np.uint8), vec(np.full(16, 99), np.uint8)
    assert list(op("vsel")(a, b, op("vmask.b")(np.uint32(2)))) == [0, 1] + [99] * 14


@pytest.mark.parametrize("suffix", ["f16", "f32"])
def test_min_max_pick_operand_bits_as_numpy_minimum_maximum(suffix):
    """vmin/vmax are numpy's minimum/maximum in float32, rounded back -- which returns an
    operand's exact bits: a NaN operand with its payload (the first of two), else of two
    equal values (signed zeros included) the second.  Pinned here, bit for bit."""
    from runtime_sim.isa.sem_vector import VECTOR_OPS, widen_f16
    rng = np.random.default_rng(5)
    if suffix == "f16":
        a = np.arange(65536, dtype=np.uint16).reshape(-1, 8)      # every bit pattern
        b = np.roll(a.ravel(), 12345).reshape(-1, 8)
        b[::5] = a[::5]                                           # ties
        b[1::5] = a[1::5] ^ 0x8000                                # +-0 and sign flips
        widen, narrow = widen_f16, (lambda x: x.astype(np.float16).view(np.uint16))
    else:
        a = rng.integers(0, 2**32, (50000, 4), dtype=np.uint64).astype(np.uint32)
        b = rng.integers(0, 2**32, (50000, 4), dtype=np.uint64).astype(np.uint32)
        b[::5] = a[::5]
        b[1::5] = a[1::5] ^ 0x80000000
        widen, narrow = (lambda x: x.view(np.float32)), (lambda x: x.view(np.uint32))
    for name, ref in (("vmax", np.maximum), ("vmin", np.minimum)):
        got = VECTOR_OPS[f"{name}.{suffix}"](a.view(np.uint8), b.view(np.uint8))
        expected = narrow(ref(widen(a), widen(b)))
        assert np.array_equal(got.view(a.dtype).reshape(a.shape), expected), name
        wa, wb = widen(a), widen(b)
        better = wa > wb if name == "vmax" else wa < wb
        picked = np.where(np.isnan(wa) | better, a, b)           # the rule, stated once more
        assert np.array_equal(got.view(a.dtype).reshape(a.shape), picked), name


# --- vmax.f16 / vmin.f16 chosen on the bits, and constants against long batches -----------

def _widened_f16(name):
    from runtime_sim.isa.sem_values import lanes, to_bytes
    from runtime_sim.isa.sem_vector import widen_f16
    op = np.maximum if name == "vmax.f16" else np.minimum
    return lambda a, b: to_bytes(op(widen_f16(lanes(a, np.uint16)),
                                    widen_f16(lanes(b, np.uint16))).astype(np.float16),
                                 np.float16)


@pytest.mark.parametrize("name", ["vmax.f16", "vmin.f16"])
def test_f16_max_min_on_the_bits_equal_the_widened_float_form(name):
    """Every f16 bit pattern against special values (signed zeros, infinities, quiet and
    signalling NaNs, subnormals) and random ones, both operand orders, batched against
    an unbatched vector and batch against batch: the bits of the f32 definition."""
    from runtime_sim.isa.sem_vector import VECTOR_OPS
    fn, widened = VECTOR_OPS[name], _widened_f16(name)
    every = np.arange(1 << 16, dtype=np.uint16).reshape(-1, 8).view(np.uint8)
    rng = np.random.default_rng(0)
    special = [0, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF, 1, 0x8001,
               0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x0400, 0x03FF]
    for b in special + rng.integers(0, 1 << 16, 24).tolist():
        vector = np.full(8, b, np.uint16).view(np.uint8)
        batch = np.broadcast_to(vector, every.shape).copy()
        for x, y in ((every, vector), (vector, every), (every, batch), (batch, every)):
            assert np.array_equal(fn(x, y), widened(x, y)), hex(b)
    x, y = (rng.integers(0, 1 << 16, (4096, 8)).astype(np.uint16).view(np.uint8)
            for _ in range(2))
    assert np.array_equal(fn(x, y), widened(x, y))


@pytest.mark.parametrize("rows", [1, 3, 255, 256, 1000, 4096])
def test_a_constant_against_a_long_batch_is_the_broadcast_result(rows):
    from runtime_sim.isa.sem_vector import VECTOR_OPS
    rng = np.random.default_rng(rows)
    batch = (rng.standard_normal((rows, 8)) * 3).astype(np.float16).view(np.uint8)
    constant = np.float16([0.5, -1, 2, 3, 0, -0.0, 7, 1e-3]).view(np.uint8)
    for name in ("vadd.f16", "vmul.f16", "vsub.f16", "vdiv.f16", "vmax.f16", "vmin.f16"):
        fn = VECTOR_OPS[name]
        for x, y in ((batch, constant), (constant, batch)):
            expected = np.stack([fn(np.ascontiguousarray(row_x), np.ascontiguousarray(row_y))
                                 for row_x, row_y in zip(*np.broadcast_arrays(x, y))])
            assert np.array_equal(fn(x, y), expected), name
