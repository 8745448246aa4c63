"""Calibration rows (VPUNN's cycles for VPU 2.7) as vpuc programs and as cost-model workloads.

Shared by ``fidelity_bench.py`` (runs every row through the compiler and the
simulator) and ``fit_cost_model.py`` (fits the timing file's parameters).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from vpuc.cost import DpuWorkload

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE.parent.parent / "shared" / "calibration" / "vpunn_2_7_train.csv"
BUNDLED_CSV = HERE / "data" / "vpunn_2_7_train.csv"
OPS = {"CONVOLUTION": "conv", "DW_CONVOLUTION": "dwconv", "MAXPOOL": "maxpool",
       "ELTWISE": "add", "AVEPOOL": "avgpool"}


@dataclass(frozen=True)
class Row:
    id: str
    kind: str                 # DPU or DMA
    family: str
    op: str                   # vpuc's op name (conv, dwconv, maxpool, add) or dma
    in_hwc: tuple[int, int, int]
    out_hwc: tuple[int, int, int]
    kernel: int
    stride: int
    pad: int
    mode: str
    to_ddr: bool              # DMA: CMX -> DDR (else DDR -> CMX)
    nbytes: int
    vpunn: float


def default_csv() -> Path:
    return DEFAULT_CSV if DEFAULT_CSV.exists() else BUNDLED_CSV


def read_rows(path: Path) -> list[Row]:
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            dma = r["kind"] == "DMA"
            num = lambda k: int(r[k]) if r[k] else 0   # noqa: E731
            kernel = r["kernel"].split("x")[0] if r["kernel"] else "1"
            op = "dma" if dma else OPS.get(r["op"], r["op"].lower())
            rows.append(Row(r["id"], r["kind"], r["family"], op,
                            (num("in_h"), num("in_w"), num("in_c")),
                            (num("out_h"), num("out_w"), num("out_c")),
                            int(kernel), num("stride") or 1, num("pad"),
                            r["mode"] or "CUBOID_16x16",
                            r["direction"] == "CMX2DDR" or r["family"] == "dma_CMX2DDR",
                            num("bytes"), float(r["vpunn_cycles"])))
    return rows


def workload(row: Row) -> DpuWorkload:
    """The row as the cost model sees the variant the simulator builds for it."""
    (_, _, ic), (oh, ow, oc) = row.in_hwc, row.out_hwc
    return DpuWorkload(op=row.op, elem="f16", width=ow, height=oh, channels=oc,
                       in_channels=ic if row.op == "conv" else oc,
                       kernel=(row.kernel, row.kernel), stride=(row.stride, row.stride),
                       mode=row.mode)


def program_text(row: Row) -> str:
    """A one-variant DPU program (operands in CMX) or a one-DMA program for the row."""
    lines = [f"module @{row.id} arch NPU37XX"]
    if row.kind == "DMA":
        elems = row.nbytes // 2
        side = "output" if row.to_ddr else "input"
        lines += [f"{side} %ddr : {elems}xf16", f"cmx %c : {elems}xf16 tile 0 at 0", "tasks DMA {"]
        src, dst = ("%c", "%ddr") if row.to_ddr else ("%ddr", "%c")
        lines.append(f"  t: dma {src} -> {dst} channel 0")
        lines.append("}")
        return "\n".join(lines) + "\n"
    (ih, iw, ic), (oh, ow, oc) = row.in_hwc, row.out_hwc
    k, s, p = row.kernel, row.stride, row.pad
    lines.append(f"cmx %x : 1x{ic}x{ih}x{iw}xf16 NHWC tile 0")
    ins, extra = "%x", ""
    if row.op == "conv":
        lines.append(f"cmx %w : {oc}x{ic}x{k}x{k}xf16 NHWC tile 0")
        extra = " weights(%w)"
    elif row.op == "dwconv":
        lines.append(f"cmx %w : {oc}x1x{k}x{k}xf16 NHWC tile 0")
        extra = " weights(%w)"
    elif row.op == "add":
        # Both operands are %x: three 28x28x496 tensors would not fit a tile's CMX, and
        # the cost counts two input streams whatever buffers they come from.
        ins = "%x, %x"
    lines.append(f"cmx %y : 1x{oc}x{oh}x{ow}xf16 NHWC tile 0")
    window = ""
    if row.op != "add":
        # Padding on all sides, trimmed at the bottom/right where the CSV's output needs less.
        pb = (oh - 1) * s + k - ih - p
        pr = (ow - 1) * s + k - iw - p
        window = f" kernel({k}, {k}) stride({s}, {s}) pad({p}, {max(pb, 0)}, {p}, {max(pr, 0)})"
    lines.append("tasks DPU {")
    lines.append(f"  t: dpu {row.op} on tile 0 in({ins}){extra} out(%y){window} {{")
    lines.append(f"    v: variant start(0, 0, 0) end({ow - 1}, {oh - 1}, {oc - 1}) "
                 f"mode({row.mode})")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"

