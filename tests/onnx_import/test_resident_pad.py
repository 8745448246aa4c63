"""Values kept in CMX whose channels are not a multiple of 16 (``resident.padded_channels``):
MobileNetV3-Small's 72- and 88-channel expansions.  Their CMX buffer has the DPU's aligned
channel count from the start, so DPU blocks on the value's tile write and read it in place
and the other tile's blocks copy whole rows (pads too) with no zero copy; readers that are
not DPU window layers see the real channels through a strided view.

The pads must hold finite values (a convolution reading them multiplies them by zero
weights: 0 x NaN is NaN): the simulator's CMX starts as 0xFF bytes (NaN in f16,
``test_eltwise_pad.poisoned_cmx``), so a pad no task wrote reaches the output."""

from __future__ import annotations

import numpy as np
import pytest

from tests.onnx_import.onnx_testlib import simulated_against_reference
from tests.onnx_import.test_eltwise_pad import poisoned_cmx  # noqa: F401 (a fixture)
from vpuc import api
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.resident import ensure_pads, padded_channels
from vpuc.fusion.schedule_layouts import SegmentValues
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def _expansion(tmp_path, channels: int = 72, size: int = 16, expand: bool = True):
    """An inverted residual's three layers: 1x1 expand to ``channels``, 3x3 depthwise,
    1x1 project (every one a DPU layer; the two values between them are resident); without
    ``expand`` the depthwise layer reads the network's input of ``channels``."""
    m = ModelBuilder(seed=channels, opset=17)
    x = m.input("x", [1, 16 if expand else channels, size, size])
    y = _conv_bn(m, x, 16, channels, 1) if expand else x
    y = _conv_bn(m, y, channels, channels, 3, group=channels)
    m.output(_conv_bn(m, y, channels, 24, 1, act=None))
    return m.save(tmp_path / "expansion.onnx", "expansion")


@pytest.mark.parametrize("channels,expand", [(72, True), (88, True), (72, False)])
def test_unaligned_values_are_held_padded_and_their_pads_are_finite(tmp_path, poisoned_cmx,
                                                                    channels, expand):
    """(Without ``expand``: the depthwise layer's input pads, from DDR, are zeroed, as a
    convolution's are, so the pads it writes are finite.)"""
    program = api.compile(_expansion(tmp_path, channels, expand=expand))
    resident = [b for b in program.module.buffers
                if b.kind is BufferKind.CMX and "." not in b.name]
    assert len(resident) == 1 + expand
    assert all(b.type.dims[1] == 80 + 16 * (channels > 80) for b in resident)
    symbols = SymbolTable(program.module)
    names = {b.name: b.type.dims[1] for b in resident}
    written: dict[str, int] = {}        # CMX buffer -> bytes DMAs write into it
    in_place = copies = 0
    dpu = []
    for tl in program.module.task_lists:
        for t in tl.tasks:
            if isinstance(t, DpuTask):
                dpu.append(t)
                out = symbols.region(t.output)
                written[out.root.name] = written.get(out.root.name, 0) + out.type.nbytes
                if out.root.name in names:      # a write in place: pads included
                    assert out.type.dims[1] == names[out.root.name]
                    in_place += 1
            elif isinstance(t, DmaTask):
                src, dst = symbols.region(t.src), symbols.region(t.dst)
                written[dst.root.name] = written.get(dst.root.name, 0) + dst.type.nbytes
                if dst.root.name in names:      # a store: whole rows, pads included
                    assert dst.type.dims[1] == names[dst.root.name] and dst.is_dense
                if src.root.name in names:      # a load: whole rows, no zero copy after it
                    assert src.is_dense
                    copies += 1
    assert in_place and copies
    # every block buffer a DPU task reads (not a resident value read in place) was filled
    # whole (by DMAs, or a DPU permute): its pad channels too, not left as whatever an
    # earlier buffer held (which the poisoned CMX cannot show: that is finite)
    for t in dpu:
        x = symbols.region(t.inputs[0])
        if x.root.name not in names:
            assert written.get(x.root.name) == x.root.type.nbytes, t.label
    x = np.random.default_rng(1).standard_normal(
        (1, 16 if expand else channels, 16, 16)).astype(np.float16)
    got = simulated_against_reference(program, {"x": x}, _output(program))
    assert np.isfinite(got.astype(np.float32)).all()


def _output(program) -> str:
    return next(b.name for b in program.module.buffers if b.kind is BufferKind.OUTPUT)


def _value(c: int = 72) -> Value:
    return Value("v", TensorType((1, c, 8, 8), ElemType.F16, NHWC), "ddr")


