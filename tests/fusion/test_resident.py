"""Values kept in CMX between segments under ``--schedule default`` (``vpuc/fusion/resident.py``):
a chain of convolutions stores and loads its intermediate values CMX -> CMX, not through
DDR, computes what the naive schedule does bit for bit, and ends sooner."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc import api
from vpuc.fusion import lower_graph_segments
from vpuc.fusion.blocked_program import Value
from vpuc.fusion.resident import resident_room, resident_values
from vpuc.fusion.schedule_layouts import SegmentValues
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.onnx_import.zoo import ModelBuilder, _conv_bn

from tests.fusion.dpu_testlib import assert_close

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def _chain(tmp_path, size: int = 16, channels: int = 32, convs: int = 4):
    m = ModelBuilder(seed=3)
    y = _conv_bn(m, m.input("x", [1, channels, size, size]), channels, channels, 3)
    for k in range(convs - 1):
        y = _conv_bn(m, y, channels, channels, 1 if k % 2 else 3)
    m.output(y)
    return m.save(tmp_path / "chain.onnx", "chain")


def _dma_regions(program):
    symbols = SymbolTable(program.module)
    for tl in program.module.task_lists:
        for t in tl.tasks:
            if isinstance(t, DmaTask):
                yield t, symbols.region(t.src), symbols.region(t.dst)


def _ddr_bytes(program) -> int:
    ddr = (BufferKind.DDR, BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.CONST)
    return sum(src.type.nbytes for t, src, dst in _dma_regions(program)
               if src.kind in ddr or dst.kind in ddr)


def _all_in_ddr(monkeypatch):
    monkeypatch.setattr(lower_graph_segments, "resident_values", lambda values, *a, **k: values)


def test_a_chain_of_convolutions_keeps_its_values_in_cmx(tmp_path, monkeypatch):
    path = _chain(tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 32, 16, 16)).astype(np.float16)
    naive = api.compile(path, schedule="naive")
    default = api.compile(path)
    buffers = {b.name: b for b in default.module.buffers}
    resident = [b for b in buffers.values() if b.kind is BufferKind.CMX and "." not in b.name]
    # the three values between the four layers: whole tensors in CMX, none in DDR
    assert len(resident) == 3
    assert not [b for b in buffers.values() if b.kind is BufferKind.DDR]
    for b in resident:
        assert b.type.order == NHWC and b.type.dims == (1, 32, 16, 16)
    # every transfer of a resident value is a CMX -> CMX copy: no store of it reaches DDR
    touching = [(src, dst) for _, src, dst in _dma_regions(default)
                if src.root.name in {b.name for b in resident}
                or dst.root.name in {b.name for b in resident}]
    assert touching and all(src.kind is dst.kind is BufferKind.CMX for src, dst in touching)
    runs = {name: api.simulate(p, {"x": x}) for name, p in (("naive", naive),
                                                             ("default", default))}
    # the schedules cut the layers into other blocks, so BLAS may sum in another order: one
    # f16 ulp per layer of the four (tests/fusion/test_fold_views.py does the same)
    assert_close(runs["default"].outputs[next(iter(runs["naive"].outputs))],
                 next(iter(runs["naive"].outputs.values())), ulps=4)
    assert runs["default"].races == []
    # against the same schedule with every value in DDR: fewer DDR bytes, fewer cycles
    _all_in_ddr(monkeypatch)
    through_ddr = api.compile(path)
    assert [b for b in through_ddr.module.buffers if b.kind is BufferKind.DDR]
    assert _ddr_bytes(default) < _ddr_bytes(through_ddr)
    saved = 2 * 3 * 32 * 16 * 16 * 2          # each value stored once and loaded once
    assert _ddr_bytes(through_ddr) - _ddr_bytes(default) >= saved
    assert api.simulate(default, timing_only=True).cycles < \
        api.simulate(through_ddr, timing_only=True).cycles


def test_values_that_leave_cmx_no_room_go_back_to_ddr(tmp_path, monkeypatch):
    """With no limit on what stays in CMX (the room forced open), a value of a tile's whole
    CMX does not allocate: the block is lowered again with every value in DDR, the program
    of the schedule without resident values."""
    path = _chain(tmp_path, size=128, channels=64, convs=2)     # a 2 MiB value
    monkeypatch.setattr(lower_graph_segments, "resident_room", lambda *a: 1 << 40)
    forced = api.compile(path)
    _all_in_ddr(monkeypatch)
    through_ddr = api.compile(path)
    assert api.write_blob(forced) == api.write_blob(through_ddr)
    assert [b for b in forced.module.buffers if b.kind is BufferKind.DDR]


def _value(name: str, nbytes: int, kind: str = "ddr") -> Value:
    return Value(name, TensorType((1, nbytes // 2, 1, 1), ElemType.F16, NHWC), kind)


def test_resident_values_respect_the_room_and_balance_the_tiles():
    values = [_value("a", 600), _value("b", 600), _value("c", 600), _value("d", 100)]
    segments = [SegmentValues("dpu", [], ["a"]), SegmentValues("dpu", ["a"], ["b"]),
                SegmentValues("act", ["b", "a"], ["c"]), SegmentValues("dpu", ["c"], ["d"]),
                SegmentValues("dpu", ["d"], [])]
    out = {v.name: v.tile for v in resident_values(values, segments, set(), 2, 1000)}
    # a and b live at once (a is read two segments on): one tile each; c is written while
    # both are still read, so neither tile has room for it; d, after them, has
    assert {out["a"], out["b"]} == {0, 1} and out["c"] is None and out["d"] is not None
    one_tile = {v.name: v.tile for v in resident_values(values, segments, set(), 1, 1000)}
    assert one_tile["a"] == 0 and one_tile["b"] is None       # 1200 bytes over 1000


@pytest.mark.parametrize("kinds, keep_out, kind, expected", [
    (("dpu", "dpu"), set(), "ddr", 0),
    (("dpu", "dma"), set(), "ddr", None),          # a DMA segment reads DDR by its own plan
    (("matmul", "act"), set(), "ddr", 0),
    (("library", "dpu"), set(), "ddr", None),      # a library segment re-types DDR bytes
    (("dpu", "dpu"), {"v"}, "ddr", None),          # taken by a fused epilogue
    (("dpu", "dpu"), set(), "output", None),       # a network output stays where it is
])
def test_which_values_may_stay_in_cmx(kinds, keep_out, kind, expected):
    segments = [SegmentValues(kinds[0], [], ["v"]), SegmentValues(kinds[1], ["v"], [])]
    out = resident_values([_value("v", 64, kind)], segments, keep_out, 2, 1 << 20)
    assert out[0].tile == expected


def test_the_room_is_what_blocks_and_prefetch_leave():
    assert resident_room(2 << 20, 1 << 20, 256 << 10) == 768 << 10
    assert resident_room(2 << 20, 2 << 20, 256 << 10) == 0
    assert resident_room(None, 1 << 20, 256 << 10) == 0


def test_segments_wait_on_the_stores_of_the_values_they_read_from_cmx(tmp_path, monkeypatch):
    """``schedule_deps.relax_gates`` lets a segment wait on the gate two back; its loads of a
    value kept in CMX then wait on the stores that write it, as loads of a DDR value do.
    Without that (resident buffers not named to it), the compile's race proof finds the load
    unordered against the store."""
    from vpuc.diagnostics import VpucError
    from vpuc.fusion import schedule_deps
    path = _chain(tmp_path)
    program = api.compile(path)
    waits = {w for tl in program.module.task_lists for t in tl.tasks for w in t.waits}
    assert any(w.endswith(".written") for w in waits)
    monkeypatch.setattr(schedule_deps, "shared_buffers", lambda *a, **k: {})
    with pytest.raises(VpucError, match=r"race on cmx %\S+, bytes"):
        api.compile(path)


def _in_place(program) -> tuple[int, int]:
    """(DPU tasks writing, DPU tasks reading) a value kept in CMX straight, with no block
    slot and no store or load."""
    from vpuc.ir.tasks import DpuTask
    symbols = SymbolTable(program.module)
    resident = {b.name for b in program.module.buffers
                if b.kind is BufferKind.CMX and "." not in b.name}
    tasks = [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DpuTask)]
    return (sum(1 for t in tasks if symbols.region(t.output).root.name in resident),
            sum(1 for t in tasks if any(symbols.region(i).root.name in resident
                                        for i in t.inputs)))


def _copies(program) -> tuple[int, int]:
    """(stores into, loads out of) values kept in CMX."""
    def resident(region):
        return region.kind is BufferKind.CMX and "." not in region.root.name
    regions = list(_dma_regions(program))
    return (sum(1 for _, src, dst in regions if resident(dst)),
            sum(1 for _, src, dst in regions if resident(src)))


def test_blocks_on_the_values_tile_write_and_read_it_in_place(tmp_path, monkeypatch):
    """A DPU layer's blocks on the tile holding its output (32 channels: already the DPU's
    multiple) write their rows into it with no CMX -> CMX store, and a reader's blocks on
    that tile read their rows (with the halo) from it with no load; the values are the
    same bit for bit (the same tasks on the same data), and the schedule ends sooner than
    with every block copying."""
    from vpuc.fusion import lower_dpu_window
    path = _chain(tmp_path)
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype(np.float16)
    default = api.compile(path)
    writes, reads = _in_place(default)
    assert writes > 0 and reads > 0
    monkeypatch.setattr(lower_dpu_window, "in_place_blocks", lambda *a, **k: set())
    monkeypatch.setattr(lower_dpu_window, "in_place_input", lambda *a, **k: None)
    copied = api.compile(path)
    assert _in_place(copied) == (0, 0)
    (stores, loads), (all_stores, all_loads) = _copies(default), _copies(copied)
    assert (all_stores - stores, all_loads - loads) == (writes, reads)
    runs = [api.simulate(p, {"x": x}) for p in (default, copied)]
    assert runs[0].races == []
    out = next(iter(runs[1].outputs))
    np.testing.assert_array_equal(runs[0].outputs[out], runs[1].outputs[out])
    assert api.simulate(default, timing_only=True).cycles < \
        api.simulate(copied, timing_only=True).cycles


def test_accesses_in_place_wait_on_what_wrote_the_bytes(tmp_path, monkeypatch):
    """The loads of a value some DPU tasks wrote in place wait on those tasks, and DPU tasks
    reading one in place on the tasks and stores that wrote their rows (rule 1 of
    ``schedule_deps``, for DPU accesses); without that the compile's race proof finds an
    access unordered against the write."""
    from vpuc.diagnostics import VpucError
    from vpuc.fusion import schedule_deps
    path = _chain(tmp_path)
    assert all(_in_place(api.compile(path)))
    monkeypatch.setattr(schedule_deps, "dpu_accesses", lambda *a, **k: {})
    with pytest.raises(VpucError, match=r"race on cmx %\S+, bytes"):
        api.compile(path)
