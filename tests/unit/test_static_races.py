"""The verifier's static race check: exact footprints, and no false races on disjoint bytes.

The footprint arithmetic (progressions of views, steps, DPU variant boxes) is
checked against brute-force byte sets; whole programs check that disjoint
strided views and the variants of one DPU task are not reported, and that a
missing barrier is.
"""

from __future__ import annotations

import random

import pytest

from vpuc.analysis.races import (
    _progressions_meet, dense_runs, make_footprint, region_box, shared_bytes,
)
from vpuc.analysis.schedule import Schedule
from vpuc.ir.symbols import SymbolTable
from vpuc.verifier import verify_module
from vpuc.vir.parser import parse_text


def _values(p):
    s, t, c = p
    return {s + i * t for i in range(c)}


def test_progressions_meet_like_sets():
    rng = random.Random(7)
    for _ in range(4000):
        p = (rng.randrange(12), rng.randrange(1, 7), rng.randrange(1, 9))
        q = (rng.randrange(12), rng.randrange(1, 7), rng.randrange(1, 9))
        meet = _progressions_meet(p, q)
        want = _values(p) & _values(q)
        assert (set() if meet is None else _values(meet)) == want, (p, q, meet)


VIEWS = """module @m arch NPU37XX
cmx %buf : 2x6x5x7xf16 NHWC tile 0 at 0
cmx %nchw : 2x6x5x7xf32 NCHW tile 0 at 4096
view %a = %buf[0:2, 1:6:2, 0:5:3, 2:7]
view %b = %buf[1, 0:6:3, 1:5, 0:7:2]
view %c = %a[0:2, 0:3:2, 0:2, 1:5:3]
view %d = %nchw[0:2:1, 2:5, 0:5:2, 3:7:3]
view %e = %nchw[1, 0:6:2, 1:4, 0:7]
"""


