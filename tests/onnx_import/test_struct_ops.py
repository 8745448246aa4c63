"""Einsum, Attention, RotaryEmbedding, ArgMax/ArgMin, CumSum, GatherElements, GatherND
(vpuc/onnx_import/convert_einsum.py, convert_attention.py, convert_struct.py): their import
(golden text), the shapes they infer against ONNX's shape inference, their lowering (golden
text) and their numerics against onnxruntime, compiled and simulated in f16.

Tolerance.  Both sides get the same f16-exact input and the same f16-rounded weights, so
each is off the exact result only by its own roundings: vpuc's stored in f16 (unit
roundoff u = 2^-11) with f32 sums on the DPU and in the kernels, onnxruntime's in f32
(u = 2^-24).  ``error(u, x, want, weights)`` bounds one side's error; the test allows
``error(2^-11) + error(2^-24)`` plus half the smallest f16 subnormal:

- exact (0): ArgMax, ArgMin (a comparison of equal values on both sides, then an index),
  GatherElements, GatherND (copies).
- Einsum: ``c`` products, each an f32 sum of at most ``n`` terms (Higham's gamma_n, n the
  product of the summed sizes) stored once (u): ``((1 + gamma_n + u)^c - 1)`` times the
  equation evaluated on the operands' magnitudes ``|x|, |w|``.
- CumSum: an f32 sum of at most n terms, stored: ``gamma_n sum |x| + u |want|``.
- RotaryEmbedding: two products, rounded, and their sum or difference, rounded:
  ``3u (|x1| + |x2|)`` for each rotated pair (``|cos|, |sin| <= 1``); the rest exact.
- Attention: a score ``s = scale q.k (+ mask)`` is off by ``e = (gamma_d + 2u) scale |q||k|
  + u |s|`` (the f32 dot product, its store and the scale; onnxruntime's two square-root
  scalings); the softmax moves by at most a factor ``exp(2 max e)`` and rounds (f32 steps,
  the store): ``p (exp(2E) - 1 + u + gamma_(S+3))``; the output ``sum p v`` adds
  ``gamma_S sum p |v| + u |y|``.
"""

from __future__ import annotations

import math
import os
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_testlib import assert_within, rounded_to_f16
from tests.tolerances import gamma
from vpuc import api
from vpuc.arch import load_arch
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16, U32 = 2.0 ** -11, 2.0 ** -24
EXACT = lambda u, x, want, w: 0.0


def _ints(m, values):
    return m.init(np.asarray(values, np.int64), "i")


def _einsum_error(equation, products):
    def error(u, x, want, weights):
        magnitude = np.einsum(equation, np.abs(x), *(np.abs(w) for w in weights))
        lhs, rhs = equation.split("->")
        sizes = {}
        for term, shape in zip(lhs.split(","), [x.shape, *(w.shape for w in weights)]):
            head, _, tail = term.partition("...")
            sizes.update(zip(head, shape))
            sizes.update(zip(tail, shape[len(shape) - len(tail):]))
        n = math.prod(size for label, size in sizes.items() if label not in rhs)
        return ((1 + gamma(n, np.float32) + u) ** products - 1) * magnitude
    return error


def _cumsum_error(axis):
    def error(u, x, want, weights):
        n = x.shape[axis]
        return gamma(n, np.float32) * np.abs(x).sum(axis=axis, keepdims=True) + u * np.abs(want)
    return error


