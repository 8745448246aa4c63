"""How many cycles the DMA costs a program, and which part of the DMA model they come
from (issue 13: "balance the DMA channels"): each zoo model (or an .onnx file) compiled
once under ``--schedule default`` and simulated timing-only under the shipped timing
model and under what-if timing models that each lift one DMA mechanism of
``vpuc/cost/dma.py`` (the compiled program is the same in every row, so the difference
is the DMA's alone):

- ``no DDR latency``: a DDR side's read and write latency (``ddr_read_latency``,
  ``ddr_write_latency``: 870 and 310 cycles on NPU37XX, each held by the channel
  before data moves) set to the CMX's;
- ``DDR not shared``: the DDR bandwidth scaled by the channel count, so a channel never
  waits for the other's share (``runtime_sim/engines/dma.py``'s max-min split);
- ``no rate limit``: engine, CMX port and DDR rates 1000 times faster, latencies kept:
  every transfer's bytes cost (nearly) nothing, CMX -> CMX copies included;
- ``ideal DMA``: ``no rate limit`` and ``no DDR latency`` together.

So a placement that only balances the channels' DDR shares wins about what the ``DDR not
shared`` row does at most, one that hides DDR latency the ``no DDR latency`` row.  It also
prints, per channel, the bytes and the cost model's cycles (``transfer_cost`` of a
contiguous transfer alone on the DDR, dispatch included) of the DMA tasks by kind of
transfer (DDR -> CMX, CMX -> CMX, CMX -> DDR, DDR -> DDR): what each channel's FIFO holds.

    python bench/dma_headroom.py [--model NAME ...] [--onnx FILE ...] [--small] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.schedule_bench import FULL, SMALL  # noqa: E402
from runtime_sim.simarch import SimArch, sim_arch_for  # noqa: E402
from vpuc import api  # noqa: E402
from vpuc.cost.dma import dma_task_cycles, transfer_cost  # noqa: E402
from vpuc.ir.module import BufferKind  # noqa: E402
from vpuc.ir.symbols import SymbolTable  # noqa: E402
from vpuc.ir.tasks import DmaMode, DmaTask  # noqa: E402

# How much faster the ``no rate limit`` rows make every rate: enough that a 2 MB transfer
# costs about 90 cycles, not enough to reach a float's edge.
UNLIMITED = 1000.0
VARIANTS = ("shipped", "no DDR latency", "DDR not shared", "no rate limit", "ideal DMA")


def variant(arch: SimArch, name: str) -> SimArch:
    """``arch`` with the DMA mechanisms ``name`` lifts (``VARIANTS``)."""
    dma, ddr = arch.dma, arch.ddr_bytes_per_cycle
    if name in ("no DDR latency", "ideal DMA"):
        dma = dataclasses.replace(dma, ddr_read_latency=dma.cmx_latency,
                                  ddr_write_latency=dma.cmx_latency)
    if name == "DDR not shared":
        ddr *= arch.structure.dma_channels
    if name in ("no rate limit", "ideal DMA"):
        dma = dataclasses.replace(dma, engine_bytes_per_cycle=dma.engine_bytes_per_cycle * UNLIMITED,
                                  cmx_bytes_per_cycle=dma.cmx_bytes_per_cycle * UNLIMITED,
                                  permute_elements_per_cycle=dma.permute_elements_per_cycle
                                  * UNLIMITED)
        ddr *= UNLIMITED
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}")
    return dataclasses.replace(arch, dma=dma, ddr_bytes_per_cycle=ddr)


def _side(kind: BufferKind) -> str:
    return "CMX" if kind is BufferKind.CMX else "DDR"


def channel_use(program, arch: SimArch) -> dict[tuple[int, str], dict[str, float]]:
    """(channel, "SRC -> DST") -> {"transfers", "bytes", "cycles"} over the program's DMA
    tasks: bytes of the destination, cycles by the cost model (``dma_task_cycles``: alone
    on the DDR, the runtime's dispatch included)."""
    module = program.module
    symbols = SymbolTable(module)
    out: dict[tuple[int, str], dict[str, float]] = {}
    for task_list in module.task_lists:
        for t in task_list.tasks:
            if not isinstance(t, DmaTask):
                continue
            src, dst = symbols.region(t.src), symbols.region(t.dst)
            src_ddr, dst_ddr = src.kind is not BufferKind.CMX, dst.kind is not BufferKind.CMX
            transfer = transfer_cost(t.mode is DmaMode.PERMUTE, src.type.nbytes,
                                     src.type.elem.nbytes, src_ddr, dst.type.nbytes, dst_ddr,
                                     arch.dma)
            row = out.setdefault((t.channel, f"{_side(src.kind)} -> {_side(dst.kind)}"),
                                 {"transfers": 0, "bytes": 0, "cycles": 0.0})
            row["transfers"] += 1
            row["bytes"] += dst.type.nbytes
            row["cycles"] += dma_task_cycles(transfer, arch.dispatch["DMA"],
                                             arch.ddr_bytes_per_cycle)
    return out


def measure(name: str, path: Path | None, variants=VARIANTS, program=None) -> dict:
    """The model at ``path`` (or the compiled ``program``): its cycles under each variant
    and its channels' use."""
    program = program or api.compile(path, schedule="default")
    shipped = sim_arch_for(program.arch)
    row: dict = {"model": name, "cycles": {}}
    for v in variants:
        row["cycles"][v] = api.simulate(program, timing_only=True,
                                        arch=variant(shipped, v)).cycles
    row["channels"] = {f"{c}: {k}": use for (c, k), use in
                       sorted(channel_use(program, shipped).items())}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=sorted(FULL))
    parser.add_argument("--onnx", action="append", type=Path, default=[])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        zoo = args.model or ([] if args.onnx else list(FULL))
        for name in zoo:
            path = (SMALL if args.small else FULL)[name]().save(Path(tmp) / f"{name}.onnx", name)
            rows.append(measure(name, path))
        for path in args.onnx:
            rows.append(measure(path.stem, path))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':20s} " + " ".join(f"{v:>15s}" for v in VARIANTS))
    for r in rows:
        base = r["cycles"]["shipped"]
        print(f"{r['model']:20s} " + " ".join(
            f"{c:>15,.0f}" if v == "shipped" else f"{c:>8,.0f} {100 * (c - base) / base:+5.1f}%"
            for v, c in r["cycles"].items()))
    for r in rows:
        print(f"\n{r['model']}: channel: transfer kind   transfers        bytes   cost-model cycles")
        for key, use in r["channels"].items():
            print(f"  {key:24s} {use['transfers']:>9,d} {use['bytes']:>12,d} {use['cycles']:>19,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
