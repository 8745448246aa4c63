"""The K split of a bf16 layer (``vpuc/fusion/lower_dpu_ksplit.py``): the DPU writes f32
partial sums as for f16, ACT SHAVE adds them and applies the activation in f32, and the
library ``convert`` rounds the total once to bf16 (it was an error: the totals were
converted to f16 only).

No ONNX import makes bf16 layers (``--precision`` is f16 or f32), so the models of
``test_ksplit.py`` are imported as f16 graph VIR and retyped to bf16: a bf16 graph as one
written by hand.  onnxruntime computes the f32 model with its weights rounded to bf16 on
the same bf16 inputs.  Tolerance (``tests/tolerances.py``, ``stored_sum_bound``): both sum
the same K + 1 terms in f32 in different orders, and vpuc rounds once to bf16
(``u_bf16 (|got| + |want|)``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tests.onnx_import.test_ksplit import BUILDS, CONVS, _calls, _dpu_tasks, _elem
from tests.tolerances import assert_within_bound, stored_sum_bound
from vpuc import api
from vpuc.ir.types import ElemType
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.onnx_import.zoo import ModelBuilder

BF16 = ml_dtypes.bfloat16
CASES = {"gemm_relu": (6000, None), "matmul_clip": (6000, None),
         "conv_relu": (CONVS["conv_relu"][1], CONVS["conv_relu"][2])}


def _rounded_to_bf16(path, out):
    model = onnx.load(path)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32:
            rounded = array.astype(BF16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(rounded, init.name))
    onnx.save(model, str(out))
    return str(out)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bf16_k_split_matches_onnxruntime(case, tmp_path):
    budget, conv_terms = CASES[case]
    rng = np.random.default_rng(0)
    m = ModelBuilder(seed=0, opset=17)
    out, shape, magnitude = BUILDS[case](m, rng)
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    text, name, _ = onnx_as_vir(path, None, "f16")
    program = api.compile_text(text.replace("xf16", "xbf16"), name, cmx_budget=budget)
    tasks = _dpu_tasks(program)
    assert {_elem(program, t.output) for t in tasks} == {ElemType.F32}     # partial sums
    blocks = _calls(program, "ksplit_convert_f32_bf16")
    assert blocks and len(tasks) > len(blocks)         # more than one chunk per block
    x = rng.standard_normal(shape).astype(BF16)
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    (got,) = sim.outputs.values()
    assert got.dtype == np.dtype(BF16)
    want = ort.InferenceSession(_rounded_to_bf16(path, tmp_path / "r.onnx"),
                                providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    x64 = x.astype(np.float64)
    k = conv_terms or shape[-1]
    # the magnitudes are of the f16 weights; rounded to bf16 each moves by at most u_bf16
    terms = magnitude(x64) * (1 + 2.0 ** -8)
    bound = stored_sum_bound(got.astype(np.float32), want, terms, k + 1, np.float32, BF16)
    assert_within_bound(got.astype(np.float32), want, bound)
