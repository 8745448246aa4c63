"""The weights table: a layer's constant weights with its bias in rows after them.

The NPU compiler's weights table (per output channel: the weights' address and the
bias) is a constant loaded with the weights.  Here the lowering's own constant weights
``[O, I, KH, KW]`` (NHWC, padded to the DPU's channel multiples) get the bias appended
when ``packs_bias`` (exact in the weights' type), so the separate f32 bias load and its
DDR latency (870 cycles on NPU37XX, for a few hundred bytes) go: one DDR constant, one
CMX buffer and one DMA per tile (or chunk), the DPU task reading two views of it (a DPU
bias may be any region of OC values, read in logical order: ``docs/vir.md``).  The bias
sits in a box ``[rows, a, b, c]`` of the appended rows (``box_rows``): a view keeps the
buffer's rank.  A convolution of aligned channels, whose weights could be read from the
graph's constant as they are, gets a table too when its bias rows are cheap
(``packs_cheaply``): then ``lower_dpu_channels.reads_weights`` is False.
"""

from __future__ import annotations

import functools

import numpy as np

from vpuc.fusion.lower_dpu_support import const_text
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType


def packs_bias(bias: np.ndarray | None, elem: ElemType) -> bool:
    """Whether every bias value is exact in the weights' type ``elem`` (f16 or bf16): then
    the DPU, which adds the bias in f32 (``runtime_sim/dpu/numerics.py``), adds the same
    values as from an f32 bias.  A bias Add of an f16 or bf16 layer has a constant of the
    layer's type, so its values always are."""
    if bias is None or elem not in (ElemType.F16, ElemType.BF16):
        return False
    values = np.asarray(bias, np.float32)
    if not np.all(np.isfinite(values)):
        return False
    if elem is ElemType.F16:
        if np.any(np.abs(values) > np.finfo(np.float16).max):
            return False
        return bool(np.array_equal(values.astype(np.float16).astype(np.float32), values))
    return not np.any(values.view(np.uint32) & 0xFFFF)        # bf16: the high half of f32


# An aligned conv's weights are read from the graph's constant unless its bias is packed;
# packing pays one DMA less but loads the bias rows' bytes (zeros beside the bias).  Packed
# only when those rows take at most this many times the f32 bias load's bytes.  Measured
# (timing-only, exact cycles; 0 = always packed, main: ResNet-18 2,118,565, MobileNetV3-Small
# 881,916): 0 -> 2,120,854 / 875,686; 1 -> 2,106,482 / 878,039; 2 -> 2,106,482 / 875,707;
# 3 and 4 -> 2,107,884 / 875,686; 8 -> 2,120,854 / 875,686.  A 3x3 conv of equal channels
# has 4.5: its wide rows in the DMA-bound late ResNet layers cost more than the bias load.
CHEAP_BIAS_ROWS = 4


def packs_cheaply(dims: tuple[int, ...], elem: ElemType) -> bool:
    """Whether the bias rows after aligned weights ``dims`` ``[O, I, KH, KW]`` of ``elem`` take
    at most ``CHEAP_BIAS_ROWS`` times the bytes of the layer's f32 bias."""
    o, i, kh, kw = dims
    return box_rows(o, i, kh, kw)[0] * i * kh * kw * elem.nbytes <= CHEAP_BIAS_ROWS * 4 * o


