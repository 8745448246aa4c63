"""The topologies of well-known models as ONNX files with random weights (fixed seeds).

NPU engineers bring ResNet, MobileNetV3, FPN detectors and ViT encoders; their
trained weights cannot be fetched here, and the compiler's behaviour (shapes,
op mix, tiling, cycles) depends on the topology, not on the weight values.
So these builders reproduce each topology node for node as the PyTorch
exporter emits it (Conv + BatchNormalization, Flatten + Gemm heads, Shape
subgraphs feeding Reshape), at any input size and width, for the tests, the
model benchmark and the README demo::

    python -m vpuc.onnx_import.zoo resnet18 -o resnet18.onnx [--size 224]

Weights are He-scaled normals so activations keep their scale through depth,
which keeps f16 comparisons meaningful.
"""

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


# ----------------------------------------------------------------- topologies

def _bn(m: ModelBuilder, x: str, channels: int) -> str:
    rng = m.rng
    return m.node("BatchNormalization", [
        x, m.init(rng.uniform(0.8, 1.2, channels).astype(np.float32), "gamma"),
        m.init((rng.standard_normal(channels) * 0.05).astype(np.float32), "beta"),
        m.init((rng.standard_normal(channels) * 0.05).astype(np.float32), "mean"),
        m.init(rng.uniform(0.8, 1.2, channels).astype(np.float32), "var")], epsilon=1e-5)


