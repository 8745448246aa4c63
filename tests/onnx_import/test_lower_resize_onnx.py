"""One-op ONNX Resize models, compiled and simulated end to end (`vpuc run MODEL.onnx
--reference`) and compared with onnxruntime.

Nearest resizes are DMA copies (``lower_dma_plan``'s strided runs): with the input
rounded to f16 on both sides, the outputs equal onnxruntime's exactly.

Linear resizes (``vpuc/fusion/lower_resize.py``) gather the two source rows of every
output row by DMA, blend them on ACT SHAVE (``lo + (hi - lo)·f``: three f16
roundings, each at most u = 2⁻¹¹ of the magnitude it rounds, all bounded by max|x|)
and interpolate the columns on the DPU as a MatMul by the constant interpolation
matrix (f32 accumulation of two non-zero terms, weights rounded to f16: u each, one
rounding of the result).  Every term is at most max|x| in magnitude, so the
difference to onnxruntime's f32 result is within ``8u·max|x|``.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_testlib import compiled_against_onnxruntime

U = 2.0 ** -11


def _resize(shape, scales=None, sizes=None, **attrs):
    def build(m):
        x = m.input("x", list(shape))
        inputs = [x, ""]
        if sizes is not None:
            inputs += ["", m.init(np.asarray(sizes, np.int64), "sizes")]
        else:
            inputs.append(m.init(np.asarray(scales, np.float32), "scales"))
        return m.node("Resize", inputs, **attrs)
    return build


NEAREST = {
    f"nearest_{ctm}_{nm}": _resize((1, 3, 5, 6), scales=[1, 1, 2, 2], mode="nearest",
                                   coordinate_transformation_mode=ctm, nearest_mode=nm)
    for ctm, nm in [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                    ("pytorch_half_pixel", "round_prefer_ceil"), ("align_corners", "ceil"),
                    ("tf_half_pixel_for_nn", "round_prefer_floor")]
}
NEAREST["nearest_down_sizes"] = _resize((1, 2, 8, 9), sizes=[1, 2, 4, 3], mode="nearest",
                                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")
NEAREST["nearest_x3_channels"] = _resize((1, 2, 4, 4), scales=[1, 2, 3, 1], mode="nearest",
                                         coordinate_transformation_mode="half_pixel")
NEAREST["nearest_fractional_scales"] = _resize((1, 2, 6, 10), scales=[1, 1, 1.7, 0.6], mode="nearest",
                                              coordinate_transformation_mode="half_pixel")
LINEAR = {
    f"linear_{ctm}": _resize((1, 4, 6, 7), scales=[1, 1, 2, 2], mode="linear",
                             coordinate_transformation_mode=ctm)
    for ctm in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
}
LINEAR["linear_sizes_rows_only"] = _resize((1, 3, 5, 8), sizes=[1, 3, 9, 8], mode="linear",
                                           coordinate_transformation_mode="align_corners")
LINEAR["linear_x4"] = _resize((1, 2, 4, 5), scales=[1, 1, 4, 4], mode="linear",
                              coordinate_transformation_mode="half_pixel")
LINEAR["linear_down"] = _resize((1, 2, 8, 10), scales=[1, 1, 0.5, 0.5], mode="linear",
                                coordinate_transformation_mode="pytorch_half_pixel")
LINEAR["linear_fractional_scales"] = _resize((1, 2, 6, 6), scales=[1, 1, 1.3, 1.7], mode="linear",
                                             coordinate_transformation_mode="half_pixel")


def _run(case, build, tmp_path, capsys):
    return compiled_against_onnxruntime(case, build, tmp_path, capsys)


@pytest.mark.parametrize("case", sorted(NEAREST))
def test_nearest_is_exact(case, tmp_path, capsys):
    got, want, _ = _run(case, NEAREST[case], tmp_path, capsys)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("case", sorted(LINEAR))
def test_linear_within_f16_roundings(case, tmp_path, capsys):
    got, want, x = _run(case, LINEAR[case], tmp_path, capsys)
    assert np.max(np.abs(got - want)) <= 8 * U * np.max(np.abs(x))
