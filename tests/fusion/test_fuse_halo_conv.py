"""A dense layer's 3x3 on its 1x1's output blocks (``vpuc/fusion/fuse_halo_conv.py``,
``--schedule default``): DenseNet-121's BatchNorm, Relu, 1x1 (BatchNorm and Relu folded),
3x3 on a Concat, where neither the normalized Concat nor the 1x1's output fits the room
values kept in CMX have.  The 1x1's output is never written to DDR, in the chain on the
depthwise's blocks and when the 1x1 is a layer of its own; the outputs match
onnxruntime's within a bound derived from the roundings (a wrong halo row, an edge
block's padding, would be off by a term of the sum)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tolerances import assert_within_bound, gamma, unit_roundoff
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder

A, B, M, G, SIZE = 32, 16, 64, 32, 16
C = A + B
# As tests/fusion/test_fuse_conv.py: 16 KiB of room for values kept in CMX, short of the
# 24 KiB normalized Concat and of the 32 KiB 1x1 output.
BUDGET = (2 << 20) - (256 << 10) - (16 << 10)
U16, U32 = unit_roundoff(np.float16), unit_roundoff(np.float32)
ETA = float(np.finfo(np.float16).smallest_subnormal)


def _conv(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A stride-1 convolution of ``x`` [1, C, H, W] by ``w`` [O, C, k, k], zero padding k//2,
    in float64."""
    k = w.shape[-1]
    pad = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    windows = np.lib.stride_tricks.sliding_window_view(pad, (k, k), axis=(2, 3))
    return np.einsum("ocij,nchwij->nohw", w, windows)


def _layer_error(w, b, x, e_x):
    """A DPU layer's output and its error bound against ORT's, relu(conv(w, x) + b), ``x``
    within ``e_x`` of ORT's input: w and b rounded to f16 (u16 of |w||x| + |b|), both f32
    sums of the window's K terms and the bias (gamma_{K+1} each), ``e_x`` through |w|, the
    f16 store (u16 of all that, eta); Relu is 1-Lipschitz."""
    aw = np.abs(w.astype(np.float64))
    k = w[0].size + 1
    y = _conv(w.astype(np.float64), x) + b.reshape(1, -1, 1, 1)
    mag = _conv(aw, np.abs(x) + e_x) + np.abs(b.astype(np.float64)).reshape(1, -1, 1, 1)
    e = _conv(aw, e_x) + U16 * mag + 2 * gamma(k, np.float32) * (1 + U16) * mag
    return np.maximum(y, 0), e + U16 * (np.abs(y) + e) + ETA


