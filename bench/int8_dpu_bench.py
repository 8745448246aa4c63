"""The DPU's integer mode against its f16 twin: one layer, deterministic simulated cycles.

A 3x3 convolution (pad 1, bias, relu) over a 1xCx28x28 NHWC input, its output rows split
over the two tiles (each tile loads its rows and a halo row), written twice: in f16 (f16
weights, f32 bias) and in the integer mode (u8 input, i8 weights, i32 bias, the PPE's
(mult, shift) table, u8 output).  Both run timing-only (``vpuc run --timing-only``'s
simulation): total cycles, each DPU's and DMA channel's busy cycles, and the CMX bytes.  The integer
layer's DPU time is about half the f16 one's (VPUNN's 2048 int8 MACs/cycle against 1024,
``vpuc/cost/dpu.py``), and it moves half the bytes.  Measured (64 channels): 32,661 ->
18,890 cycles (0.578), DPU busy 14,829 -> 7,527 per tile, DMA busy 17,832 -> 11,363 per
channel.

Run: .venv/bin/python bench/int8_dpu_bench.py [--channels C]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime_sim.report import summary_data  # noqa: E402
from vpuc import api  # noqa: E402

SIZE = 28


def layer_text(channels: int, integer: bool) -> str:
    """The layer in VIR, constants as splats (timing-only runs do not read values)."""
    x, w, y = ("u8", "i8", "u8") if integer else ("f16", "f16", "f16")
    bias = "i32" if integer else "f32"
    half = SIZE // 2
    quant = " quant scale(%s{t}) zero_point(128, 0)" if integer else ""
    tiles = []
    for t, rows in enumerate((f"0:{half + 1}", f"{half - 1}:{SIZE}")):
        tiles.append(f"""
cmx %x{t} : 1x{channels}x{half + 1}x{SIZE}x{x} NHWC tile {t}
cmx %w{t} : {channels}x{channels}x3x3x{w} NHWC tile {t}
cmx %b{t} : {channels}x{bias} tile {t}
{f"cmx %s{t} : {channels}x2xi32 tile {t}" if integer else ""}
cmx %y{t} : 1x{channels}x{half}x{SIZE}x{y} NHWC tile {t}
view %in{t} = %in[0, 0:{channels}, {rows}, 0:{SIZE}]
view %out{t} = %out[0, 0:{channels}, {t * half}:{(t + 1) * half}, 0:{SIZE}]
barrier %loaded{t}
barrier %done{t}""")
    dma, dpu = [], []
    for t in range(2):
        ch = t
        dma += [f"dma %in{t} -> %x{t} channel {ch} updates(%loaded{t})",
                f"dma %wc -> %w{t} channel {ch} updates(%loaded{t})",
                f"dma %bc -> %b{t} channel {ch} updates(%loaded{t})"]
        if integer:
            dma.append(f"dma %sc -> %s{t} channel {ch} updates(%loaded{t})")
        dma.append(f"dma %y{t} -> %out{t} channel {ch} waits(%done{t})")
        pad = "1, 0, 1, 1" if t == 0 else "0, 1, 1, 1"
        dpu.append(f"l{t}: dpu conv on tile {t} in(%x{t}) weights(%w{t}) bias(%b{t}) "
                   f"out(%y{t}) pad({pad}){quant.format(t=t)} post relu waits(%loaded{t}) "
                   f"updates(%done{t}) {{\n    variant start(0, 0, 0) "
                   f"end({SIZE - 1}, {half - 1}, {channels - 1})\n  }}")
    scale = (f"const %sc : {channels}x2xi32 = splat 16384\n" if integer else "")
    return (f"module @layer arch NPU37XX\n"
            f"input %in : 1x{channels}x{SIZE}x{SIZE}x{x} NHWC\n"
            f"output %out : 1x{channels}x{SIZE}x{SIZE}x{y} NHWC\n"
            f"const %wc : {channels}x{channels}x3x3x{w} NHWC = splat 1\n"
            f"const %bc : {channels}x{bias} = splat 0\n{scale}"
            + "".join(tiles) + "\ntasks DMA {\n  " + "\n  ".join(dma) + "\n}\n"
            + "tasks DPU {\n  " + "\n  ".join(dpu) + "\n}\n")


def measure(channels: int, integer: bool) -> dict:
    program = api.compile_text(layer_text(channels, integer), "layer.vir")
    sim = api.simulate(program, timing_only=True)
    data = summary_data(sim.result.plan, sim.result.timeline, exact=True)
    busy = {e["name"]: round(e["busy_cycles"]) for e in data["engines"]
            if e["name"].startswith(("DPU", "DMA"))}
    return {"cycles": sim.cycles, "busy": busy,
            "cmx_bytes": sum(b.type.nbytes for b in program.module.buffers
                             if b.kind.value == "cmx")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=64)
    args = parser.parse_args()
    f16, int8 = measure(args.channels, False), measure(args.channels, True)
    print(f"conv 3x3 1x{args.channels}x{SIZE}x{SIZE}, two tiles, timing-only")
    print(f"{'':6} {'cycles':>8} {'CMX bytes':>10}  busy cycles per engine")
    for name, row in (("f16", f16), ("int8", int8)):
        busy = ", ".join(f"{k} {v:,}" for k, v in sorted(row["busy"].items()))
        print(f"{name:6} {row['cycles']:>8,.0f} {row['cmx_bytes']:>10,}  {busy}")
    print(f"int8 / f16 cycles: {int8['cycles'] / f16['cycles']:.3f}")


if __name__ == "__main__":
    main()
