"""Fuzz cases of Gather on run-time indices (issue 11): besides the float input ``x``, an
integer input ``ids`` (int64 or int32, rank 0 to 2) whose values ``onnx_check`` draws in
``[-size, size)`` of the gathered axis (the model's ``index_range:ids`` metadata: negative
indices included, as ONNX allows).  Three kinds:

- ``embedding``: a constant table ``[rows, width]`` (up to 3000 rows, beyond a one-chunk
  table at the widest) gathered on axis 0, plus ``x`` (the gathered rows' shape);
- ``computed``: ``x`` itself (times 2, through a Relu, or as it is) gathered along any
  axis, negative axes too;
- ``masked``: an embedding whose rows are scaled by a bool input ``keep`` cast to float
  (a mask input, as transformers take one), plus ``x``.

The ``gather`` family is nothing else (``bench/onnx_fuzz.py --gather N``).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.fuzz import onnx_forms as forms

RANGE_KEY = "index_range:"          # metadata: the size of the axis an index input picks in


def gather_case(m):
    r = m.rng
    m.opset = forms.draw_opset(m, 13)
    kind = r.choice(["embedding", "embedding", "computed", "masked"])
    index_type = r.choice([TensorProto.INT64, TensorProto.INT64, TensorProto.INT32])
    index_shape = [r.randint(1, 12) for _ in range(r.choice([0, 1, 1, 2]))]
    extra = [helper.make_tensor_value_info("ids", index_type, index_shape)]
    if kind == "computed":
        rank = r.randint(1, 4)
        shape = [r.randint(1, 7) for _ in range(rank)]
        axis = r.randint(-rank, rank - 1)
        data = r.choice(["x", m.node("Relu", ["x"]), m.node("Mul", ["x", m.init(np.float32(2.0))])])
        out = m.node("Gather", [data, "ids"], axis=axis)
        return _model(m, shape, out, extra, {"ids": shape[axis]})
    rows = r.choice([r.randint(2, 40), r.randint(100, 3000)])
    width = r.choice([1, 3, 8, 16, 31, 64, 96])
    table = m.weight([rows, width], 1)
    out = m.node("Gather", [table, "ids"], axis=0)
    shape = index_shape + [width]
    if kind == "masked":
        extra.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, index_shape + [1]))
        out = m.node("Mul", [out, m.node("Cast", ["keep"], to=TensorProto.FLOAT)])
    return _model(m, shape, m.node("Add", [out, "x"]), extra, {"ids": rows})


def _model(m, shape, out, extra, ranges):
    graph = helper.make_graph(m.nodes, "fuzz",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape), *extra],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], m.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", m.opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    helper.set_model_props(model, {f"{RANGE_KEY}{name}": str(size) for name, size in ranges.items()})
    return model


def extra_feeds(model, seed: int) -> dict[str, np.ndarray]:
    """Values for the model's inputs other than ``x``: indices within their axis (both
    signs), booleans and int8/uint8 codes at random; as ONNX types them (int64, int32,
    bool, int8, uint8)."""
    rng = np.random.default_rng(seed + 1)
    ranges = {p.key[len(RANGE_KEY):]: int(p.value) for p in model.metadata_props
              if p.key.startswith(RANGE_KEY)}
    feeds = {}
    for value in model.graph.input[1:]:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        elem = value.type.tensor_type.elem_type
        if elem == TensorProto.BOOL:
            feeds[value.name] = rng.random(dims) < 0.7
            continue
        if elem in (TensorProto.INT8, TensorProto.UINT8):      # quantized codes (onnx_quant)
            dtype = np.int8 if elem == TensorProto.INT8 else np.uint8
            info = np.iinfo(dtype)
            feeds[value.name] = rng.integers(info.min, info.max + 1, dims).astype(dtype)
            continue
        size = ranges[value.name]
        dtype = np.int64 if elem == TensorProto.INT64 else np.int32
        feeds[value.name] = rng.integers(-size, size, dims).astype(dtype)
    return feeds
