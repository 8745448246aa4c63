"""Output copies on other tiles under ``--schedule default`` (``resident.cast_blocks``): a
DPU layer whose output stays in one tile's CMX writes its other tile's blocks there as
copies (``out(%slot, %rows)``, the output stage's ``odu_cast``) instead of storing them
with a CMX -> CMX DMA each; the program computes the same bytes as with the stores, and
its segment gate still waits for the last block of every tile."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc import api
from vpuc.fusion import lower_dpu_nn, lower_dpu_window
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """Four convolutions at 32 x 32: values kept in CMX, each layer in four row blocks,
    two a tile."""
    m = ModelBuilder(seed=3)
    y = _conv_bn(m, m.input("x", [1, 32, 32, 32]), 32, 32, 3)
    for k in range(3):
        y = _conv_bn(m, y, 32, 32, 1 if k % 2 else 3)
    m.output(y)
    return m.save(tmp_path_factory.mktemp("copies") / "chain.onnx", "chain")


def _without_copies(monkeypatch):
    for module in (lower_dpu_nn, lower_dpu_window):
        monkeypatch.setattr(module, "cast_blocks", lambda *a, **k: set())


def _copying(program) -> list[DpuTask]:
    return [t for tl in program.module.task_lists for t in tl.tasks
            if isinstance(t, DpuTask) and t.broadcast_outputs]


def _cmx_copies(program) -> int:
    symbols = SymbolTable(program.module)
    return sum(1 for tl in program.module.task_lists for t in tl.tasks
               if isinstance(t, DmaTask) and symbols.region(t.src).kind is BufferKind.CMX
               and symbols.region(t.dst).kind is BufferKind.CMX)


def test_blocks_on_the_other_tile_write_the_value_as_copies(chain, monkeypatch):
    program = api.compile(chain)
    symbols = SymbolTable(program.module)
    copying = _copying(program)
    assert copying
    for task in copying:
        (copy,) = task.broadcast_outputs
        region = symbols.region(copy)
        # a view of a value kept whole in the other tile's CMX
        assert region.kind is BufferKind.CMX and "." not in region.root.name
        assert region.tile != task.tile == symbols.region(task.output).tile
    # no DMA reads a copying task's own output slot: its store is gone
    slots = {symbols.region(t.output).root.name for t in copying}
    assert not any(isinstance(t, DmaTask) and symbols.region(t.src).root.name in slots
                   for tl in program.module.task_lists for t in tl.tasks)
    _without_copies(monkeypatch)
    stored = api.compile(chain)
    assert not _copying(stored)
    assert _cmx_copies(stored) - _cmx_copies(program) == len(copying)


def test_copies_compute_what_the_stores_do_bit_for_bit(chain, monkeypatch):
    x = np.random.default_rng(7).standard_normal((1, 32, 32, 32)).astype(np.float16)
    copied = api.simulate(api.compile(chain), {"x": x})
    _without_copies(monkeypatch)
    stored = api.simulate(api.compile(chain), {"x": x})
    (got,), (want,) = copied.outputs.values(), stored.outputs.values()
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_the_gate_waits_for_the_last_block_of_each_tile(chain):
    """A layer writing its value in place on one tile and as copies from the other updates
    its ``finished`` gate from both tiles' last tasks (a tile's DPU queue runs its tasks in
    order): with only the layer's last block, the gate fired before the other tile's."""
    program = api.compile(chain)
    layers = {t.label.rsplit(".", 1)[0] for t in _copying(program)}
    checked = 0
    for layer in layers:
        gate = f"{layer}.finished"
        writers = [t for tl in program.module.task_lists for t in tl.tasks
                   if isinstance(t, DpuTask) and (t.label or "").startswith(layer + ".")]
        updating = {t.tile for t in writers if gate in t.updates}
        if updating:                     # a gate nothing waits on any more is dropped
            assert updating == {t.tile for t in writers}
            checked += 1
    assert checked