def _rotary_error(interleaved, rotary, heads=None):
    def error(u, x, want, weights):
        shaped = x.reshape(x.shape[0], x.shape[1], heads, -1) if heads else x
        part = np.abs(shaped[..., :rotary])
        if interleaved:
            pair = np.repeat(part[..., 0::2] + part[..., 1::2], 2, axis=-1)
        else:
            half = part[..., :rotary // 2] + part[..., rotary // 2:]
            pair = np.concatenate([half, half], axis=-1)
        rest = np.zeros(shaped.shape[:-1] + (shaped.shape[-1] - rotary,))
        return (3 * u * np.concatenate([pair, rest], axis=-1)).reshape(want.shape)
    return error


def _attention_error(heads=None, kv_heads=None, causal=False, mask=None, scale=None):
    def split(t, h):
        return t.reshape(t.shape[0], t.shape[1], h, -1).transpose(0, 2, 1, 3) if t.ndim == 3 else t

    def error(u, x, want, weights):
        q = split(x, heads)
        k, v = (split(w, kv_heads) for w in weights[:2])
        k, v = (np.repeat(t, q.shape[1] // t.shape[1], axis=1) for t in (k, v))
        d, sq, skv = q.shape[3], q.shape[2], k.shape[2]
        s_scale = 1 / math.sqrt(d) if scale is None else scale
        allowed = np.ones((sq, skv), bool)
        if causal:
            allowed &= np.arange(skv)[None, :] <= np.arange(sq)[:, None]
        bias = np.zeros((sq, skv))
        if mask is not None:
            allowed = allowed & (mask if mask.dtype == np.bool_ else True)
            bias = bias + (0 if mask.dtype == np.bool_ else mask)
        s = s_scale * q @ k.transpose(0, 1, 3, 2) + bias
        s = np.where(allowed, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        e = (gamma(d, np.float32) + 2 * u) * s_scale * (np.abs(q) @ np.abs(k).transpose(0, 1, 3, 2))
        e = np.where(allowed, e + u * np.abs(np.where(allowed, s, 0)), 0)
        spread = np.exp(2 * e.max(-1, keepdims=True)) - 1 + u + gamma(skv + 3, np.float32)
        dp = p * spread
        y_err = dp @ np.abs(v) + (gamma(skv, np.float32) * (1 + spread)) * (p @ np.abs(v))
        y_err = y_err + u * np.abs(p @ v)
        if x.ndim == 3:
            y_err = y_err.transpose(0, 2, 1, 3).reshape(want.shape)
        return y_err
    return error


BOOL_MASK = (np.arange(7)[None, :] <= np.arange(5)[:, None] + 2) & (np.arange(7)[None, :] != 1)
FLOAT_MASK = np.linspace(-2, 1, 35, dtype=np.float32).reshape(5, 7)

# case: (opset, x shape, build(m, x), one side's error(u, x, want, weights), output type)
CASES = {
    "einsum_bid_de": (12, [2, 5, 8], lambda m, x: m.node("Einsum", [x, m.weight((8, 6))], equation="bid,de->bie"),
                      _einsum_error("bid,de->bie", 1)),
    "einsum_scores": (12, [1, 2, 5, 8], lambda m, x: m.node("Einsum", [x, m.weight((1, 2, 7, 8))],
                                                            equation="bhid,bhjd->bhij"),
                      _einsum_error("bhid,bhjd->bhij", 1)),
    "einsum_context": (12, [1, 2, 5, 7], lambda m, x: m.node("Einsum", [x, m.weight((1, 2, 7, 8))],
                                                             equation="bhij,bhjd->bhid"),
                       _einsum_error("bhij,bhjd->bhid", 1)),
    "einsum_ellipsis": (12, [2, 3, 5, 8], lambda m, x: m.node("Einsum", [x, m.weight((8, 6))],
                                                              equation="...ij,jk->...ik"),
                        _einsum_error("...ij,jk->...ik", 1)),
    "einsum_transpose_sum": (12, [4, 5, 6], lambda m, x: m.node("Einsum", [x], equation="ijk->ki"),
                             _einsum_error("ijk->ki", 1)),
    "einsum_chain": (12, [2, 3, 4], lambda m, x: m.node("Einsum", [x, m.weight((4, 5)), m.weight((5, 6))],
                                                        equation="abc,cd,de->ae"),
                     _einsum_error("abc,cd,de->ae", 2)),
    "einsum_outer": (12, [5], lambda m, x: m.node("Einsum", [x, m.weight((8,))], equation="i,j->ij"),
                     _einsum_error("i,j->ij", 1)),
    "attention_4d": (23, [1, 2, 5, 8], lambda m, x: m.node("Attention", [x, m.weight((1, 2, 7, 8)),
                                                                         m.weight((1, 2, 7, 8))]),
                     _attention_error()),
    "attention_3d_gqa": (23, [1, 5, 32], lambda m, x: m.node(
        "Attention", [x, m.weight((1, 7, 16)), m.weight((1, 7, 16))], q_num_heads=4, kv_num_heads=2),
        _attention_error(4, 2)),
    "attention_causal": (23, [1, 2, 5, 8], lambda m, x: m.node(
        "Attention", [x, m.weight((1, 2, 7, 8)), m.weight((1, 2, 7, 8))], is_causal=1, scale=0.25),
        _attention_error(causal=True, scale=0.25)),
    "attention_bool_mask": (23, [1, 2, 5, 8], lambda m, x: m.node(
        "Attention", [x, m.weight((1, 2, 7, 8)), m.weight((1, 2, 7, 8)), m.init(BOOL_MASK, "mask")]),
        _attention_error(mask=BOOL_MASK)),
    "attention_float_mask": (23, [1, 2, 5, 8], lambda m, x: m.node(
        "Attention", [x, m.weight((1, 2, 7, 8)), m.weight((1, 2, 7, 8)), m.init(FLOAT_MASK, "mask")]),
        _attention_error(mask=FLOAT_MASK)),
    "rotary_halves": (23, [1, 2, 5, 8], lambda m, x: _rotary(m, x, (1, 5, 4)), _rotary_error(False, 8)),
    "rotary_interleaved": (23, [1, 2, 5, 8], lambda m, x: _rotary(m, x, (1, 5, 4), interleaved=1),
                           _rotary_error(True, 8)),
    "rotary_3d_positions": (23, [2, 5, 24], lambda m, x: _rotary(
        m, x, (11, 2), positions=[[0, 1, 2, 3, 4], [10, 3, 3, 0, 7]], num_heads=2, rotary_embedding_dim=4,
        interleaved=1), _rotary_error(True, 4, heads=2)),
    "argmax": (13, [3, 5, 4], lambda m, x: m.node("ArgMax", [m.node("Floor", [x])], axis=1), EXACT),
    "argmax_last": (13, [3, 5, 4], lambda m, x: m.node("ArgMax", [m.node("Floor", [x])], axis=-1, keepdims=0,
                                                      select_last_index=1), EXACT),
    "argmin": (13, [3, 5, 4], lambda m, x: m.node("ArgMin", [m.node("Floor", [x])], axis=0), EXACT),
    "argmin_last": (13, [3, 5, 4], lambda m, x: m.node("ArgMin", [m.node("Floor", [x])], axis=2, keepdims=0,
                                                      select_last_index=1), EXACT),
    "argmax_as_float": (13, [3, 5, 4], lambda m, x: m.node("Add", [m.node("Cast", [m.node(
        "ArgMax", [m.node("Floor", [x])], axis=1)], to=TensorProto.FLOAT), m.node("Cast", [m.node(
            "Greater", [x, m.init(np.float32(0.0), "zero")])], to=TensorProto.FLOAT)]), EXACT),
    "cumsum": (14, [3, 5, 4], lambda m, x: m.node("CumSum", [x, m.init(np.int64(1), "axis")]), _cumsum_error(1)),
    "cumsum_reverse_exclusive": (14, [3, 5, 4], lambda m, x: m.node(
        "CumSum", [x, m.init(np.int32(-1), "axis")], exclusive=1, reverse=1), _cumsum_error(2)),
    "gather_elements": (13, [3, 5, 4], lambda m, x: m.node(
        "GatherElements", [x, _ints(m, np.arange(24).reshape(3, 2, 4) % 9 - 4)], axis=1), EXACT),
    "gather_nd": (13, [3, 5, 4], lambda m, x: m.node("GatherND", [x, _ints(m, [[[0, 1], [2, -1]], [[1, 0], [0, 4]]])]),
                  EXACT),
    "gather_nd_batch": (13, [3, 5, 4], lambda m, x: m.node(
        "GatherND", [x, _ints(m, [[[4], [0]], [[1], [1]], [[-2], [3]]])], batch_dims=1), EXACT),
}
INT_OUTPUT = {"argmax", "argmax_last", "argmin", "argmin_last"}
# the cases whose graph the lowering golden records
LOWERED = ("einsum_scores", "attention_causal", "rotary_interleaved", "argmax_last", "argmin", "cumsum",
           "gather_nd", "gather_elements")


def _rotary(m, x, cache_shape, positions=None, **attrs):
    angles = m.rng.uniform(0, 3, cache_shape)
    ins = [x, m.init(np.cos(angles).astype(np.float32), "cos"), m.init(np.sin(angles).astype(np.float32), "sin")]
    if positions is not None:
        ins.append(_ints(m, positions))
    return m.node("RotaryEmbedding", ins, **attrs)


def _model(tmp_path, case, shape=None) -> str:
    opset, default_shape, build, _ = CASES[case]
    m = ModelBuilder(seed=zlib.crc32(case.encode()), opset=opset)     # a case's own, whatever others exist
    y = build(m, m.input("x", shape or default_shape))
    m.output(y)
    model = m.model(case)
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _input(case) -> np.ndarray:
    shape = CASES[case][1]
    rng = np.random.default_rng(11)
    values = rng.integers(-2, 3, shape) + 0.5 * (rng.random(shape) < 0.3) if case in INT_OUTPUT \
        else rng.standard_normal(shape)
    return np.asarray(values).astype(np.float16).astype(np.float32)


def _weights(path) -> list[np.ndarray]:
    """The operands ``m.weight`` made (Einsum's and Attention's), in order."""
    return [numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(path).graph.initializer
            if i.name.startswith("w_")]


def _onnxruntime(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(_model(tmp_path, case), precision="f32").module)
    golden = GOLDEN / f"struct_{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_agree_with_onnx_inference(case, tmp_path):
    """The imported graph's output type is the one ONNX's shape inference gives (an index
    as i32, ONNX's int64, as a comparison's boolean is u8)."""
    path = _model(tmp_path, case)
    imported = import_onnx(path, precision="f16")
    output = next(iter(imported.outputs.values()))
    otype = next(op.type for op in imported.module.graphs[0].ops if op.result == output)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True).graph.output[0]
    assert tuple(otype.dims) == tuple(d.dim_value for d in inferred.type.tensor_type.shape.dim)
    integer = inferred.type.tensor_type.elem_type == TensorProto.INT64
    assert integer == (case in INT_OUTPUT) and (otype.elem.name == "I32") == integer, otype


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_against_onnxruntime(case, tmp_path):
    path = rounded_to_f16(_model(tmp_path, case), tmp_path / "r16.onnx")
    x = _input(case)
    want = _onnxruntime(path, x)
    outputs = api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs
    got = next(iter(outputs.values()))
    if case in INT_OUTPUT:
        assert got.dtype == np.int32 and (got == want).all(), (got, want)
        return
    error, weights = CASES[case][3], _weights(path)
    want = want.astype(np.float64)
    bound = error(U16, x.astype(np.float64), want, weights) + error(U32, x.astype(np.float64), want, weights)
    assert_within(got.astype(np.float64), want, bound + 2.0 ** -25, case)


@pytest.mark.parametrize("case", LOWERED)
def test_lowering_golden(case, tmp_path):
    """What the lowering makes of them: MatMuls on the DPU, the softmax library kernel,
    generated kernels of the elementwise steps, the copies and gathers by DMA."""
    text, name, _ = onnx_as_vir(_model(tmp_path, case), None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / f"lowered_struct_{case}.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()
