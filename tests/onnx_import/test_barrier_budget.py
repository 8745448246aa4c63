"""The zoo's models (test sizes) under small ``cmx_budget``s keep their barriers within the
64 physical ones of NPU37XX (``assign-physical-barriers``, issue 11 §3): more, smaller
blocks and K-split layers (``lower_dpu_ksplit``, about 40 barriers live in its two-slot
pipeline) next to the default schedule's overlapping segments.  Each compiles, verifies,
and the MobileNetV3-Small head (``gemm_515``, K split at these budgets) runs without races
and matches onnxruntime within the whole-model tolerance of ``test_import_models.py``
(cosine similarity >= 0.999, max |diff| <= 1% of the output's range: f16 through the
network's layers).  When a target has fewer barriers than a layer needs, the error is at
the layer's source, names its ONNX nodes and the compile options that change it."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind
from vpuc.onnx_import.zoo import ModelBuilder, encoder_layer, mobilenet_v3_small, resnet18
from vpuc.verifier import verify_module
from tests.onnx_import.onnx_testlib import rounded_to_f16

MODELS = {
    "mobilenet_v3_small": lambda: mobilenet_v3_small(size=64, classes=10),
    "resnet18": lambda: resnet18(size=32, width=8, classes=10),
    "encoder_layer": lambda: encoder_layer(seq=17, width=48, heads=3),
}
# (model, cmx_budget, schedule): the budgets where the most barriers are live at once
MATRIX = [("mobilenet_v3_small", 32768, "naive"), ("mobilenet_v3_small", 131072, "default"),
          ("mobilenet_v3_small", 16384, "default"),
          # the smallest budget the model compiles at (10240 does not fit a layer): a
          # channel-chunked layer's early weight loads beside a K-split layer's pipeline
          ("mobilenet_v3_small", 12288, "default"), ("mobilenet_v3_small", 12288, "naive"),
          # the classifier's hundreds of small loads prefetched deep into one segment
          # (schedule_prefetch.share_barriers): one barrier live for them, not one each
          ("mobilenet_v3_small", 24576, "default"), ("mobilenet_v3_small", 32768, "default"),
          ("resnet18", 32768, "default"), ("resnet18", 32768, "naive"),
          ("encoder_layer", 4096, "default"), ("encoder_layer", 4096, "naive")]


# numpy's float warnings are errors here: a DPU task computing on uninitialized CMX (issue
# 11: add_206's pad channels, "invalid value encountered in add") cannot come back silently
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("barrier_budget")
    return {name: build().save(folder / f"{name}.onnx", name) for name, build in MODELS.items()}


def _physical_within_the_hardware(program) -> None:
    arch = load_arch(program.module.arch)
    ids = {b.physical for b in program.module.barriers}
    assert None not in ids and ids <= set(range(arch.barriers))
    assert not verify_module(program.module, arch).has_errors


def _feeds(path):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32)
             for i in session.get_inputs()}
    return session, feeds


@pytest.mark.parametrize("budget", [65536, 16384])
def test_mobilenet_head_under_a_small_budget_runs_and_matches_onnxruntime(saved, budget):
    """The reported case: ``vpuc compile mnv3.onnx --cmx-budget 65536``; at 16384 the
    classifier's deep loads share one barrier (``schedule_prefetch.share_barriers``): its
    matrix products still wait on their weights."""
    path = saved["mobilenet_v3_small"]
    program = api.compile(path, cmx_budget=budget)
    _physical_within_the_hardware(program)
    labels = {t.label or "" for tl in program.module.task_lists for t in tl.tasks}
    assert any(x.startswith("gemm_515.") for x in labels)
    shared = [b for b in program.module.barriers if b.name.endswith(".prefetched")]
    assert (budget == 16384) <= bool(shared)     # the shared barrier is what runs here
    session, feeds = _feeds(path)
    inputs = {b.name: feeds[b.name].astype(np.float16) for b in program.module.buffers
              if b.kind is BufferKind.INPUT}
    sim = api.simulate(program, inputs)
    assert not sim.races
    want = session.run(None, feeds)[0]
    got = next(iter(sim.outputs.values())).astype(np.float32).reshape(want.shape)
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


@pytest.mark.parametrize("name,budget,schedule", MATRIX,
                         ids=[f"{n}-{b}-{s}" for n, b, s in MATRIX])
def test_small_budgets_fit_the_physical_barriers(saved, name, budget, schedule):
    _physical_within_the_hardware(api.compile(saved[name], cmx_budget=budget,
                                              schedule=schedule))


def test_many_early_loads_share_a_barrier(saved):
    """At 12288 a channel-chunked layer's weight chunks (``conv_481``'s) load early, during
    the segments before it, beside a K-split layer's pipeline: with one barrier each the
    program needed 56 physical barriers at once; the chunks ahead of their gate share one
    (``schedule_prefetch.ahead_of_gate``), and a target with 40 runs it."""
    arch = dataclasses.replace(load_arch("NPU37XX"), barriers=40)
    program = api.compile(saved["mobilenet_v3_small"], cmx_budget=12288, arch=arch)
    assert {b.physical for b in program.module.barriers} <= set(range(40))
    assert any(b.name.startswith("conv_481.") and b.name.endswith(".prefetched")
               for b in program.module.barriers)
    assert not verify_module(program.module, arch).has_errors


def _ksplit_gemm(tmp_path) -> str:
    """17x192 by 192x48 + Relu: K split into chunks under a 6000-byte budget."""
    m = ModelBuilder(seed=0, opset=17)
    m.output(m.node("Relu", [m.node("Gemm", [m.input("x", [17, 192]), m.weight((48, 192)),
                                             m.weight((48,), 0.01)], transB=1)]))
    return m.save(tmp_path / "g.onnx", "g")


def test_a_ksplit_layer_fits_24_barriers(tmp_path):
    """The K split's waits that another wait implies are gone (``reduced_deps``): a
    target with 24 barriers runs it (each bias load waited on the previous block's loads
    too, which kept more than 24 live); the result still matches onnxruntime (the f32
    sums rounded once to f16: the same tolerance)."""
    path = _ksplit_gemm(tmp_path)
    arch = dataclasses.replace(load_arch("NPU37XX"), barriers=24)
    program = api.compile(path, arch=arch, cmx_budget=6000)
    assert {b.physical for b in program.module.barriers} <= set(range(24))
    session, feeds = _feeds(rounded_to_f16(path, tmp_path / "rounded.onnx"))
    sim = api.simulate(program, {"x": feeds["x"].astype(np.float16)})
    assert not sim.races
    want = session.run(None, {"x": feeds["x"].astype(np.float16).astype(np.float32)})[0]
    got = next(iter(sim.outputs.values())).astype(np.float32).reshape(want.shape)
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


def test_too_few_barriers_is_an_error_at_the_layer(tmp_path):
    """The K split's pipeline keeps more than 16 barriers live: a target with 16 cannot
    run it."""
    path = _ksplit_gemm(tmp_path)
    arch = dataclasses.replace(load_arch("NPU37XX"), barriers=16)
    with pytest.raises(VpucError) as info:
        api.compile(path, arch=arch, cmx_budget=6000)
    text = str(info.value)
    assert text.startswith(f"{path} (imported):6:3: error: ")   # the Gemm's graph op
    assert "too many live barriers in layer gemm_3.matmul (from ONNX \"Gemm_4\" Gemm, " \
           "\"Relu_6\" Relu)" in text
    assert "need more than the 16 physical barriers at once" in text
    assert "compile with a larger --cmx-budget (fewer blocks) or with --schedule naive" in text