def _conv_bn(m, x, cin, cout, k, stride=1, group=1, act="Relu"):
    pad = k // 2
    w = m.weight((cout, cin // group, k, k), np.sqrt(2.0 / (cin // group * k * k)))
    y = _bn(m, m.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[pad] * 4, group=group), cout)
    return m.node(act, [y]) if act else y


def _classifier_head(m, x, channels, classes):
    """GlobalAveragePool, the Shape/Gather/Concat → Reshape flatten PyTorch emits, Gemm."""
    y = m.node("GlobalAveragePool", [x])
    shape = m.node("Shape", [y])
    batch = m.node("Gather", [shape, m.init(np.asarray(0, np.int64), "zero")], axis=0)
    target = m.node("Concat", [m.node("Unsqueeze", [batch, m.init(np.asarray([0], np.int64), "axes")]),
                               m.init(np.asarray([-1], np.int64), "minus1")], axis=0)
    y = m.node("Reshape", [y, target])
    return m.node("Gemm", [y, m.weight((classes, channels)), m.weight((classes,), 0.01)], transB=1)


def resnet18(size: int = 224, width: int = 64, classes: int = 1000, seed: int = 0) -> ModelBuilder:
    """torchvision's ResNet-18: 7x7/2 stem, 3x3/2 max pool, 4 stages of 2 BasicBlocks."""
    m = ModelBuilder(seed)
    x = m.input("input", [1, 3, size, size])
    y = _conv_bn(m, x, 3, width, 7, stride=2)
    y = m.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            h = _conv_bn(m, y, cin, cout, 3, stride)
            h = _conv_bn(m, h, cout, cout, 3, act=None)
            skip = _conv_bn(m, y, cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else y
            y = m.node("Relu", [m.node("Add", [h, skip])])
            cin = cout
    m.output(_classifier_head(m, y, cin, classes))
    return m


def _make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _squeeze_excite(m, x, channels):
    squeezed = _make_divisible(channels // 4)
    s = m.node("GlobalAveragePool", [x])
    s = m.node("Relu", [m.node("Conv", [s, m.weight((squeezed, channels, 1, 1)), m.weight((squeezed,), 0.01)],
                               kernel_shape=[1, 1])])
    s = m.node("Conv", [s, m.weight((channels, squeezed, 1, 1)), m.weight((channels,), 0.01)], kernel_shape=[1, 1])
    return m.node("Mul", [x, m.node("HardSigmoid", [s], alpha=1.0 / 6, beta=0.5)])


# torchvision mobilenet_v3_small: kernel, expanded, out, squeeze-excite, activation, stride
_MOBILENET_V3_SMALL = [
    (3, 16, 16, True, "Relu", 2), (3, 72, 24, False, "Relu", 2), (3, 88, 24, False, "Relu", 1),
    (5, 96, 40, True, "HardSwish", 2), (5, 240, 40, True, "HardSwish", 1), (5, 240, 40, True, "HardSwish", 1),
    (5, 120, 48, True, "HardSwish", 1), (5, 144, 48, True, "HardSwish", 1), (5, 288, 96, True, "HardSwish", 2),
    (5, 576, 96, True, "HardSwish", 1), (5, 576, 96, True, "HardSwish", 1),
]


def mobilenet_v3_small(size: int = 224, classes: int = 1000, seed: int = 0) -> ModelBuilder:
    """torchvision's MobileNetV3-Small: depthwise inverted residuals, squeeze-excite
    (GlobalAveragePool, HardSigmoid), HardSwish, a 1024-wide head."""
    m = ModelBuilder(seed)
    y = _conv_bn(m, m.input("input", [1, 3, size, size]), 3, 16, 3, stride=2, act="HardSwish")
    cin = 16
    for k, expanded, cout, se, act, stride in _MOBILENET_V3_SMALL:
        h = _conv_bn(m, y, cin, expanded, 1, act=act) if expanded != cin else y
        h = _conv_bn(m, h, expanded, expanded, k, stride, group=expanded, act=act)
        if se:
            h = _squeeze_excite(m, h, expanded)
        h = _conv_bn(m, h, expanded, cout, 1, act=None)
        y = m.node("Add", [h, y]) if stride == 1 and cin == cout else h
        cin = cout
    y = _conv_bn(m, y, cin, 576, 1, act="HardSwish")
    y = m.node("GlobalAveragePool", [y])
    y = m.node("Flatten", [y], axis=1)
    y = m.node("HardSwish", [m.node("Gemm", [y, m.weight((1024, 576)), m.weight((1024,), 0.01)], transB=1)])
    m.output(m.node("Gemm", [y, m.weight((classes, 1024)), m.weight((classes,), 0.01)], transB=1))
    return m


def fpn_block(size: int = 64, channels: int = 32, seed: int = 0) -> ModelBuilder:
    """A U-Net/FPN decoder step as DBNet-style detectors have it: a coarse map is
    upsampled (Resize nearest, and a ConvTranspose path), concatenated with the lateral
    features and fused by a 3x3 conv, then a sigmoid probability map."""
    m = ModelBuilder(seed)
    fine = m.input("fine", [1, channels, size, size])
    coarse = m.input("coarse", [1, 2 * channels, size // 2, size // 2])
    lateral = _conv_bn(m, fine, channels, channels, 1)
    top = _conv_bn(m, coarse, 2 * channels, channels, 1)
    up = m.node("Resize", [top, "", m.init(np.asarray([1, 1, 2, 2], np.float32), "scales")],
                mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    deconv = m.node("ConvTranspose", [coarse, m.weight((2 * channels, channels, 2, 2)), m.weight((channels,), 0.01)],
                    kernel_shape=[2, 2], strides=[2, 2])
    y = m.node("Concat", [m.node("Add", [lateral, up]), deconv], axis=1)
    y = _conv_bn(m, y, 2 * channels, channels, 3)
    y = m.node("Resize", [y, "", m.init(np.asarray([1, 1, 2, 2], np.float32), "scales")],
               mode="linear", coordinate_transformation_mode="half_pixel")
    m.output(m.node("Sigmoid", [m.node("Conv", [y, m.weight((1, channels, 3, 3)), m.weight((1,), 0.01)],
                                       kernel_shape=[3, 3], pads=[1, 1, 1, 1])]))
    return m


def encoder_layer(seq: int = 197, width: int = 192, heads: int = 3, mlp: int = 4, seed: int = 0,
                  layers: int = 1) -> ModelBuilder:
    """A pre-norm ViT encoder layer (DeiT-Tiny: width 192, 3 heads): LayerNorm, multi-head
    attention (Reshape/Transpose into heads, QK^T, Softmax, ·V), residual, LayerNorm, GELU MLP;
    ``layers`` of them in a chain (bench/model_bench.py --linearity)."""
    m = ModelBuilder(seed)
    m.output(encoder_blocks(m, m.input("tokens", [1, seq, width]), seq, width, heads, mlp, layers))
    return m


def encoder_blocks(m: ModelBuilder, x: str, seq: int, width: int, heads: int, mlp: int,
                   layers: int, mask: str | None = None) -> str:
    """``layers`` encoder layers on ``x`` [1, seq, width]; ``mask`` (broadcasting to the
    scores [1, heads, seq, seq]) is added to the scores before the Softmax."""
    head = width // heads

    def norm(v):
        return m.node("LayerNormalization", [v, m.weight((width,), 0.1, "ln_g"), m.weight((width,), 0.02, "ln_b")],
                      axis=-1, epsilon=1e-6)

    def linear(v, cin, cout):
        return m.node("Add", [m.node("MatMul", [v, m.weight((cin, cout))]), m.weight((cout,), 0.02, "b")])

    def split_heads(v):
        v = m.node("Reshape", [v, m.init(np.asarray([1, seq, heads, head], np.int64), "shape")])
        return m.node("Transpose", [v], perm=[0, 2, 1, 3])

    for _ in range(layers):
        h = norm(x)
        q, k, v = (split_heads(linear(h, width, width)) for _ in range(3))
        scores = m.node("MatMul", [q, m.node("Transpose", [k], perm=[0, 1, 3, 2])])
        scores = m.node("Mul", [scores, m.init(np.asarray(head ** -0.5, np.float32), "scale")])
        if mask is not None:
            scores = m.node("Add", [scores, mask])
        attn = m.node("MatMul", [m.node("Softmax", [scores], axis=-1), v])
        attn = m.node("Reshape", [m.node("Transpose", [attn], perm=[0, 2, 1, 3]),
                                  m.init(np.asarray([1, seq, width], np.int64), "shape")])
        x = m.node("Add", [x, linear(attn, width, width)])
        h = m.node("Gelu", [linear(norm(x), width, mlp * width)]) if m.opset >= 20 else \
            _gelu_erf(m, linear(norm(x), width, mlp * width))
        x = m.node("Add", [x, linear(h, mlp * width, width)])
    return x


def _gelu_erf(m, v):
    """GELU as exporters before opset 20 write it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    inner = m.node("Erf", [m.node("Div", [v, m.init(np.asarray(2 ** 0.5, np.float32), "sqrt2")])])
    half = m.node("Mul", [v, m.init(np.asarray(0.5, np.float32), "half")])
    return m.node("Mul", [half, m.node("Add", [inner, m.init(np.asarray(1.0, np.float32), "one")])])


def crnn(height: int = 32, width: int = 104, hidden: int = 64, classes: int = 37, seed: int = 0) -> ModelBuilder:
    """A CRNN text recognizer (Shi et al. 2015, as PyTorch exports it): conv-BN-ReLU layers
    and max pools taking a grey text line to one row of ``width / 4`` columns, the columns
    as a sequence (Reshape, Transpose to ``[T, 1, C]``), two bidirectional LSTM layers (zero
    initial states given, as the exporter writes them; each layer's ``[T, 2, 1, H]`` merged
    to ``[T, 1, 2H]``), a Linear head and LogSoftmax over the CTC classes."""
    m = ModelBuilder(seed)
    y = m.input("image", [1, 1, height, width])
    cin = 1
    for cout, pool in ((32, (2, 2)), (64, (2, 2)), (128, (2, 1)), (128, (height // 8, 1))):
        y = _conv_bn(m, y, cin, cout, 3)
        y = m.node("MaxPool", [y], kernel_shape=list(pool), strides=list(pool))
        cin = cout
    steps = width // 4
    y = m.node("Reshape", [y, m.init(np.asarray([1, cin, steps], np.int64), "shape")])
    y = m.node("Transpose", [y], perm=[2, 0, 1])
    zeros = m.init(np.zeros((2, 1, hidden), np.float32), "h0")
    for _ in range(2):
        w = m.weight((2, 4 * hidden, cin), 1.0 / np.sqrt(cin))
        r = m.weight((2, 4 * hidden, hidden), 1.0 / np.sqrt(hidden))
        bias = m.weight((2, 8 * hidden), 0.1)
        seq = m.node("LSTM", [y, w, r, bias, "", zeros, zeros], hidden_size=hidden, direction="bidirectional")
        y = m.node("Reshape", [m.node("Transpose", [seq], perm=[0, 2, 1, 3]),
                               m.init(np.asarray([steps, 1, 2 * hidden], np.int64), "shape")])
        cin = 2 * hidden
    logits = m.node("Add", [m.node("MatMul", [y, m.weight((cin, classes))]), m.weight((classes,), 0.02, "b")])
    m.output(m.node("LogSoftmax", [logits], axis=-1))
    return m


ZOO = {"resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small, "fpn_block": fpn_block,
       "encoder_layer": encoder_layer, "crnn": crnn}


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m vpuc.onnx_import.zoo",
                                     description="write a well-known topology as ONNX with random weights")
    parser.add_argument("model", choices=sorted(ZOO))
    parser.add_argument("-o", "--output", required=True, metavar="FILE.onnx")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, metavar="N",
                        help="input height and width (resnet18, mobilenet_v3_small, fpn_block)")
    args = parser.parse_args(argv)
    extra = {}
    if args.size is not None:
        if args.model in ("encoder_layer", "crnn"):
            parser.error(f"--size: {args.model} takes no square image size")
        extra["size"] = args.size
    ZOO[args.model](seed=args.seed, **extra).save(args.output, args.model)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
