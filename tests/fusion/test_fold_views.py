"""Reshape/Transpose folded into a MatMul's loads and stores (``vpuc/fusion/fold_views.py``):
the axis maps against numpy's own reshape and transpose, and the attention of a ViT
encoder lowered with no DDR -> DDR copy left under ``--schedule default`` (and all of
them under ``naive``), computing the same values (within f16 ulps: BLAS may sum strided
operands in another order); its square constant weights transposed at compile time
(``lower_dpu_matmul.transposed_constant``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vpuc import api
from vpuc.fusion.fold_views import identity, reshaped, transposed
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import encoder_layer

from tests.fusion.dpu_testlib import assert_close, ddr_copies


def _places(axes, dims, base_dims):
    """Every logical element's flat index in the base, by the map."""
    strides = np.cumprod((1,) + tuple(base_dims[:0:-1]))[::-1]
    out = np.zeros(dims, np.int64)
    for idx in itertools.product(*(range(d) for d in dims)):
        out[idx] = sum(i * m.scale * strides[m.axis] for i, m in zip(idx, axes)
                       if m.axis is not None)
    return out


@pytest.mark.parametrize("base, steps", [
    ((1, 6, 12), [("reshape", (1, 6, 3, 4)), ("transpose", (0, 2, 1, 3))]),
    ((1, 6, 12), [("reshape", (1, 6, 3, 4)), ("transpose", (0, 2, 1, 3)),
                  ("transpose", (0, 1, 3, 2))]),
    ((2, 12), [("reshape", (2, 3, 4)), ("reshape", (2, 12)), ("reshape", (2, 2, 3, 2))]),
    ((4, 5), [("transpose", (1, 0)), ("reshape", (5, 2, 2))]),
])
def test_maps_place_elements_where_numpy_does(base, steps):
    flat = np.arange(int(np.prod(base))).reshape(base)
    value, axes = flat, identity(base)
    for kind, arg in steps:
        if kind == "reshape":
            axes = reshaped(value.shape, axes, arg)
            value = value.reshape(arg)
        else:
            axes = transposed(axes, arg)
            value = value.transpose(arg)
        assert axes is not None
    np.testing.assert_array_equal(_places(axes, value.shape, base), value)


def test_a_reshape_mixing_transposed_axes_is_not_folded():
    axes = transposed(identity((4, 6)), (1, 0))              # [6, 4], columns outer
    assert reshaped((6, 4), axes, (24,)) is None            # merging needs nested axes
    assert reshaped((6, 4), axes, (3, 8)) is None           # a group of 2 -> 2 axes
    assert reshaped((2, 3, 4), identity((2, 3, 4)), (6, 4)) is None   # two base axes



def test_encoder_attention_has_no_ddr_copies_by_default(tmp_path):
    path = encoder_layer(seq=17, width=48, heads=3).save(tmp_path / "enc.onnx", "enc")
    programs = {s: api.compile(path, schedule=s) for s in ("naive", "default")}
    # naive: 3 head splits (Reshape + Transpose), K^T and the merge (Transpose + Reshape)
    assert len({t.label.split(".")[0] for t in ddr_copies(programs["naive"])}) == 9
    assert ddr_copies(programs["default"]) == []
    layers = {src.key: {n.name for n in src.nodes} for src in programs["default"].module.layers}
    folded = set().union(*layers.values())
    assert sum(name.startswith(("Reshape", "Transpose")) for name in folded) == 9
    # the square constant weights (Q, K, V, output projections): naive stages each tile's
    # copy through a flat buffer and permutes it in CMX; default transposed them at compile
    # time into a constant each tile loads with one copy
    staged = {s: [t for tl in p.module.task_lists for t in tl.tasks
                  if isinstance(t, DmaTask) and t.label.endswith(".stage")]
              for s, p in programs.items()}
    assert len(staged["naive"]) == 4 * 2 and staged["default"] == []
    rng = np.random.default_rng(3)
    tokens = rng.standard_normal((1, 17, 48)).astype(np.float16)
    outs = {s: api.simulate(p, {"tokens": tokens}).outputs for s, p in programs.items()}
    # The folded MatMuls read strided views where naive reads contiguous copies, so BLAS
    # may sum in another order; the f16 results agree within the ulps dpu_testlib allows.
    for name in outs["naive"]:
        assert_close(outs["default"][name], outs["naive"][name], ulps=3)


def test_one_head_chain_is_folded_on_one_side_only(tmp_path):
    """With one head, the head split's Reshape/Transpose fits both a projection's store and
    the QK^T MatMul's load.  Both folded it: the projection stored into the chain's end and
    QK^T read its start, which nothing wrote (an internal error, KeyError 't2_0', found by a
    fuzz of transformer blocks).  The first MatMul to fold a chain keeps it."""
    path = encoder_layer(seq=17, width=16, heads=1).save(tmp_path / "enc1.onnx", "enc1")
    programs = {s: api.compile(path, schedule=s) for s in ("naive", "default")}
    assert ddr_copies(programs["default"]) == []
    tokens = np.random.default_rng(4).standard_normal((1, 17, 16)).astype(np.float16)
    outs = {s: api.simulate(p, {"tokens": tokens}).outputs for s, p in programs.items()}
    for name in outs["naive"]:
        assert_close(outs["default"][name], outs["naive"][name], ulps=3)
