"""Division of 16-bit floats by a constant: a multiply by the f32 reciprocal where that
is exact for every input value, else ``vdiv``; bit for bit the reference either way."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusion_testlib import Builder
from gen_testlib import run_both, same
from vpuc.fusion.generator.emitters.arith import exact_reciprocal
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ElemType
from vpuc.reference.graph import run_graph, storage_dtype


def divide_body(elem: ElemType, divisor: float):
    b = Builder()
    x = b.param((256, 256), elem)
    b.result(b.op("Divide", x, b.const(divisor, elem=elem)))
    return tokenize(b.build(), get_target("shave")).subgraphs[0].body


@pytest.mark.parametrize("elem,divisor", [
    (ElemType.F16, math.sqrt(2)), (ElemType.F16, 6.0), (ElemType.F16, 0.1),
    (ElemType.F16, 498.0),      # quotients in the subnormals round apart: vdiv stays
    (ElemType.BF16, math.sqrt(2)), (ElemType.BF16, -7.5)], ids=str)
def test_every_value_divides_as_the_reference(elem, divisor):
    """All 65536 values of the type, through the kernel, against the reference executor."""
    body = divide_body(elem, divisor)
    kernel = generate(body, "k")
    loop_ops = {f.inst.op for f in kernel.flat}
    multiplies = exact_reciprocal(divisor, elem) is not None
    assert ("vmul.f32" in loop_ops) == multiplies
    assert ("vdiv.f16" in loop_ops or "vdiv.f32" in loop_ops) == (not multiplies)
    x = np.arange(1 << 16, dtype=np.uint16).view(storage_dtype(elem)).reshape(256, 256)
    expected = run_graph(body, {body.parameters[0].result: x})[0]
    assert same(expected, run_both(kernel, [x], [(256, 256)]).outputs[0])


def test_which_divisors_multiply():
    # ONNX's Gelu divides by sqrt 2 (1.4140625 in f16): the case the rule is for
    assert exact_reciprocal(math.sqrt(2), ElemType.F16) is not None
    assert exact_reciprocal(498.0, ElemType.F16) is None