@pytest.mark.parametrize("value,producer,readers,expected", [
    (_value(), "Convolution", ["GroupConvolution"], 80),
    (_value(88), "GroupConvolution", ["Convolution", "MaxPool"], 96),
    (_value(64), "Convolution", ["Convolution"], None),          # aligned already
    (_value(), "Add", ["Convolution"], None),                    # an eltwise writes only 72
    (_value(40), "Convolution", ["Add", "Convolution"], 48),  # a residual's loads: views
    (_value(), "Convolution", ["ReduceMean"], None),             # a global pool in levels
    (Value("v", TensorType((1, 72, 8, 8), ElemType.F16, DimsOrder.identity(4)), "ddr"),
     "Convolution", ["Convolution"], None),                      # NCHW: pads between rows
])
def test_which_values_are_padded(value, producer, readers, expected):
    seg = SegmentValues("dpu", [], ["v"], op=producer)
    assert padded_channels(value, seg, [SegmentValues("dpu", ["v"], [], op=op)
                                        for op in readers]) == expected
    # an ACT segment reading it sees the buffer whole: never padded
    assert padded_channels(value, seg, [SegmentValues("act", ["v"], [])]) is None


def test_pads_a_path_left_unwritten_are_zeroed_once():
    v = Value("v", TensorType((1, 72, 4, 4), ElemType.F16, NHWC), "ddr", tile=0, padded=80)
    prog = ProgramText()
    prog.views.append("view %L.out.v0 = %v[0:1, 0:80, 0:4, 0:4]")
    assert not ensure_pads(prog, 0, v, "L.", ("g",), "L.finished") and not prog.dma
    prog.views.append("view %L.out.v1 = %v[0:1, 64:72, 0:4, 0:4]")   # a chunk's real channels
    assert ensure_pads(prog, 0, v, "L.", ("g",), "L.finished")
    assert prog.views[-1] == "view %L.pads.v = %v[0:1, 72:80, 0:4, 0:4]"
    assert prog.dma == ["  L.zero_pads: dma %L.padzeros -> %L.pads.v channel 0 waits(%g) "
                        "updates(%L.finished)"]
    assert prog.buffers == ["const %L.padzeros : 1x8x4x4xf16 NHWC = splat 0"]


def test_a_residual_join_reads_the_real_channels_of_a_padded_value(tmp_path, poisoned_cmx):
    """A 24-channel value a convolution and a residual Add read (MobileNetV3's projections):
    held with 32 channels; the Add (fused on the second convolution's blocks,
    ``fuse_epilogue``, or a layer of its own) loads its real channels through a strided
    view and zeroes its own pads, so the sum matches the reference on poisoned CMX."""
    m = ModelBuilder(seed=11, opset=17)
    y = _conv_bn(m, m.input("x", [1, 16, 16, 16]), 16, 24, 1)
    m.output(m.node("Add", [_conv_bn(m, y, 24, 24, 3, act=None), y]))
    program = api.compile(m.save(tmp_path / "r.onnx", "r"))
    resident = [b for b in program.module.buffers
                if b.kind is BufferKind.CMX and "." not in b.name]
    assert [b.type.dims for b in resident] == [(1, 32, 16, 16)]
    x = np.random.default_rng(3).standard_normal((1, 16, 16, 16)).astype(np.float16)
    got = simulated_against_reference(program, {"x": x}, _output(program))
    assert np.isfinite(got.astype(np.float32)).all()


def test_a_padded_value_stored_by_real_channels_gets_its_pads_zeroed(tmp_path, poisoned_cmx):
    """A 1x1 convolution of 1,024 input channels on a 16 KB budget is cut over its reduction
    (``lower_dpu_ksplit_conv``), whose stores name only the 72 real channels: its padded
    output's pads are zeroed by one DMA (``ensure_pads``); the depthwise layer after it reads
    them in place on its tile, so a pad no task wrote would be NaN in the output."""
    m = ModelBuilder(seed=5, opset=17)
    y = _conv_bn(m, m.input("x", [1, 1024, 8, 8]), 1024, 72, 1)
    y = _conv_bn(m, y, 72, 72, 3, group=72)
    m.output(_conv_bn(m, y, 72, 24, 1, act=None))
    program = api.compile(m.save(tmp_path / "k.onnx", "k"), cmx_budget=16384)
    labels = [t.label or "" for tl in program.module.task_lists for t in tl.tasks]
    assert [lb for lb in labels if lb.endswith("zero_pads")] == \
        ["batchnormalization_8.convolution.zero_pads"]
    x = np.random.default_rng(2).standard_normal((1, 1024, 8, 8)).astype(np.float16)
    got = simulated_against_reference(program, {"x": x}, _output(program))
    assert np.isfinite(got.astype(np.float32)).all()
