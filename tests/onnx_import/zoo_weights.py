"""The ONNX zoo's real topologies that the ``onnx`` package ships, given real weights.

``onnx/backend/test/data/light/light_*.onnx`` are nine zoo models (AlexNet to
ZFNet-512, opset 9, IR version 3) whose weights were replaced by ``ConstantOfShape``
nodes of one value each, to keep the package small.  A network of constant weights
computes a near-constant output, which checks nothing, so ``realize`` puts seeded
random weights in their place: He-scaled convolution weights (std sqrt(2 / fan-in),
which keeps a ReLU network's activations near unit scale layer after layer), Gemm
weights of std sqrt(1 / fan-in), BatchNormalization statistics near the identity
(scale 0.8..1.2, variance 0.5..1.5, small mean and shift) and small biases.  The
BatchNormalization that ends a residual branch (read by the Sum or Add that joins it)
gets a scale of 0.1..0.3 instead: at near unit scale each of ResNet-50's 16 blocks
would double the activations' variance, 2^16 in all, past f16's range, where trained
networks keep it bounded (their last BN's scale starts near zero: Goyal et al. 2017,
"Accurate, Large Minibatch SGD", section 5.1).

The model keeps its opset and IR version: the new weights are initializers that IR
version 3 lists among the graph inputs too, so the importer sees the file as shipped
but for the values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_dir() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_path(name: str) -> Path:
    return light_dir() / f"light_{name}.onnx"


def _transposed_b(node) -> bool:
    return any(a.name == "transB" and a.i for a in node.attribute)


def _weights(rng, node, index: int, shape: tuple[int, ...], residual: bool) -> np.ndarray:
    """Values for input ``index`` of ``node`` (the consumer of a constant weight);
    ``residual``: the node's output joins a residual sum."""
    if node.op_type == "Conv" and index == 1:
        return rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
    if node.op_type == "Gemm" and index == 1:
        fan_in = shape[1] if _transposed_b(node) else shape[0]
        return rng.normal(0.0, np.sqrt(1.0 / fan_in), shape)
    if node.op_type == "BatchNormalization" and index == 1 and residual:
        return rng.uniform(0.1, 0.3, shape)
    if node.op_type == "BatchNormalization":
        low, high = {1: (0.8, 1.2), 2: (-0.1, 0.1), 3: (-0.1, 0.1), 4: (0.5, 1.5)}[index]
        return rng.uniform(low, high, shape)
    if node.op_type == "Mul":                        # a BatchNormalization written out: its scale
        return rng.uniform(0.1, 0.3, shape) if residual else rng.uniform(0.8, 1.2, shape)
    return rng.uniform(-0.1, 0.1, shape)             # biases, shifts


# Ops that only reshape a weight on its way to the node that uses it (Inception v1's
# classifier weights go through a Reshape, DenseNet's written-out BatchNorms' through
# Unsqueeze): the weight takes the role, and the shape, it has at that node.
RESHAPING = ("Reshape", "Unsqueeze", "Squeeze", "Flatten")


def _use(name: str, readers: dict) -> tuple[object, int, str] | None:
    """(node, input index, value name there) where the value ``name`` is used as a weight,
    after the reshaping ops it passes through; None when it is some node's data input."""
    while True:
        uses = readers.get(name, [])
        if not uses:
            return None
        node, index = uses[0]
        if node.op_type in RESHAPING and index == 0:
            name = node.output[0]
            continue
        return None if index == 0 else (node, index, name)


def realize(source: str | Path, seed: int = 0):
    """The model at ``source`` with every constant weight (a ``ConstantOfShape`` read as
    a weight, not as the first input of a node) replaced by seeded random values."""
    import onnx
    from onnx import helper, numpy_helper
    model = onnx.load(str(source))
    typed = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
              for v in typed.graph.value_info}
    graph = model.graph
    rng = np.random.default_rng(seed)
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, index))
    constant = {name for name in known}               # values made of constants only
    for node in graph.node:
        if all(name in constant for name in node.input):
            constant.update(node.output)
    # a residual join: a Sum or Add of computed values (not a written-out BatchNorm's shift)
    joins = {name for node in graph.node if node.op_type in ("Sum", "Add")
             and not any(name in constant for name in node.input) for name in node.input}
    kept, weights = [], []
    for node in graph.node:
        use = _use(node.output[0], readers) if node.op_type == "ConstantOfShape" else None
        if use is None or node.input[0] not in known:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in known[node.input[0]])
        reader, index, name = use
        values = _weights(rng, reader, index, shapes.get(name, shape), reader.output[0] in joins)
        weights.append(numpy_helper.from_array(values.reshape(shape).astype(np.float32), node.output[0]))
    del graph.node[:]
    graph.node.extend(kept)
    read = {name for node in kept for name in node.input}
    unread = [t for t in graph.initializer if t.name not in read]     # the weights' shapes
    for tensor in unread:
        graph.initializer.remove(tensor)
    for value in [v for v in graph.input if v.name in {t.name for t in unread}]:
        graph.input.remove(value)
    graph.initializer.extend(weights)
    if model.ir_version < 4:                      # IR 3: an initializer is also a graph input
        graph.input.extend(helper.make_tensor_value_info(w.name, w.data_type, w.dims)
                           for w in weights)
    onnx.checker.check_model(model)
    return model


def data_input(model) -> tuple[str, tuple[int, ...]]:
    """The one graph input that is not an initializer: its name and shape."""
    initializers = {t.name for t in model.graph.initializer}
    value = next(v for v in model.graph.input if v.name not in initializers)
    return value.name, tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


def onnxruntime_output(model, x: np.ndarray) -> np.ndarray:
    """The model's first output on ``x``, by onnxruntime's CPU provider on one thread."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3                   # errors only
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {data_input(model)[0]: x})[0]
