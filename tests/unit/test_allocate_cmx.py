"""allocate-cmx: interval colouring of CMX buffers by the liveness the barriers imply."""

from __future__ import annotations

import pytest

from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.passes.allocate_cmx import CMX_ALIGNMENT, AllocateCmxPass
from vpuc.passes.base import PassContext
from vpuc.verifier import verify_module
from vpuc.vir.parser import parse_text

ARCH = load_arch("NPU37XX")
HEADER = "module @m arch NPU37XX\n"
MIB = 1 << 20


def allocate(text: str, file: str = "alloc.vir"):
    module = parse_text(HEADER + text, file)
    assert not verify_module(module, ARCH).has_errors
    AllocateCmxPass().run(module, PassContext(ARCH))
    return module, {b.name: b for b in module.buffers}


def overlaps(a, b) -> bool:
    return a.offset < b.offset + b.type.nbytes and b.offset < a.offset + a.type.nbytes


def chain(n: int, size: str = "1x16x32x32xf16 NHWC") -> str:
    """in -> c0 -> c1 -> ... -> c(n-1) -> out, each DMA ordered after the previous by a barrier."""
    lines = [f"input %in : {size}", f"output %out : {size}"]
    lines += [f"cmx %c{i} : {size} tile 0" for i in range(n)]
    lines += [f"barrier %b{i}" for i in range(n)]
    lines.append("tasks DMA {")
    lines.append("  dma %in -> %c0 channel 0 updates(%b0)")
    for i in range(1, n):
        lines.append(f"  dma %c{i - 1} -> %c{i} channel {i % 2} waits(%b{i - 1}) updates(%b{i})")
    lines.append(f"  dma %c{n - 1} -> %out channel 0 waits(%b{n - 1})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_disjoint_lifetimes_share_bytes() -> None:
    # c0 is dead once c1 is written; c2 may reuse c0's bytes, c3 c1's, and so on.
    module, buffers = allocate(chain(6))
    offsets = [buffers[f"c{i}"].offset for i in range(6)]
    assert len(set(offsets)) == 2, offsets          # a chain needs two slots, ping-pong
    assert offsets[0] == offsets[2] == offsets[4]
    assert offsets[1] == offsets[3] == offsets[5]
    assert module.attributes["cmx"] == "allocated"


def test_overlapping_lifetimes_do_not_share() -> None:
    # Two DMAs on different channels with no barrier between them: both buffers are live together.
    _, buffers = allocate("input %in : 4096xf16\n"
                          "cmx %a : 4096xf16 tile 0\ncmx %b : 4096xf16 tile 0\n"
                          "tasks DMA {\n  dma %in -> %a channel 0\n  dma %in -> %b channel 1\n}\n")
    assert not overlaps(buffers["a"], buffers["b"])


def test_neighbours_in_a_chain_never_share() -> None:
    _, buffers = allocate(chain(5))
    for i in range(4):
        assert not overlaps(buffers[f"c{i}"], buffers[f"c{i + 1}"])


def test_result_verifies_clean() -> None:
    module, _ = allocate(chain(8))
    bag = verify_module(module, ARCH)
    assert not bag.has_errors, [d.message for d in bag.items]
    assert all(b.offset is not None for b in module.buffers if b.kind.value == "cmx")


def test_offsets_are_aligned_and_fifo_order_counts() -> None:
    # 3-byte buffers still start on 64-byte boundaries.  %s0 and %s2 are written by
    # consecutive DMAs of channel 0, which runs its tasks in order, so they may share
    # (likewise %s1 and %s3 on channel 1).
    _, buffers = allocate("input %in : 3xu8\n"
                          + "".join(f"cmx %s{i} : 3xu8 tile 1\n" for i in range(4))
                          + "tasks DMA {\n"
                          + "".join(f"  dma %in -> %s{i} channel {i % 2}\n" for i in range(4))
                          + "}\n")
    assert all(b.offset % CMX_ALIGNMENT == 0 for b in buffers.values() if b.kind.value == "cmx")
    assert buffers["s0"].offset == buffers["s2"].offset
    assert buffers["s1"].offset == buffers["s3"].offset
    assert buffers["s0"].offset != buffers["s1"].offset


def test_placed_buffers_are_kept_and_avoided() -> None:
    _, buffers = allocate("input %in : 4096xf16\n"
                          "cmx %fixed : 4096xf16 tile 0 at 0\ncmx %free : 4096xf16 tile 0\n"
                          "tasks DMA {\n  dma %in -> %fixed channel 0\n  dma %in -> %free channel 1\n}\n")
    assert buffers["fixed"].offset == 0
    assert buffers["free"].offset >= 8192


def test_unused_buffer_gets_an_offset() -> None:
    _, buffers = allocate("cmx %idle : 1024xf16 tile 0\n")
    assert buffers["idle"].offset == 0


def test_tiles_are_allocated_separately() -> None:
    _, buffers = allocate("input %in : 4096xf16\n"
                          "cmx %t0 : 4096xf16 tile 0\ncmx %t1 : 4096xf16 tile 1\n"
                          "tasks DMA {\n  dma %in -> %t0 channel 0\n  dma %in -> %t1 channel 1\n}\n")
    assert buffers["t0"].offset == buffers["t1"].offset == 0


def test_a_chain_bigger_than_cmx_fits_by_reuse() -> None:
    # 8 buffers of 768 KiB = 6 MiB in all, but only two are ever live at once.
    module, buffers = allocate(chain(8, "1x64x96x64xf16 NHWC"))
    assert sum(b.type.nbytes for b in buffers.values() if b.kind.value == "cmx") > 2 * MIB
    assert not verify_module(module, ARCH).has_errors


def test_overflow_names_the_peak() -> None:
    text = ("input %in : 1x64x128x64xf16 NHWC\n"
            "cmx %a : 1x64x128x64xf16 NHWC tile 0\n"
            "cmx %b : 1x64x128x64xf16 NHWC tile 0\n"
            "cmx %c : 1x64x128x64xf16 NHWC tile 0\n"
            "tasks DMA {\n  dma %in -> %a channel 0\n  dma %in -> %b channel 1\n"
            "  dma %a -> %c channel 0\n}\n")
    with pytest.raises(VpucError) as info:
        allocate(text, "overflow.vir")
    assert info.value.render() == (
        "overflow.vir:5:1: error: CMX of tile 0 overflows while placing %c (1048576 bytes): "
        "3145728 bytes are live at this point, 1048576 bytes over the 2097152 available; "
        "live: %a (1048576 bytes at 0), %b (1048576 bytes at 1048576)\n"
        "    cmx %c : 1x64x128x64xf16 NHWC tile 0\n"
        "    ^")


def test_fragmentation_is_reported_as_such() -> None:
    # Placed buffers at 0..512K and 1M..1.5M leave two 512 KiB holes: 1.75 MiB would fit
    # in all, but a 768 KiB buffer fits in neither hole.
    text = ("input %in : 262144xf16\n"
            "cmx %lo : 262144xf16 tile 0 at 0\n"
            "cmx %hi : 262144xf16 tile 0 at 1048576\n"
            "cmx %mid : 393216xf16 tile 0\n"
            "view %mid_head = %mid[0:262144]\n"
            "tasks DMA {\n  dma %in -> %lo channel 0\n  dma %in -> %hi channel 1\n"
            "  dma %lo -> %mid_head channel 0\n}\n")
    with pytest.raises(VpucError) as info:
        allocate(text, "fragments.vir")
    message = info.value.diagnostics[0].message
    assert message == ("CMX of tile 0 has no 786432-byte gap for %mid: 1048576 bytes are live "
                       "in fragments (%lo (524288 bytes at 0), %hi (524288 bytes at 1048576))")
