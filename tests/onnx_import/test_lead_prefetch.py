"""The first weight chunks of a CNN's DDR-bound end, loaded during the DPU-bound layers
well before it (``vpuc/fusion/schedule_lead.py``), on a hand-built model shaped like
ResNet-18's stages 2 to 4: three 128-channel 3x3 layers on 28x28 (DPU-bound, the DDR
idle), a stride-2 one and a 256-channel one on 14x14, then a stride-2 512-channel 3x3
layer and a 512-channel one on 7x7 (2.4 MB and 4.7 MB of weights, the lead run).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fusion.dpu_testlib import assert_close
from vpuc import api
from vpuc.arch import load_arch
from vpuc.fusion import schedule, schedule_lead
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, Executor
from vpuc.passes.allocate_cmx import CMX_ALIGNMENT
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m = ModelBuilder(seed=1)
    y = m.input("x", [1, 128, 28, 28])
    for _ in range(3):
        y = _conv_bn(m, y, 128, 128, 3)
    y = _conv_bn(m, _conv_bn(m, y, 128, 256, 3, stride=2), 256, 256, 3)
    y = _conv_bn(m, _conv_bn(m, y, 256, 512, 3, stride=2), 512, 512, 3)
    m.output(_conv_bn(m, y, 512, 64, 1))
    return m.save(tmp_path_factory.mktemp("lead") / "lead.onnx", "lead")


def _lead_pieces(program) -> list[DmaTask]:
    return [t for tl in program.module.task_lists if tl.executor is Executor.DMA
            for t in tl.tasks if ".load_w." in t.label
            and t.label.rsplit(".", 1)[-1][:1] == "p" and t.label.rsplit(".", 1)[-1][1:].isdigit()]


def test_lead_chunks_load_during_the_dpu_bound_layers_at_the_top_of_cmx(model, monkeypatch):
    """Chunks of the 512-channel layer that found no room beside the stride-2 layer load
    in pieces, waiting on nothing, ahead of the stride-2 128 -> 256 layer's first input
    load (during the 28x28 layers); their buffers are stacked from the top of their tile's
    CMX down; without them (``LEAD_BACK`` 0) the network ends later."""
    program = api.compile(model, schedule="default")
    pieces = _lead_pieces(program)
    assert pieces and not any(t.waits for t in pieces)
    dmas = [t.label for tl in program.module.task_lists if tl.executor is Executor.DMA
            for t in tl.tasks]
    layers = list(dict.fromkeys(label.rsplit(".", 1)[0] for label in dmas
                                if label.endswith(".load0")))
    assert dmas.index(pieces[0].label) < dmas.index(f"{layers[3]}.load0")
    symbols = SymbolTable(program.module)
    cmx = load_arch().cmx_bytes
    buffers = [b for b in program.module.buffers if b.offset is not None and b.tile is not None]
    for t in pieces:
        root = symbols.region(t.dst).root
        end = root.offset + root.type.nbytes
        # right under the top of CMX or under another buffer of the stack (each placed at
        # the next aligned offset down): not where allocate-cmx's first fit put it
        assert end == cmx or any(b.tile == root.tile and end <= b.offset < end + CMX_ALIGNMENT
                                 and ".convolution.w" in b.name for b in buffers)
    cycles = api.simulate(program, timing_only=True).cycles
    monkeypatch.setattr(schedule_lead, "LEAD_BACK", 0)
    without = api.compile(model, schedule="default")
    assert not _lead_pieces(without)
    assert cycles < api.simulate(without, timing_only=True).cycles


def test_lead_pieces_compute_what_the_naive_schedule_does(model):
    program = api.compile(model, schedule="default")
    assert _lead_pieces(program)
    x = np.random.default_rng(3).standard_normal((1, 128, 28, 28)).astype(np.float16)
    got = next(iter(api.simulate(program, {"x": x}).outputs.values()))
    want = next(iter(api.simulate(api.compile(model, schedule="naive"), {"x": x})
                     .outputs.values()))
    assert_close(got, want, ulps=len(program.module.layers))



def _chunks_on_no_compute(program) -> int:
    """Weight chunks of the two 512-channel 3x3 layers whose loads wait on no block's
    compute (``done``): the pinned ones and those ``free_slots`` freed."""
    dmas = [t for tl in program.module.task_lists if tl.executor is Executor.DMA
            for t in tl.tasks]
    layers = list(dict.fromkeys(t.label.rsplit(".", 1)[0] for t in dmas
                                if t.label.endswith(".load0")))
    return sum(1 for t in dmas for layer in layers[-2:]
               if t.label.startswith(f"{layer}.load_w.c") and ".p" not in t.label
               and not any(".done" in w for w in t.waits))


def test_first_later_chunks_wait_on_their_gate_not_on_the_pinned_chunks(model, monkeypatch):
    """In each layer of the lead run, the first chunk per tile after the pinned ones waits
    on no block's compute (``schedule_lead.free_slots``: its slot was a pinned chunk's), so
    its DDR transfer starts with the layer; waiting on those blocks' ``done`` instead, the
    network ends later."""
    program = api.compile(model, schedule="default")
    cycles = api.simulate(program, timing_only=True).cycles
    monkeypatch.setattr(schedule, "free_slots", lambda *args: [])
    slotted = api.compile(model, schedule="default")
    # one per tile in each of the two layers
    assert _chunks_on_no_compute(program) == _chunks_on_no_compute(slotted) + 4
    assert cycles < api.simulate(slotted, timing_only=True).cycles
