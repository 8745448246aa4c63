"""A dense layer (DenseNet-121's: BatchNorm, Relu, then a 1x1 Convolution on a Concat)
under ``--schedule default``: the normalization is a DPU depthwise 1x1
(``channel_scale_dpu``) and, when its output would not stay in CMX, the 1x1 runs on its
output blocks (``vpuc/fusion/fuse_conv.py``), so the normalized value is never written to
DDR; the outputs match onnxruntime's within a bound derived from the roundings."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tolerances import assert_within_bound, gamma, unit_roundoff
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuOp, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder

A, B, O, SIZE = 32, 16, 64, 16
C = A + B
# A tile's CMX (NPU37XX: 2 MiB) less the prefetch's 256 KiB (schedule_room.EARLY_CMX_BYTES)
# less 16 KiB: the room resident values have (resident.resident_room) is 16 KiB, short of
# the 24 KiB normalized map, as DenseNet-121's first block's maps are short of the 768 KiB
# a full budget leaves.
BUDGET = (2 << 20) - (256 << 10) - (16 << 10)


def _model(tmp_path):
    """The model's path and its constants: BN's scale, mean and shift, the 1x1's W, b."""
    m = ModelBuilder(seed=7, opset=13)
    a, b = m.input("a", [1, A, SIZE, SIZE]), m.input("b", [1, B, SIZE, SIZE])
    x = m.node("Concat", [a, b], axis=1)
    rng = np.random.default_rng(8)
    scale, beta, mean = (rng.standard_normal((3, C)) * 0.5).astype(np.float32)
    var = rng.uniform(0.5, 1.5, C).astype(np.float32)
    z = m.node("Relu", [m.node("BatchNormalization",
                               [x, *(m.init(v, "bn") for v in (scale, beta, mean, var))])])
    w = (rng.standard_normal((O, C, 1, 1)) * np.sqrt(2.0 / C)).astype(np.float32)
    bias = (rng.standard_normal(O) * 0.1).astype(np.float32)
    y = m.node("Relu", [m.node("Conv", [z, m.init(w, "w"), m.init(bias, "b")],
                               kernel_shape=[1, 1])])
    m.output(m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2]))
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + np.float64(np.float32(1e-5)))
    return m.save(tmp_path / "m.onnx", "m"), m.model(), (s, mean, beta, w, bias)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from vpuc import api
    path, model, consts = _model(tmp_path_factory.mktemp("dense"))
    rng = np.random.default_rng(9)
    inputs = {"a": rng.standard_normal((1, A, SIZE, SIZE)).astype(np.float16).astype(np.float32),
              "b": rng.standard_normal((1, B, SIZE, SIZE)).astype(np.float16).astype(np.float32)}
    program = api.compile(path, schedule="default", cmx_budget=BUDGET)
    return program, api.simulate(program, inputs), model, inputs, consts


def _ddr_written(program) -> int:
    """Bytes the program's DMAs write into DDR buffers between layers."""
    symbols = SymbolTable(program.module)
    total = 0
    for task_list in program.module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, DmaTask):
                region = symbols.region(task.dst)
                if region is not None and region.kind is BufferKind.DDR:
                    total += region.type.nbytes
    return total


def _onnxruntime(model, inputs: dict) -> np.ndarray:
    """The model's output by onnxruntime's CPU provider (f32) on one thread."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def test_the_normalized_value_never_goes_to_ddr(run):
    """DDR receives the Concat (C channels) and the 1x1's output (O channels, the pool
    reads it back): not the normalized C channels between the two DPU layers."""
    program = run[0]
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    assert [t for t in tasks if isinstance(t, DpuTask) and t.op is DpuOp.DWCONV]
    assert _ddr_written(program) == (C + O) * SIZE * SIZE * 2


def test_outputs_match_onnxruntime_within_the_roundings(run):
    """z = Relu(x s + t): s and t rounded to f16 (u16 (|x s| + |t|)), the DPU's f32 sum
    (u32) and its f16 store (u16, eta); ORT's f32 normalization within gamma_8 of
    |x s| + |mean s| + |beta|.  y = Relu(W z + b): W and b rounded to f16, z's error
    through |W|, the DPU's f32 sum of C + 1 terms and ORT's (gamma_{C+1} each), the f16
    store.  Relu and the max pool are 1-Lipschitz: the pool's bound is its window's
    largest."""
    _, sim, model, inputs, (s, mean, beta, w, bias) = run
    want = _onnxruntime(model, inputs).astype(np.float64)
    got = next(iter(sim.outputs.values())).astype(np.float64).reshape(want.shape)
    u16, u32 = unit_roundoff(np.float16), unit_roundoff(np.float32)
    eta = float(np.finfo(np.float16).smallest_subnormal)
    x = np.concatenate([inputs["a"], inputs["b"]], axis=1).astype(np.float64)
    sv, t = s.reshape(1, -1, 1, 1), (beta - mean * s).reshape(1, -1, 1, 1)
    z = np.maximum(x * sv + t, 0)
    mz = np.abs(x * sv) + np.abs(t)
    e_z = (u16 + u32 * (1 + u16) + u16 * (1 + u16) * (1 + u32)) * mz + eta \
        + gamma(8, np.float32) * (np.abs(x * sv) + np.abs(mean * s).reshape(1, -1, 1, 1)
                                  + np.abs(beta).reshape(1, -1, 1, 1))
    aw = np.abs(w.reshape(O, C).astype(np.float64))
    wz = np.einsum("oc,nchw->nohw", aw, np.abs(z) + e_z)
    ab = np.abs(bias.astype(np.float64)).reshape(1, -1, 1, 1)
    y = np.einsum("oc,nchw->nohw", w.reshape(O, C).astype(np.float64), z) \
        + bias.reshape(1, -1, 1, 1)
    e_y = np.einsum("oc,nchw->nohw", aw, e_z) + u16 * (wz + ab) \
        + 2 * gamma(C + 1, np.float32) * (1 + u16) * (wz + ab) \
        + u16 * (np.abs(y) + np.einsum("oc,nchw->nohw", aw, e_z) + u16 * (wz + ab)
                 + 2 * gamma(C + 1, np.float32) * (1 + u16) * (wz + ab)) + eta
    n, o, h, wd = e_y.shape
    bound = e_y.reshape(n, o, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    assert_within_bound(got, want, bound)