def _bytes(region):
    """The byte offsets a region touches, the slow way."""
    out = set()
    size = region.type.elem.nbytes
    shape = region.type.bound_shape

    def walk(dim, bits):
        if dim == len(shape):
            out.update(range(region.byte_offset + bits // 8, region.byte_offset + bits // 8 + size))
            return
        for i in range(shape[dim]):
            walk(dim + 1, bits + i * region.strides_bits[dim])
    walk(0, 0)
    return out


def test_footprints_of_views_match_their_bytes():
    symbols = SymbolTable(parse_text(VIEWS, "views.vir"))
    names = ["buf", "a", "b", "c", "nchw", "d", "e"]
    for x in names:
        rx = symbols.region(x)
        fx = make_footprint(rx.root, region_box(rx))
        bx = _bytes(rx)
        assert (fx.lo, fx.hi) == (min(bx), max(bx) + 1)
        assert fx.dense == (len(bx) == fx.hi - fx.lo)
        for y in names:
            ry = symbols.region(y)
            if ry.root is not rx.root:
                continue
            fy = make_footprint(ry.root, region_box(ry))
            common = bx & _bytes(ry)
            got = shared_bytes(fx, fy)
            assert got == ((min(common), max(common) + 1) if common else None), (x, y)


def test_dense_runs_are_exactly_the_bytes_of_a_strided_footprint():
    text = VIEWS + """cmx %rows : 2x6x5x7xf16 NCHW tile 0 at 8192
view %r = %rows[0:2, 1:5, 2:4, :]
view %s = %rows[1, :, 3, 1:6]
view %t = %rows[:, 0:6:2, 1:5, :]
"""
    symbols = SymbolTable(parse_text(text, "views.vir"))
    for name in ["buf", "a", "b", "c", "nchw", "d", "e", "rows", "r", "s", "t"]:
        region = symbols.region(name)
        fp = make_footprint(region.root, region_box(region))
        runs = dense_runs(fp)
        painted = [b for lo, hi in runs for b in range(lo, hi)]
        assert len(painted) == len(set(painted)) and runs == sorted(runs), name
        if len(runs) > 1 or fp.dense:       # split: each run is touched whole
            assert set(painted) == _bytes(region), name
        else:                               # too fine to split: the hull
            assert runs == [(fp.lo, fp.hi)] and _bytes(region) <= set(painted), name
    rows = symbols.region("r")
    assert len(dense_runs(make_footprint(rows.root, region_box(rows)))) == 8   # N x C planes


HEADER = """module @m arch NPU37XX
kernel @relu(input: memref<*xf16>, output: memref<*xf16>) from library "relu"
kernel @runtime() from library "runtime"
runtime @runtime stacks(16384, 16384)
"""


def _errors(text: str) -> list[str]:
    bag = verify_module(parse_text(HEADER + text, "t.vir"))
    return [d.message for d in bag.items if d.severity.name == "ERROR"]


def test_interleaved_channel_slices_written_at_once_do_not_race():
    # Channels 0:8 and 8:16 of an NHWC tensor interleave in memory (their byte
    # hulls overlap) but share no byte: the two stores may run at the same time.
    text = """input %in : 1x16x4x4xf16 NHWC
output %out : 1x16x4x4xf16 NHWC
cmx %lo : 1x8x4x4xf16 NHWC tile 0 at 0
cmx %hi : 1x8x4x4xf16 NHWC tile 0 at 1024
view %in_lo = %in[0, 0:8, :, :]
view %in_hi = %in[0, 8:16, :, :]
view %out_lo = %out[0, 0:8, :, :]
view %out_hi = %out[0, 8:16, :, :]
view %out_odd = %out[0, 1:16:2, :, :]
barrier %l0
barrier %l1
tasks DMA {
  dma %in_lo -> %lo channel 0 updates(%l0)
  dma %in_hi -> %hi channel 0 updates(%l1)
  store_lo: dma %lo -> %out_lo channel 0 waits(%l0)
  store_hi: dma %hi -> %out_hi channel 1 waits(%l1)
}
"""
    assert _errors(text) == []
    # The odd channels do share bytes with both halves.
    racy = text.replace("%hi -> %out_hi", "%hi -> %out_odd")
    errors = _errors(racy)
    assert len(errors) == 1 and "store_lo (DMA channel 0) writes %out_lo and store_hi (DMA " \
        "channel 1) writes %out_odd" in errors[0], errors


def test_variants_of_one_dpu_task_write_disjoint_boxes():
    text = """input %in : 1x16x8x8xf16 NHWC
output %out : 1x16x8x8xf16 NHWC
cmx %x : 1x16x8x8xf16 NHWC tile 0 at 0
cmx %w : 16x16x1x1xf16 NHWC tile 0 at 4096
cmx %y : 1x16x8x8xf16 NHWC tile 0 at 8192
barrier %l
barrier %c
tasks DMA {
  dma %in -> %x channel 0 updates(%l)
  dma %y -> %out channel 0 waits(%c)
}
tasks DPU {
  conv: dpu conv on tile 0 in(%x) weights(%w) out(%y) waits(%l) {
    variant start(0, 0, 0) end(7, 3, 15) updates(%c)
    variant start(0, 4, 0) end(7, 7, 7) updates(%c)
    variant start(0, 4, 8) end(7, 7, 15) updates(%c)
  }
}
"""
    assert _errors(text) == []
    # Without the wait, the load races with every variant's read of %x.
    errors = _errors(text.replace(" waits(%l) {", " {"))
    assert len(errors) == 3 and all(e.startswith("race on cmx %x, bytes 0..2048") for e in errors)


@pytest.mark.parametrize("removed, expected", [
    ("waits(%l) ", ["load (DMA channel 0) writes %x", "act (ACT_SHAVE tile 0) reads %x"]),
    (" waits(%d)", ["act (ACT_SHAVE tile 0) writes %y", "store (DMA channel 1) reads %y"]),
])
def test_a_missing_wait_is_a_race(removed, expected):
    text = """input %in : 64xf16
output %out : 64xf16
cmx %x : 64xf16 tile 0 at 0
cmx %y : 64xf16 tile 0 at 128
barrier %l
barrier %d
tasks DMA {
  load: dma %in -> %x channel 0 updates(%l)
  store: dma %y -> %out channel 1 waits(%d)
}
tasks ACT_SHAVE {
  act: sw @relu on tile 0 inputs(%x as %a) outputs(%y as %b) waits(%l) updates(%d) {
    run(%a, %b)
  }
}
"""
    assert _errors(text) == []
    errors = _errors(text.replace(removed, "", 1))
    assert len(errors) == 1 and all(part in errors[0] for part in expected), errors


def _row_blocks(blocks: int, racy: bool) -> str:
    """Stores of one row each into an NCHW output: strided blocks, one run per channel."""
    lines = [f"output %out : 1x4x{blocks}x8xf16 NCHW", "cmx %row : 1x4x1x8xf16 NCHW tile 0 at 0",
             "tasks DMA {"]
    for i in range(blocks):
        lines.insert(2, f"view %out{i} = %out[0, :, {i}:{i + 1}, :]")
        lines.append(f"  s{i}: dma %row -> %out{i} channel 0")
    # A second pass rewrites every block: each store is asked about the one it overwrites.
    lines += [f"  r{i}: dma %row -> %out{i} channel 0" for i in range(blocks)]
    if racy:   # a second channel rewrites the first row's channels 1:3, unordered
        lines.insert(2, "view %late = %out[0, 1:3, 0:1, :]")
        lines.insert(2, "cmx %half : 1x2x1x8xf16 NCHW tile 0 at 128")
        lines.append("  late: dma %half -> %late channel 1")
    return "\n".join(lines + ["}"]) + "\n"


def test_the_sweep_asks_linearly_many_ordering_queries_for_strided_blocks(monkeypatch):
    # Each row block's hull spans nearly the whole output; painted as one hull no
    # block could retire another and every store would be asked about all earlier ones.
    calls = []
    original = Schedule.happens_before
    monkeypatch.setattr(Schedule, "happens_before",
                        lambda self, a, b: calls.append((a, b)) or original(self, a, b))
    counts = {}
    for blocks in (64, 256):
        calls.clear()
        assert _errors(_row_blocks(blocks, racy=False)) == []
        counts[blocks] = len(calls)
    assert 64 <= counts[64] <= 4 * 64 and 256 <= counts[256] <= 4 * 256, counts


def test_a_race_between_strided_blocks_is_still_found():
    errors = _errors(_row_blocks(32, racy=True))
    # It races with both stores of the first row, s0 and r0.
    assert len(errors) == 2 and all("0 (DMA channel 0) writes %out0" in e and "late (DMA "
                                    "channel 1) writes %late" in e for e in errors), errors


def test_strided_stores_race_exactly_when_two_channels_share_a_byte():
    # Random strided boxes of one output stored from two DMA channels, no barriers:
    # a channel's stores are ordered, the two channels' are not.  The verdict must be
    # the brute-force one, and every reported pair must really share a byte.
    rng = random.Random(11)
    shape = (2, 4, 6, 5)
    for _ in range(300):
        order = rng.choice(["NCHW", "NHWC"])
        stores = []
        for i in range(rng.randrange(2, 8)):
            dims = []
            for n in shape:
                a = rng.randrange(n)
                dims.append(f"{a}:{rng.randrange(a + 1, n + 1)}:{rng.choice([1, 1, 2])}")
            stores.append((f"t{i}", ", ".join(dims), rng.randrange(2)))
        text = (f"module @m arch NPU37XX\ninput %in : 2x4x6x5xf16 {order}\n"
                f"output %out : 2x4x6x5xf16 {order}\n"
                + "".join(f"view %i{n[1:]} = %in[{b}]\nview %o{n[1:]} = %out[{b}]\n"
                          for n, b, _ in stores)
                + "tasks DMA {\n"
                + "".join(f"  {n}: dma %i{n[1:]} -> %o{n[1:]} channel {c}\n" for n, b, c in stores)
                + "}\n")
        symbols = SymbolTable(parse_text(text, "t.vir"))
        touched = {n: _bytes(symbols.region(f"o{n[1:]}")) for n, _, _ in stores}
        channel = {n: c for n, _, c in stores}
        racing = {(a, b) for a in touched for b in touched
                  if channel[a] < channel[b] and touched[a] & touched[b]}
        errors = [d.message for d in verify_module(parse_text(text, "t.vir")).items
                  if d.severity.name == "ERROR"]
        assert bool(errors) == bool(racing), text
        for message in errors:
            if message.startswith("race on"):
                names = [w for w in message.split() if w[:1] == "t" and w[1:].isdigit()]
                assert tuple(sorted(names, key=lambda n: channel[n])) in racing, (text, message)
