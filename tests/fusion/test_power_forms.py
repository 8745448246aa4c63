"""Power by constant exponents as square roots, products and reciprocals
(``vpuc/fusion/power_forms.py``): the error bounds over every f16 input, IEEE pow's
special values, the refusals, the rewritten LRN graph (a golden) and compiled models
against onnxruntime."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.tolerances import unit_roundoff
from vpuc import api
from vpuc.fusion.power_forms import ERROR_BOUNDS, FORMS, INTEGER_EXPONENTS, rewrite_powers
from vpuc.ir.graph import Graph
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.reference.graph import run_graph, run_graph_values
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parents[1] / "onnx_import" / "golden" / "power_forms_lrn.expected"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16, U32 = unit_roundoff(np.float16), unit_roundoff(np.float32)
F16_MAX = float(np.finfo(np.float16).max)
F16_HALF_TINY = 2.0 ** -25                       # half f16's smallest subnormal


def _graph(exponent: float, count: int, base: str = "Abs", elem: str = "f16") -> Graph:
    """x -> base(x) -> Power(., exponent): ``Abs`` makes the base sign-clear."""
    body = f"%b = {base}(%x)\n  %y = Power(%b, %e)" if base else "%y = Power(%x, %e)"
    text = (f"module @m\ngraph @g {{\n  %x = Parameter() : {count}x{elem} C\n"
            f"  %e = Constant({exponent!r}) : {elem}\n  {body}\n  Result(%y)\n}}\n")
    return parse_text(text).graphs[0]


def _rewritten(graph: Graph) -> tuple[Graph, bool]:
    graph = copy.deepcopy(graph)
    return graph, rewrite_powers(graph)


def _every_f16() -> np.ndarray:
    """Every non-negative f16 value: +0, subnormals, normals, +inf, NaN."""
    bits = np.arange(0x0000, 0x7E01, dtype=np.uint16)
    return bits.view(np.float16)


@pytest.mark.parametrize("exponent", sorted(FORMS))
def test_every_f16_input_within_the_derived_bound(exponent):
    x = _every_f16()
    graph, changed = _rewritten(_graph(exponent, x.size))
    assert changed and not any(op.kind == "Power" and op.result == "y" for op in graph.ops)
    values, (got,) = run_graph_values(graph, {"x": x})
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), exponent)
    k = ERROR_BOUNDS[exponent]
    # the form in f32, before its last Convert: within k u32 of the exact power (first
    # order; the second-order terms are below k^2 u32^2)
    wide = values[next(op.operands[0] for op in graph.ops if op.result == "y")].astype(np.float64)
    finite = np.isfinite(exact) & (exact > 0)
    assert np.all(np.abs(wide[finite] - exact[finite]) <= (k + 1e-3) * U32 * exact[finite])
    # stored in f16: one more rounding (u16 relative, or half the smallest subnormal), or
    # inf where the f32 value reaches f16's overflow threshold
    got = got.astype(np.float64)
    representable = finite & (exact * (1 + k * U32) < F16_MAX * (1 + U16))
    bound = U16 * exact + (k + 1e-3) * U32 * exact * (1 + U16) + F16_HALF_TINY
    assert np.all(np.abs(got[representable] - exact[representable]) <= bound[representable])
    assert np.all(np.isinf(got[finite & ~representable]))


@pytest.mark.parametrize("exponent", sorted(FORMS))
def test_special_values_are_ieee_pow(exponent):
    """+0, +inf, NaN and 1 (and every sign for the integer exponent): bit for bit IEEE
    pow, rounded to f16."""
    specials = [0.0, np.inf, np.nan, 1.0]
    if exponent in INTEGER_EXPONENTS:
        specials += [-0.0, -np.inf, -1.0, -2.5]
    x = np.array(specials, np.float16)
    graph, changed = _rewritten(_graph(exponent, x.size, base=None if exponent in
                                       INTEGER_EXPONENTS else "Abs"))
    assert changed
    (got,) = run_graph(graph, {"x": x})
    with np.errstate(all="ignore"):
        want = np.power(np.abs(x.astype(np.float64)) if exponent not in INTEGER_EXPONENTS
                        else x.astype(np.float64), exponent).astype(np.float16)
    # NaN where pow gives NaN, its payload left to the platform (an ARM FPU may give its
    # default NaN); every other value bit for bit, the sign of a zero included
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("base, elem, exponent", [
    (None, "f16", -0.75),        # a Parameter may be -0 or -inf: 1/sqrt(-0) is -inf, pow +inf
    ("Negative", "f16", 0.25),   # a negative base
    ("Abs", "f32", -0.75),       # f32 graphs keep their Power
    ("Abs", "f16", 0.6),         # no form for this exponent
])
def test_refused_where_the_form_could_differ(base, elem, exponent):
    graph, changed = _rewritten(_graph(exponent, 4, base, elem))
    assert not changed and [op.kind for op in graph.ops].count("Power") == 1


def test_zero_and_infinite_parameters_show_why_the_domain_matters():
    """The -0 and -inf a Parameter may hold: the form of -0.75 and -0.25 would not be pow."""
    x = np.array([-0.0, -np.inf], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):        # the IEEE results are the point
        s0 = np.sqrt(x)
        assert np.isneginf(np.float32(1) / np.sqrt(s0))[0]       # pow(-0, -0.25) is +inf
        assert np.isnan(np.sqrt(s0))[1] and np.power(-np.inf, 0.25) == np.inf


def _lrn_model(path, shape) -> str:
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", size=5, alpha=1e-4, beta=0.75,
                            bias=1.0)
    graph = helper.make_graph([node], "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(path))
    return str(path)


def test_lrn_base_is_rewritten_golden(tmp_path):
    """LRN's bias + c * conv(x * x) is proven sign-clear: its t^-0.75 becomes two square
    roots, a product and a reciprocal in f32."""
    text, _, _ = onnx_as_vir(_lrn_model(tmp_path / "lrn.onnx", [1, 8, 3, 3]), warn=False)
    module = parse_text(text)
    assert rewrite_powers(module.graphs[0])
    text = print_module(module)
    if UPDATE:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def _compiled_against_ort(path, x, bound_of):
    program = api.compile(path)
    bodies = [k.graph for k in program.kernels.values() if getattr(k, "graph", None)]
    sim = api.simulate(program, {"x": x}, reference=True)
    assert sim.kernel_check is None or not sim.kernel_check.mismatches
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    excess = np.abs(got - want) - bound_of(want.astype(np.float64))
    assert np.all(excess <= 0), float(excess.max())
    return bodies


def test_lrn_at_alexnet_parameters_against_onnxruntime(tmp_path):
    """Bit-exact against the recorded graph (kernel check), and within test_lrn's bound of
    onnxruntime: the form's 4.5 u32 sits far inside the Power tolerance that bound allows."""
    from tests.onnx_import.test_lrn import _lrn_bound
    shape = (1, 96, 13, 13)
    x = (np.random.default_rng(5).standard_normal(shape) * 20).astype(np.float16).astype(np.float32)
    path = _lrn_model(tmp_path / "alexnet_lrn.onnx", list(shape))
    bodies = _compiled_against_ort(path, x, lambda want: _lrn_bound(
        x, want, size=5, alpha=1e-4, beta=0.75, bias=1.0))
    assert any("Sqrt" in body for body in bodies)             # the form, not exp(c log t)


