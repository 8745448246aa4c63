"""Segments pipelined block by block under ``--schedule default`` (``vpuc/fusion/block_deps.py``):
loads wait for the stores of the bytes they read, not for the previous segment's end."""

from __future__ import annotations

import numpy as np

from vpuc import api
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import encoder_layer


def _dma(program):
    return [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DmaTask)]


def test_loads_wait_on_the_stores_they_read_and_segments_overlap(tmp_path, monkeypatch):
    path = encoder_layer(seq=17, width=48, heads=3).save(tmp_path / "enc.onnx", "enc")
    # schedule_deps.relax_gates off in both runs: the gain measured is block_deps' own
    # (returning False: the module is left to pipeline_segments alone)
    monkeypatch.setattr("vpuc.fusion.lower_graph.relax_gates", lambda *a, **k: False)
    program = api.compile(path)
    symbols = SymbolTable(program.module)
    dma = _dma(program)
    updated_by = {}
    for t in dma:
        for u in t.updates:
            updated_by.setdefault(u, []).append(t)
    early = 0
    for t in dma:
        src, dst = symbols.region(t.src), symbols.region(t.dst)
        # a DDR value, or one kept whole in CMX between segments (resident.py): a CMX
        # buffer of no segment's own (no dotted prefix)
        computed = src.kind is BufferKind.DDR or (src.kind is BufferKind.CMX
                                                 and "." not in src.root.name)
        if not computed or dst.kind is not BufferKind.CMX:
            continue
        own = t.label.split(".")[0]
        for w in t.waits:
            stores = updated_by.get(w, [])
            # a store of another segment, one of several it makes: not its last
            if stores and all(s.label.split(".")[0] != own for s in stores) \
                    and not w.endswith("finished"):
                assert all(symbols.region(s.dst).root is src.root for s in stores)
                early += 1
    assert early > 0
    rng = np.random.default_rng(5)
    tokens = {"tokens": rng.standard_normal((1, 17, 48)).astype(np.float16)}
    pipelined = api.simulate(program, tokens)
    assert not pipelined.races
    monkeypatch.setattr("vpuc.fusion.lower_graph.pipeline_segments", lambda *a: 0)
    gated = api.simulate(api.compile(path), tokens)
    # block_deps changes only waits: the same tasks run the same BLAS calls on the same
    # shapes and layouts (one BLAS thread), so the bits are the same by construction
    for name, value in gated.outputs.items():
        np.testing.assert_array_equal(pipelined.outputs[name], value)
    assert pipelined.cycles < gated.cycles


def test_matmul_blocks_that_fit_take_a_slot_each_by_default(tmp_path):
    """``lower_dpu_matmul._slots``: the encoder's MatMuls at full size (7 to 13 row blocks
    of 197 tokens) fit a tile's CMX budget at once, so under --schedule default no block waits
    for an earlier block's store; naive double-buffers them."""
    from vpuc.ir.tasks import DpuTask
    path = encoder_layer(seq=197, width=192, heads=3).save(tmp_path / "enc.onnx", "enc")

    def slot_waits(schedule):
        program = api.compile(path, schedule=schedule)
        return [t.label for tl in program.module.task_lists for t in tl.tasks
                if isinstance(t, DpuTask) and any(".stored" in w for w in t.waits)]

    assert slot_waits("naive")
    assert slot_waits("default") == []
