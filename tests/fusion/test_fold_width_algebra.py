"""The width fold's index algebra (``vpuc/fusion/lower_dpu_fold_width.py``), in numpy: the
permuted NHWC input of 4 channels read as [H, W/4, 16], convolved with the folded weights
at stride (sy, 1) and the folded pads, is the original convolution's NHWC output byte for
byte.  Both sums are the same f64 products (the fold adds exact zeros), in another order:
they agree to a few f64 ulps of the terms' magnitude."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.fusion.fold_width_geometry import Fold, fold_geometry, folded_weights


def conv(x: np.ndarray, w: np.ndarray, stride: tuple[int, int],
         pads: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Direct NCHW convolution in f64 (pads top, left, bottom, right), and the sum of the
    terms' magnitudes per output (the scale of its rounding)."""
    _, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - kh) // stride[0] + 1
    ow = (wd + pl + pr - kw) // stride[1] + 1
    out, mag = np.zeros((1, oc, oh, ow)), np.zeros((1, oc, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride[0] * (oh - 1) + 1:stride[0],
                       j:j + stride[1] * (ow - 1) + 1:stride[1]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
            mag += np.einsum("nchw,oc->nohw", np.abs(patch), np.abs(w[:, :, i, j]))
    return out, mag


CASES = [
    # (channels, H, W, out channels, kernel, stride, pads (top, left, bottom, right))
    (3, 20, 32, 16, 7, 2, (3, 3, 3, 3)),      # the ResNet stem's shape, smaller
    (3, 17, 24, 16, 3, 2, (1, 1, 1, 1)),      # MobileNetV3's stem
    (3, 9, 20, 32, 5, 1, (2, 1, 2, 3)),       # stride 1, pads not symmetric
    (1, 11, 16, 16, 3, 1, (0, 1, 0, 1)),      # one channel, no pads top and bottom
    (4, 12, 28, 16, 5, 2, (2, 2, 1, 1)),
    (2, 8, 8, 16, 7, 4, (3, 3, 3, 3)),        # stride 4: one output per folded column
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{c[0]}_{c[1]}x{c[2]}_k{c[4]}s{c[5]}" for c in CASES])
def test_folded_convolution_is_the_original_byte_for_byte(case):
    c, h, w, oc, k, s, pads = case
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((1, c, h, w))
    weights = rng.standard_normal((oc, c, k, k))
    want, mag = conv(x, weights, (s, s), pads)
    ow = want.shape[3]
    fold = fold_geometry(w, ow, k, s, pads[1], 1, 4)
    assert isinstance(fold, Fold), fold
    # the permute's NHWC block of 4 channels (zeros after the real ones) as [H, W/4, 16]
    nhwc = np.zeros((1, h, w, 4))
    nhwc[..., :c] = x.transpose(0, 2, 3, 1)
    folded_in = nhwc.reshape(1, h, w // 4, 16).transpose(0, 3, 1, 2)
    fw = folded_weights(weights, fold, s, pads[1], 4)
    assert fw.shape == (fold.per * oc, 16, k, fold.kernel)
    got, _ = conv(folded_in, fw, (s, 1), (pads[0], fold.pads[0], pads[2], fold.pads[1]))
    assert got.shape == (1, fold.per * oc, want.shape[2], fold.out_width)
    # NHWC bytes of the folded output = NHWC bytes of the original
    got_nhwc = got.transpose(0, 2, 3, 1).reshape(-1)
    want_nhwc = want.transpose(0, 2, 3, 1).reshape(-1)
    bound = 4 * k * k * c * np.finfo(np.float64).eps * mag.transpose(0, 2, 3, 1).reshape(-1)
    assert np.all(np.abs(got_nhwc - want_nhwc) <= bound)


def test_every_original_tap_lands_once_in_the_folded_weights():
    """Each weight appears exactly P times (once per output phase), the rest zero."""
    w = np.arange(1, 16 * 3 * 7 * 7 + 1, dtype=np.float64).reshape(16, 3, 7, 7)
    fold = fold_geometry(224, 112, 7, 2, 3, 1, 4)
    assert fold == Fold(factor=4, per=2, kernel=3, pads=(1, 1), width=56, out_width=56, lo=-1)
    fw = folded_weights(w, fold, 2, 3, 4)
    values, counts = np.unique(fw[fw != 0], return_counts=True)
    assert np.array_equal(values, w.ravel()) and np.all(counts == fold.per)
    assert np.all(fw[:, 3::4] == 0)         # the permute's zero channel gets zero weights


@pytest.mark.parametrize("width, out_width, kernel, stride, pad, dilation, reason", [
    (30, 15, 7, 2, 3, 1, "width 30 is not a multiple"),
    (32, 11, 3, 3, 1, 1, "stride 3 does not divide"),
    (32, 16, 3, 2, 1, 2, "dilation 2"),
    (32, 15, 4, 2, 0, 1, "output width 15 is not a multiple of 2"),
    # no right pad: the folded windows would need the output to end before the input
    (32, 13, 7, 2, 0, 1, "output width 13"),
])
def test_shapes_the_fold_cannot_take_say_why(width, out_width, kernel, stride, pad, dilation,
                                             reason):
    got = fold_geometry(width, out_width, kernel, stride, pad, dilation, 4)
    assert isinstance(got, str) and reason in got


def _epilogue(*ops):
    from types import SimpleNamespace

    from vpuc.fusion.fuse_epilogue import Epilogue
    return Epilogue("main", SimpleNamespace(body=SimpleNamespace(ops=list(ops))), {}, {}, [])


def test_only_epilogues_that_read_each_element_alone_run_on_folded_blocks():
    """A folded block's channels are (column phase, channel): an elementwise epilogue of one
    input and scalar constants computes the same bytes on it, a per-channel constant or
    a second input (a squeeze-excite scale) would not line up."""
    from vpuc.fusion.lower_dpu_fold_width import position_free
    from vpuc.ir.graph import GraphOp
    from vpuc.ir.types import DimsOrder, ElemType, TensorType

    def t(*dims):
        return TensorType(dims, ElemType.F16, DimsOrder.identity(len(dims)))
    x = GraphOp("Parameter", "x", (), {}, t(1, 16, 8, 8))
    out = GraphOp("Result", None, ("y",), {}, t(1, 16, 8, 8))
    hswish = GraphOp("HSwish", "y", ("x",), {}, t(1, 16, 8, 8))
    assert position_free(_epilogue(x, hswish, out))
    scalar = GraphOp("Constant", "s", (), {}, t(1, 1, 1, 1))
    scaled = GraphOp("Multiply", "y", ("x", "s"), {}, t(1, 16, 8, 8))
    assert position_free(_epilogue(x, scalar, scaled, out))
    per_channel = GraphOp("Constant", "s", (), {}, t(1, 16, 1, 1))
    assert not position_free(_epilogue(x, per_channel, scaled, out))
    e = GraphOp("Parameter", "e", (), {}, t(1, 16, 1, 1))
    assert not position_free(_epilogue(x, e, scaled, out))
    assert not position_free(object())          # a DPU eltwise join (EltwiseEpilogue)