def _model(tmp_path, chain: bool):
    """A dense layer (``chain``: BatchNorm and Relu on a Concat first), then a Concat of its
    input and the 3x3's output, max-pooled 2x2; the model's path and constants."""
    m = ModelBuilder(seed=7, opset=13)
    rng = np.random.default_rng(8)
    def pooled(name: str, c: int) -> str:    # a DPU layer's output (NHWC), exact
        return m.node("MaxPool", [m.input(name, [1, c, 2 * SIZE, 2 * SIZE])],
                      kernel_shape=[2, 2], strides=[2, 2])
    if chain:
        x = m.node("Concat", [pooled("a", A), pooled("b", B)], axis=1)
        scale, beta, mean = (rng.standard_normal((3, C)) * 0.5).astype(np.float32)
        var = rng.uniform(0.5, 1.5, C).astype(np.float32)
        z = m.node("Relu", [m.node("BatchNormalization",
                                   [x, *(m.init(v, "bn") for v in (scale, beta, mean, var))])])
        s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64)
                                               + np.float64(np.float32(1e-5)))
        bn = (s, mean, beta)
    else:
        x = z = pooled("x", C)
        bn = None
    w1 = (rng.standard_normal((M, C, 1, 1)) * np.sqrt(2.0 / C)).astype(np.float32)
    b1 = (rng.standard_normal(M) * 0.1).astype(np.float32)
    u = m.node("Relu", [m.node("Conv", [z, m.init(w1, "w"), m.init(b1, "b")],
                               kernel_shape=[1, 1])])
    w3 = (rng.standard_normal((G, M, 3, 3)) * np.sqrt(2.0 / (9 * M))).astype(np.float32)
    b3 = (rng.standard_normal(G) * 0.1).astype(np.float32)
    y = m.node("Relu", [m.node("Conv", [u, m.init(w3, "w"), m.init(b3, "b")],
                               kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    # pooled, as DenseNet's transitions read a block's Concat: the Concat stays NHWC
    m.output(m.node("MaxPool", [m.node("Concat", [x, y], axis=1)], kernel_shape=[2, 2],
                    strides=[2, 2]))
    return m.save(tmp_path / "m.onnx", "m"), m.model(), (bn, w1, b1, w3, b3)


def _compiled(tmp_path_factory, chain: bool):
    from vpuc import api
    path, model, consts = _model(tmp_path_factory.mktemp("halo"), chain)
    rng = np.random.default_rng(9)
    shapes = {"a": A, "b": B} if chain else {"x": C}
    inputs = {k: rng.standard_normal((1, c, 2 * SIZE, 2 * SIZE)).astype(np.float16)
              .astype(np.float32) for k, c in shapes.items()}
    program = api.compile(path, schedule="default", cmx_budget=BUDGET)
    return program, api.simulate(program, inputs), model, inputs, consts


@pytest.fixture(scope="module")
def chained(tmp_path_factory):
    return _compiled(tmp_path_factory, True)


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    return _compiled(tmp_path_factory, False)


def _ddr_values_written(program) -> list[tuple]:
    """The dims of the DDR buffers the program's DMAs write."""
    symbols = SymbolTable(program.module)
    dims = []
    for task_list in program.module.task_lists:
        for task in task_list.tasks:
            region = symbols.region(task.dst) if isinstance(task, DmaTask) else None
            if region is not None and region.kind is BufferKind.DDR:
                dims.append(tuple(region.root.type.dims))
    return dims


def _onnxruntime(model, inputs: dict) -> np.ndarray:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


@pytest.mark.parametrize("which", ["chained", "paired"])
def test_the_1x1_output_never_goes_to_ddr(which, request):
    """No DMA writes a [1, M, SIZE, SIZE] value to DDR; the 3x3 runs as DPU tasks with a
    3x3 window on blocks of more than one (the halo crosses between them)."""
    program = request.getfixturevalue(which)[0]
    assert (1, M, SIZE, SIZE) not in _ddr_values_written(program)
    windows = [t for tl in program.module.task_lists for t in tl.tasks
               if isinstance(t, DpuTask) and tuple(t.kernel or ()) == (3, 3)]
    assert len(windows) >= 2


@pytest.mark.parametrize("which", ["chained", "paired"])
def test_outputs_match_onnxruntime_within_the_roundings(which, request):
    """The normalization's bound as tests/fusion/test_fuse_conv.py derives it (s and t
    rounded to f16, the DPU's f32 sum and f16 store, ORT's f32 within gamma_8), then each
    layer's (``_layer_error``); the Concat's copy of the input is exact, the max pool
    1-Lipschitz: its bound is its window's largest."""
    _, sim, model, inputs, (bn, w1, b1, w3, b3) = request.getfixturevalue(which)
    want = _onnxruntime(model, inputs).astype(np.float64)
    got = next(iter(sim.outputs.values())).astype(np.float64).reshape(want.shape)
    def pooled(v):
        n, c, h, w = v.shape
        return v.astype(np.float64).reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    if which == "chained":
        x = np.concatenate([pooled(inputs["a"]), pooled(inputs["b"])], axis=1)
        s, mean, beta = bn
        sv, t = s.reshape(1, -1, 1, 1), (beta - mean * s).reshape(1, -1, 1, 1)
        z = np.maximum(x * sv + t, 0)
        mz = np.abs(x * sv) + np.abs(t)
        e_z = (U16 + U32 * (1 + U16) + U16 * (1 + U16) * (1 + U32)) * mz + ETA \
            + gamma(8, np.float32) * (np.abs(x * sv) + np.abs(mean * s).reshape(1, -1, 1, 1)
                                      + np.abs(beta).reshape(1, -1, 1, 1))
    else:
        x = pooled(inputs["x"])
        z, e_z = x, np.zeros_like(x)
    u, e_u = _layer_error(w1, b1, z, e_z)
    _, e_y = _layer_error(w3, b3, u, e_u)
    bound = np.concatenate([np.zeros_like(x), e_y], axis=1)
    n, c, h, w = bound.shape
    assert_within_bound(got, want, bound.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5)))
