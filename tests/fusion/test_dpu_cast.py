"""``dpu_cast``: a DPU layer's blocks on the other tile write a value kept in one tile's
CMX as an output copy (``out(%slot, %rows)``) instead of a CMX -> CMX store.

MobileNetV3-Small at the size of tests/onnx_import/test_schedules.py (whose numerics test
compares this default schedule with the naive one and onnxruntime) has such layers.
"""

from __future__ import annotations

import pytest

from vpuc import api
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import mobilenet_v3_small


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = mobilenet_v3_small(size=64, classes=10).save(
        tmp_path_factory.mktemp("mnv3") / "m.onnx", "m")
    return api.compile(path, schedule="default")


def _tasks(program, kind):
    return [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, kind)]


def test_blocks_on_the_other_tile_write_the_resident_value_as_a_copy(program):
    symbols = SymbolTable(program.module)
    cast = [t for t in _tasks(program, DpuTask) if t.broadcast_outputs]
    assert cast
    for task in cast:
        (copy,) = task.broadcast_outputs
        region = symbols.region(copy)
        assert region.kind is BufferKind.CMX and region.tile != task.tile
        # the copy is rows of a value other layers' blocks read or write in place too
        assert region.root.name != symbols.region(task.output).root.name


def test_their_slots_are_stored_by_no_dma(program):
    """The store is gone: no DMA reads a cast block's slot, nor writes its rows."""
    symbols = SymbolTable(program.module)
    cast = [t for t in _tasks(program, DpuTask) if t.broadcast_outputs]
    slots = {symbols.region(t.output).root.name for t in cast}
    read = {symbols.region(d.src).root.name for d in _tasks(program, DmaTask)}
    assert not slots & read
    rows = {(symbols.region(c).root.name, symbols.region(c).byte_offset)
            for t in cast for c in t.broadcast_outputs}
    written = {(symbols.region(d.dst).root.name, symbols.region(d.dst).byte_offset)
               for d in _tasks(program, DmaTask)}
    assert not rows & written


def test_the_simulation_has_no_races_and_matches_the_naive_schedule(program, tmp_path):
    import numpy as np
    from tests.fusion.dpu_testlib import assert_close
    naive = api.compile(mobilenet_v3_small(size=64, classes=10).save(tmp_path / "m.onnx", "m"),
                        schedule="naive")
    x = {b.name: np.random.default_rng(11).standard_normal(b.type.dims).astype(np.float16)
         for b in program.module.buffers if b.kind is BufferKind.INPUT}
    got, want = api.simulate(program, x), api.simulate(naive, x)
    assert not got.races
    for name in want.outputs:
        assert_close(got.outputs[name], want.outputs[name], ulps=len(program.module.layers))
