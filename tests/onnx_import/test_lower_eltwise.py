"""Every elementwise ONNX op vpuc imports, compiled and simulated (a generated ACT SHAVE
kernel, or the DPU where it takes the op), against onnxruntime.

Softplus, Mish and Log imported but had no emitter, so no model using them compiled
("the ACT SHAVE generator has no emitter for SoftPlus"), found by the differential fuzz.

Tolerance: the input is f16 on both sides and every constant is f16-exact, so the only
difference is the op's one rounding of its f32 result to f16 (u = 2^-11 of the value),
plus a few f32 ulps where the kernel approximates (Erf, SoftPlus, Mish, Pow), and f16's
subnormal spacing (2^-24) near zero: |got - want| <= 2u |want| + 2^-24 (Sum of three
also rounds its partial sum, |x + b| <= |x| + 1.5).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.onnx_import.zoo import ModelBuilder

U16 = 2.0 ** -11
SHAPE = [1, 4, 6, 10]


def _f16_exact(m, values):
    return m.init(np.asarray(values, np.float32).astype(np.float16).astype(np.float32))


def _other(m):
    return _f16_exact(m, m.rng.uniform(0.5, 1.5, (1, 4, 1, 10)))


UNARY = {
    "Abs": {}, "Neg": {}, "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Exp": {}, "Erf": {},
    "Floor": {}, "HardSwish": {}, "HardSigmoid": {"alpha": 0.25, "beta": 0.5},
    "LeakyRelu": {"alpha": 0.125}, "Elu": {"alpha": 0.75}, "Gelu": {}, "Softplus": {},
    "Mish": {}, "Log": {}, "Sqrt": {}, "Reciprocal": {},
}
POSITIVE = {"Log", "Sqrt", "Reciprocal"}          # given |x| + 0.25


def _unary(op):
    def build(m, x):
        return m.node(op, [x], **UNARY[op])
    return build


BINARY = {
    "Add": lambda m, x: m.node("Add", [x, _other(m)]),
    "Sub": lambda m, x: m.node("Sub", [_other(m), x]),
    "Mul": lambda m, x: m.node("Mul", [x, _other(m)]),
    "Div": lambda m, x: m.node("Div", [x, _other(m)]),
    "Max": lambda m, x: m.node("Max", [x, _other(m)]),
    "Min": lambda m, x: m.node("Min", [x, _other(m)]),
    "Sum": lambda m, x: m.node("Sum", [x, _other(m), x]),
    "Pow": lambda m, x: m.node("Pow", [x, _f16_exact(m, 1.5)]),
    "PRelu": lambda m, x: m.node("PRelu", [x, _f16_exact(m, np.full((4, 1, 1), 0.25))]),
    "Clip": lambda m, x: m.node("Clip", [x, _f16_exact(m, -0.5), _f16_exact(m, 0.75)]),
    "Where": lambda m, x: m.node("Where", [m.node("Greater", [x, _f16_exact(m, 0.0)]), x,
                                           _f16_exact(m, 0.25)]),
}
CASES = {**{op: _unary(op) for op in UNARY}, **BINARY}


@pytest.mark.parametrize("op", sorted(CASES))
def test_compiled_op_matches_onnxruntime(op, tmp_path):
    m = ModelBuilder(seed=sorted(CASES).index(op), opset=20)
    m.output(CASES[op](m, m.input("x", SHAPE)))
    path = m.save(tmp_path / f"{op}.onnx", op.lower())
    x = np.random.default_rng(1).uniform(-3, 3, SHAPE)
    if op in POSITIVE or op == "Pow":
        x = np.abs(x) + 0.25
    x = x.astype(np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values())).astype(np.float64)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0].astype(np.float64)
    assert got.shape == want.shape
    bound = 2 * U16 * np.abs(want) + 2.0 ** -24
    if op == "Sum":     # x + b + x as two Adds, each rounding: the partial sum's too
        bound += 2 * U16 * (np.abs(x.astype(np.float64)) + 1.5)
    worst = np.argmax(np.abs(got - want) - bound)
    assert (np.abs(got - want) <= bound).all(), (op, got.flat[worst], want.flat[worst])
