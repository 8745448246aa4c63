"""Helpers the ONNX tests share."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def rounded_to_f16(model: str | onnx.ModelProto, out=None):
    """The model with every float initializer rounded to the nearest f16 value (kept f32),
    so onnxruntime sees the weights the NPU computes with.  Saved to ``out`` (returning its
    path) or returned as a ModelProto."""
    model = onnx.load(model) if not isinstance(model, onnx.ModelProto) else model
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(array.astype(np.float16).astype(np.float32), init.name))
    if out is None:
        return model
    onnx.save(model, str(out))
    return str(out)