@pytest.mark.parametrize("exponent", [3.0, -0.75, 1.5])
def test_plain_pow_against_onnxruntime(exponent, tmp_path):
    """Pow(x * x, c) (a square, so sign-clear) and Pow(x, 3) (any sign): x * x rounds to
    f16 (u16, times |c| in the power), the form's bound, then the f16 rounding (u16)."""
    square = exponent not in INTEGER_EXPONENTS
    nodes = ([helper.make_node("Mul", ["x", "x"], ["b"])] if square else []) + [
        helper.make_node("Pow", ["b" if square else "x", "c"], ["y"])]
    shape = [1, 16, 8, 8]
    graph = helper.make_graph(
        nodes, "pow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [helper.make_tensor("c", TensorProto.FLOAT, [], [exponent])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    path = str(tmp_path / "pow.onnx")
    onnx.save(model, path)
    x = (np.random.default_rng(7).uniform(0.2, 3.0, shape) * np.sign(
        np.random.default_rng(8).standard_normal(shape))).astype(np.float16).astype(np.float32)
    k = ERROR_BOUNDS[exponent]
    relative = (abs(exponent) * U16 if square else 0) + k * U32 + U16 + 4 * U32
    bodies = _compiled_against_ort(path, x, lambda want: relative * np.abs(want) + F16_HALF_TINY)
    assert any(("Sqrt" if square else "Multiply") in body for body in bodies)