@functools.lru_cache(maxsize=None)
def box_rows(count: int, per_out: int, kh: int, kw: int) -> tuple[int, int, int, int]:
    """(rows, a, b, c): ``count`` values as the box ``[rows, a, b, c]`` of rows
    ``[per_out, kh, kw]`` appended after weights: the fewest rows (the fewest bytes
    loaded) over the boxes whose size divides ``count``; ties to the longest contiguous
    run (NHWC: ``a`` innermost)."""
    best = None
    for a in (a for a in range(1, min(per_out, count) + 1) if count % a == 0):
        for b in range(1, kh + 1):
            for c in range(1, kw + 1):
                if count % (a * b * c) == 0:
                    key = (count // (a * b * c), -a)
                    if best is None or key < best[0]:
                        best = (key, (count // (a * b * c), a, b, c))
    return best[1]


class Table:
    """The layout of one layer's table: weights ``dims`` ``[O, I, KH, KW]``, then the rows
    holding the bias (``bias``: whether packed)."""

    def __init__(self, dims: tuple[int, int, int, int], bias: bool) -> None:
        self.dims = dims
        o, i, kh, kw = dims
        self.bias_box = box_rows(o, i, kh, kw) if bias else None
        self.rows = o + (self.bias_box[0] if bias else 0)

    def values(self, weights: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """The table: ``weights`` (padded to ``dims``), the bias in its box, zeros."""
        o, i, kh, kw = self.dims
        table = np.zeros((self.rows, i, kh, kw), np.float32)
        table[:o] = weights
        if self.bias_box is not None:
            rows, a, b, c = self.bias_box
            table[o:o + rows, :a, :b, :c] = np.asarray(bias, np.float32).reshape(rows, a, b, c)
        return table

    def declaration(self, weights: np.ndarray, bias: np.ndarray | None, elem: ElemType,
                    name: str) -> str:
        """The ``const %name`` holding ``values``."""
        table = self.values(weights, bias)
        dims = "x".join(map(str, table.shape))
        return f"const %{name} : {dims}x{elem} NHWC = {const_text(table, name)}"

    def load(self, e, src: str, elem: ElemType, tag: str, t: int, waits: str,
             loaded: list[str], before_store: int | None = None) -> str:
        """DMA the table constant ``src`` into one CMX buffer of tile ``t`` (channel 0, or
        with ``before_store`` the store channel: ``LayerEmitter.dma``); the task's clauses:
        its weights view and, when packed, its bias view."""
        o, i, kh, kw = self.dims
        nhwc = DimsOrder(NAMED_ORDERS["NHWC"])
        table = e.cmx(f"wb.{tag}", TensorType((self.rows, i, kh, kw), elem, nhwc), t)
        e.dma(f"load_w.{tag}", src, table, 0 if before_store is None else e.prog.store_channel,
              waits, loaded, before_store=before_store)
        wt = e.view(f"w.{tag}", table[1:], [f"0:{o}", f"0:{i}", f"0:{kh}", f"0:{kw}"])
        clauses = f" weights({wt})"
        if self.bias_box is not None:
            rows, a, b, c = self.bias_box
            bias = e.view(f"bias.{tag}", table[1:], [f"{o}:{o + rows}", f"0:{a}", f"0:{b}",
                                                      f"0:{c}"])
            clauses += f" bias({bias})"
        return clauses


class MatrixTable:
    """The same for a MatMul's constant weights cut into column chunks
    (``lower_dpu_matmul`` under ``--schedule default``): the weights as ``[N, K]`` rows
    (transposed at compile time when the graph's constant is ``[K, N]``), each chunk's
    rows zero-padded to ``[cp, kp]`` (the DPU's channel multiples) and followed by its
    bias rows when ``bias`` (``packs_bias``), the chunks one after another in one
    constant.  Each chunk then loads with one contiguous DMA: no strided read of a
    ``[K, N]`` constant's columns, no zero-padding DMAs, no f32 bias load (MobileNetV3-
    Small's two Gemms: 13 bias loads of 870 cycles of latency each for 256 to 704 bytes).
    ``chunks``: (c0, c1, cp) per chunk, cp its padded column count."""

    def __init__(self, chunks: list[tuple[int, int, int]], kp: int, bias: bool) -> None:
        self.kp, self.bias = kp, bias
        self.layout: dict[tuple[int, int], tuple[int, int, tuple[int, int] | None]] = {}
        row = 0
        for c0, c1, cp in chunks:
            box = box_rows(cp, kp, 1, 1)[:2] if bias else None
            self.layout[(c0, c1)] = (row, cp, box)
            row += cp + (box[0] if box else 0)
        self.rows = row

    @staticmethod
    def bias_rows(cp: int, kp: int) -> int:
        """The rows the bias of a chunk of ``cp`` columns takes after its weights."""
        return box_rows(cp, kp, 1, 1)[0]

    def values(self, weights: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """The table from ``weights`` ``[N, K]`` and the bias padded to the last chunk's
        padded end."""
        table = np.zeros((self.rows, self.kp), np.float32)
        for (c0, c1), (row, cp, box) in self.layout.items():
            table[row:row + c1 - c0, :weights.shape[1]] = weights[c0:c1]
            if box is not None:
                rows, a = box
                table[row + cp:row + cp + rows, :a] = \
                    np.asarray(bias[c0:c0 + cp], np.float32).reshape(rows, a)
        return table

    def declaration(self, weights: np.ndarray, bias: np.ndarray | None, elem: ElemType,
                    name: str) -> str:
        table = self.values(weights, bias)
        return f"const %{name} : {self.rows}x{self.kp}x{elem} NC = {const_text(table, name)}"

    def load(self, e, src: str, chunk: tuple[int, int], elem: ElemType, tag: str, t: int,
             waits: str, loaded: list[str]) -> tuple[str, str]:
        """DMA chunk ``chunk``'s rows of the table constant ``src`` into one CMX buffer of
        tile ``t`` (channel 0, the DMA labelled ``w.<tag>`` as the unpacked weights');
        (its weights view, the task's bias clause: "" when not packed)."""
        row, cp, box = self.layout[chunk]
        rows = cp + (box[0] if box else 0)
        nc = DimsOrder(NAMED_ORDERS["NC"])
        view = e.view(f"wb.v{tag}", src, [f"{row}:{row + rows}", f"0:{self.kp}"])
        table = e.cmx(f"wb.{tag}", TensorType((rows, self.kp), elem, nc), t)
        e.dma(f"w.{tag}", view, table, 0, waits, loaded)
        weights = e.view(f"w.{tag}", table[1:], [f"0:{cp}", f"0:{self.kp}"])
        if box is None:
            return weights, ""
        bias = e.view(f"bias.{tag}", table[1:], [f"{cp}:{cp + box[0]}", f"0:{box[1]}"])
        return weights, f" bias({bias})"
