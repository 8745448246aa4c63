"""A DPU eltwise Add/Multiply of channels not a multiple of 16 (``lower_dpu_eltwise``) never
computes on uninitialized CMX: its inputs' pad channels are zeroed CMX -> CMX from the tile's
zero vector after each load (issue 11: MobileNetV3-Small's ``add_206``, 40 channels in 48,
added whatever an earlier buffer left in the 8 pad channels, NaN bytes included).

The check: the simulator's CMX starts as 0xFF bytes (NaN in f16) instead of zeros, and every
DPU eltwise variant's operands must be finite (a NaN pad would compute silently: NaN + NaN
raises no numpy warning; MobileNetV3's warning came from Inf bytes); the result still
matches the graph reference within ``test_lower_dpu_nn.compile_and_compare``'s bound (3 ulps
of f16: the add's one rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fusion.dpu_testlib import assert_close
from vpuc import api
from vpuc.fusion.blocked_program import sanitize
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DpuOp
from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import run_graph
import runtime_sim.dpu
import runtime_sim.memory


@pytest.fixture
def poisoned_cmx():
    """Every tile's CMX starts as 0xFF bytes, the simulator's default for a run with
    numerics (``runtime_sim.memory.UNWRITTEN``): a read of a byte no task wrote is NaN."""
    assert runtime_sim.memory.UNWRITTEN == 0xFF


@pytest.fixture
def finite_eltwise_operands(monkeypatch):
    """The DPU engine's eltwise ops (``runtime_sim.dpu.add``/``mul``) check that the part of
    their operands a variant reads is finite; the variants seen."""
    seen = []

    def checked(fn):
        def run(a, b, *, variant=None, **kwargs):
            part = (slice(None),) * 4 if variant is None else variant.slices()
            assert np.isfinite(a[part]).all() and np.isfinite(b[part]).all(), \
                "a DPU eltwise operand holds bytes no task wrote"
            seen.append(variant)
            return fn(a, b, variant=variant, **kwargs)
        return run
    for name in ("add", "mul"):
        monkeypatch.setattr(runtime_sim.dpu, name, checked(getattr(runtime_sim.dpu, name)))
    return seen


def _two_branches(m, op: str, channels: int):
    """Two 1x1 convolutions of the input joined by ``op``: both operands come from the DPU."""
    x = m.input("x", [1, 8, 6, 5])
    a = m.node("Conv", [x, m.weight((channels, 8, 1, 1))], kernel_shape=[1, 1])
    b = m.node("Conv", [x, m.weight((channels, 8, 1, 1))], kernel_shape=[1, 1])
    return m.node(op, [a, b])


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("op,dpu_op", [("Add", DpuOp.ADD), ("Mul", DpuOp.MUL)])
@pytest.mark.parametrize("channels", [40, 24])
def test_eltwise_pad_channels_are_zeroed_before_the_dpu_reads_them(
        tmp_path, poisoned_cmx, finite_eltwise_operands, op, dpu_op, channels):
    m = ModelBuilder(seed=channels, opset=17)
    out = _two_branches(m, op, channels)
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, schedule="naive")       # the join is a layer of its own
    mod = program.module
    dpu = [t for tl in mod.task_lists if tl.executor.name == "DPU" for t in tl.tasks]
    joins = [t for t in dpu if t.op is dpu_op]
    assert joins
    symbols = SymbolTable(mod)
    dma = [t for tl in mod.task_lists if tl.executor.name == "DMA" for t in tl.tasks]
    for task in joins:                 # each input's pad channels: one CMX -> CMX zero fill
        for name in task.inputs:
            fills = [t for t in dma if symbols.region(t.dst).root.name == name
                     and symbols.region(t.src).kind.value == "cmx"]
            assert len(fills) == 1
            dst = symbols.region(fills[0].dst)
            assert dst.type.dims[1] == aligned(channels) - channels
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 5)).astype(np.float16)
    with np.errstate(invalid="raise", over="raise"):
        sim = api.simulate(program, {"x": x})
    assert not sim.races
    assert len(finite_eltwise_operands) == sum(len(t.variants) for t in joins)
    imported = import_onnx(path)
    write_import(imported, tmp_path / "m.vir")
    want = run_graph(imported.module.graphs[0], {"x": x}, tmp_path)[0]
    assert_close(sim.outputs[sanitize(out)], want, ulps=3)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("channels", [24, 40])
def test_fused_residual_side_input_pad_channels_are_zeroed(tmp_path, poisoned_cmx,
                                                           finite_eltwise_operands, channels):
    """The same for an Add fused on a convolution's output blocks (``fuse_epilogue``'s
    ``EltwiseEpilogue``, ``--schedule default``): the other operand's block (``side``) is
    loaded with its real channels only; its pad channels are zeroed the same way (before,
    the poisoned run read NaN there)."""
    m = ModelBuilder(seed=channels, opset=17)
    x = m.input("x", [1, channels, 6, 6])
    y = m.node("Conv", [x, m.weight((channels, channels, 3, 3))], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1])
    out = m.node("Relu", [m.node("Add", [y, x])])
    m.output(out)
    path = m.save(tmp_path / "m.onnx", "m")
    program = api.compile(path, schedule="default")
    labels = [t.label or "" for tl in program.module.task_lists for t in tl.tasks]
    sides = [lab for lab in labels if ".side" in lab and lab.rsplit(".", 1)[-1].startswith("side")]
    fills = [lab for lab in labels if ".side.zero" in lab]
    assert sides and len(fills) == len(sides)            # fused: one fill per side block
    xv = np.random.default_rng(2).standard_normal((1, channels, 6, 6)).astype(np.float16)
    sim = api.simulate(program, {"x": xv})
    assert not sim.races and finite_eltwise_operands
    imported = import_onnx(path)
    write_import(imported, tmp_path / "m.vir")
    want = run_graph(imported.module.graphs[0], {"x": xv}, tmp_path)[0]
    # f32 accumulation of 9 * channels products rounded to f16, then the add's rounding
    assert_close(sim.outputs[sanitize(out)], want, ulps=3)
