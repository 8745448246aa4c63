"""Small ONNX models built with onnx.helper for the importer's tests (random weights, fixed seeds)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ModelBuilder:
    """Nodes, initializers and I/O of one model, with generated names."""

    def __init__(self, seed: int = 0, opset: int = 17) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.opset = opset
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def input(self, name: str, shape, elem=TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def init(self, array: np.ndarray, base: str = "w") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape, scale: float | None = None, base: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.init((self.rng.standard_normal(shape) * scale).astype(np.float32), base)

    def node(self, op: str, inputs, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs

    def output(self, value: str, elem=TensorProto.FLOAT) -> None:
        self.outputs.append(helper.make_empty_tensor_value_info(value))

    def model(self, name: str = "net") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="vpuc-tests")
        model.ir_version = 8
        # Outputs are declared by name only; shape inference gives them their types.
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)

    def save(self, path, name: str = "net") -> str:
        onnx.save(self.model(name), str(path))
        return str(path)


def small_cnn(seed: int = 0) -> ModelBuilder:
    """conv-bn-relu, maxpool, conv+bias, hard-swish, global flatten-gemm, softmax."""
    m = ModelBuilder(seed)
    x = m.input("x", [1, 3, 16, 16])
    y = m.node("Conv", [x, m.weight((8, 3, 3, 3))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = m.node("BatchNormalization", [y, m.init(m.rng.uniform(0.5, 1.5, 8).astype(np.float32)),
                                      m.init(m.rng.standard_normal(8).astype(np.float32) * 0.1),
                                      m.init(m.rng.standard_normal(8).astype(np.float32) * 0.1),
                                      m.init(m.rng.uniform(0.5, 2.0, 8).astype(np.float32))])
    y = m.node("Relu", [y])
    y = m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = m.node("Conv", [y, m.weight((16, 8, 3, 3)), m.weight((16,), 0.1)], kernel_shape=[3, 3],
               strides=[2, 2], auto_pad="SAME_UPPER")
    y = m.node("HardSwish", [y])
    shape = m.node("Shape", [y])
    batch = m.node("Gather", [shape, m.init(np.asarray([0], np.int64), "idx")], axis=0)
    target = m.node("Concat", [batch, m.init(np.asarray([-1], np.int64), "minus1")], axis=0)
    y = m.node("Reshape", [y, target])
    y = m.node("Gemm", [y, m.weight((10, 256)), m.weight((10,), 0.1)], transB=1)
    y = m.node("Softmax", [y], axis=-1)
    m.output(y)
    return m
