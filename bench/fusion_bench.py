"""Benchmark of issue 6 (part 8): fused vs unfused elementwise chains in the simulator.

The workload: a chain of 8 elementwise ops on a 1x64x128x128 f16 tensor (NHWC) in
DDR, tiled over the 2 tiles in blocks of rows with double-buffered CMX (block k
on tile k % 2, slot (k // 2) % 2; each block split between the tile's two ACT
SHAVEs).  Three task programs per chain:

- fused (``vpuc.fusion.blocked_program``): DMA in -> one generated kernel
  (``lower-graph``: tokenize, data-flow, Linear IR, generator) -> DMA out per
  block;
- unfused (``vpuc.fusion.blocked_program``): one library kernel per op
  (``kernels/*.s``) per block, intermediates ping-ponging between two CMX
  buffers per slot, constants as 1x1x1x1 CMX tensors -- an unfused compiler
  that still keeps a block in CMX across the ops;
- naive (``bench/naive_program.py``): one layer per op, each tiled on its own
  -- for each op, for every block: DMA in -> one library kernel -> DMA out --
  so every intermediate tensor goes through DDR (the issue's "intermediates
  going through CMX or DDR as a naive compiler would"), same constants.

All are compiled by the compile pipeline and simulated with
``runtime_sim.simulator.simulate`` (timing only, with the race detector;
``--check`` also runs the numerics once and compares with the numpy reference
executor).  Reported per chain: simulated cycles (NCE clock), unfused / fused
and naive / fused (target >= 4x, against the naive one), fused against the DMA
roofline (bytes moved over the DDR bandwidth of vpuc/cost/archs/npu37xx.toml;
target <= 1.25x), the generated kernel's cycles per element, and the time of
every compiler stage.

``--profile`` prints the generated kernels' cycles per LIR expression;
``--cleanups`` prints instead what each generator clean-up saves (static
instructions, instructions run, interpreter cycles) on the chain's kernel and
on two kernels with run-time dims (vpuc/fusion/generator/savings.py).

Run: .venv/bin/python bench/fusion_bench.py [--chain NAME] [--blocks N] [--check] [--cleanups]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fusion_programs import (CHAINS, SHAPE, fused_program, naive_generated_program,  # noqa: E402
                             naive_program, part_body, per_op_program, unfused_program)
from runtime_sim.simulator import simulate  # noqa: E402
from vpuc.reference.graph import run_graph  # noqa: E402
from vpuc.vir.parser import parse_text  # noqa: E402

@functools.cache
def timing_model(arch_name: str = "npu37xx") -> dict:
    """vpuc/cost/archs/<arch_name>.toml, read once."""
    return tomllib.loads((ROOT / "vpuc" / "cost" / "archs" / f"{arch_name}.toml").read_text())


def clock_ratio(arch_name: str = "npu37xx") -> float:
    """NCE cycles per SHAVE cycle."""
    data = timing_model(arch_name)
    return data["clocks"]["nce_mhz"] / data["clocks"]["shave_mhz"]


def roofline_cycles(arch_name: str = "npu37xx", shape=SHAPE) -> tuple[float, int]:
    data = timing_model(arch_name)
    moved = 2 * int(np.prod(shape)) * 2                     # f16 in and out, through DDR
    seconds = moved / (data["ddr"]["bandwidth_mbps"] * 1e6)
    return seconds * data["clocks"]["nce_mhz"] * 1e6, moved


def slot_floor(kernel) -> tuple[float, str]:
    """The kernel's compute floor: SHAVE cycles per element of the busiest VLIW slot in its
    main loop (the innermost loop with the most instructions), and that slot's name."""
    from runtime_sim.isa.cycles import LSU, SLOTS, SLOT_KEYS
    from vpuc.fusion.generator.mir import loops
    from vpuc.fusion.generator.target_machine import SHAVE_TM
    inner = [lp for lp in loops(kernel.mir.body) if all(hasattr(n, "op") for n in lp.body)]
    main = max(inner, key=lambda lp: len(lp.body))
    busy = dict.fromkeys(SLOTS, 0.0)
    names = {key: name for name, key in SLOT_KEYS.items()}
    stored = 0
    for inst in main.body:
        cost = SHAVE_TM.cost(inst.op)
        share = cost.issue / len(cost.slots)          # either LSU: half a cycle each
        for key in cost.slots:
            busy[names[key]] += share
        if inst.is_store:
            stored += 16
    slot = max(busy, key=busy.get)
    elements = stored // 2                            # f16 outputs
    label = "lsu" if SLOT_KEYS[slot] in LSU else slot
    return busy[slot] / elements, label


def kernel_cycles_per_element(chain, blocks: int) -> tuple[float, float, str]:
    """(measured SHAVE cycles per element, compute floor per element, its slot)."""
    from vpuc.fusion.generator.generate import generate
    from vpuc.fusion.generator.run import run_kernel
    body = part_body(chain, blocks)
    kernel = generate(body, "k")
    x = np.random.default_rng(0).uniform(-3, 3, body.parameters[0].type.bound_shape)
    run = run_kernel(kernel, [x], [body.results[0].type.bound_shape])
    floor, slot = slot_floor(kernel)
    return run.cycles / x.size, floor, slot


def profile_chain(chain, blocks: int) -> str:
    """Cycles per LIR expression of the chain's generated kernel (one part of a block)."""
    from vpuc.fusion.generator.generate import generate
    from vpuc.fusion.generator.profile import format_profile, profile_kernel
    body = part_body(chain, blocks)
    kernel = generate(body, "chain")
    shape = body.parameters[0].type.bound_shape
    x = np.random.default_rng(0).uniform(-3, 3, shape)
    return format_profile(kernel, profile_kernel(kernel, [x], [shape]))


def compare(graph, program, shape=SHAPE) -> tuple[str, int]:
    """Simulate ``program`` with numerics on a random input: ('bit-exact' | 'close' |
    'MISMATCH' against the numpy reference executor, the number of races found)."""
    x = np.random.default_rng(1).uniform(-4, 4, shape).astype(np.float16)
    result = simulate(program, inputs={"x": x})
    out = result.outputs[next(iter(result.outputs))]
    ref = run_graph(graph, {"x": x})[0]
    exact = np.array_equal(out, ref, equal_nan=True)
    close = np.allclose(out.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=1e-3)
    return ("bit-exact" if exact else ("close" if close else "MISMATCH")), len(result.races)


def check(graph, program, name: str, shape=SHAPE) -> str:
    verdict, races = compare(graph, program, shape)
    return f"{name + ':':8} {verdict} vs numpy" + (f", {races} RACES" if races else "")


def races_note(*results) -> str:
    found = sum(len(r.races) for r in results)
    return f"  RACES: {found} found by the simulator" if found else ""


SAVINGS_CASES = {
    # name: (graph text, input shapes, output shapes)
    "dynamic rows 1x?x37, broadcast bias": ("""module @s
graph @g {
  %x = Parameter() : 1x?<=64x37xf16
  %y = Parameter() : 1x1x37xf16
  %c = Constant(0.5) : f16
  %a = Multiply(%x, %c)
  %b = Add(%a, %y)
  %s = Sigmoid(%b)
  Result(%s)
}
""", [(1, 50, 37), (1, 1, 37)], [(1, 50, 37)]),
    "dynamic innermost 4x?<=1000 (tails)": ("""module @s
graph @g {
  %x = Parameter() : 4x?<=1000xf16
  %r = Relu(%x)
  %t = Tanh(%r)
  Result(%t)
}
""", [(4, 999)], [(4, 999)]),
}


def cleanup_savings(blocks: int) -> None:
    from vpuc.fusion.generator.savings import format_savings, savings
    from vpuc.fusion.subgraph import tokenize
    from vpuc.fusion.targets import get_target
    rng = np.random.default_rng(0)
    cases = {}
    for chain in ("affine", "activations"):
        body = part_body(CHAINS[chain], blocks)
        shape = body.parameters[0].type.bound_shape
        cases[f"'{chain}' chain kernel (1x64x4x128)"] = (body, [rng.uniform(-3, 3, shape)],
                                                         [shape])
    for name, (text, ins, outs) in SAVINGS_CASES.items():
        g = parse_text(text, "<g>").graphs[0]
        body = tokenize(g, get_target("shave")).subgraphs[0].body
        cases[name] = (body, [rng.uniform(-3, 3, s) for s in ins], outs)
    for name, (body, ins, outs) in cases.items():
        print(format_savings(name, savings(body, ins, outs)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chain", choices=list(CHAINS) + ["all"], default="all")
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--check", action="store_true", help="also simulate with numerics and compare")
    ap.add_argument("--cleanups", action="store_true",
                    help="only print what each generator clean-up saves on the bench kernels")
    ap.add_argument("--profile", action="store_true",
                    help="only print the generated kernels' cycles per LIR expression")
    args = ap.parse_args()
    if args.cleanups:
        cleanup_savings(args.blocks)
        return 0
    if args.profile:
        for name in (CHAINS if args.chain == "all" else [args.chain]):
            print(profile_chain(CHAINS[name], args.blocks))
        return 0
    roof, moved = roofline_cycles()
    print(f"workload: 1x64x128x128 f16 NHWC, {args.blocks} blocks over 2 tiles, "
          f"{moved / 2**20:.0f} MiB through DDR; DMA roofline {roof:,.0f} cycles (NCE)")
    for name in (CHAINS if args.chain == "all" else [args.chain]):
        chain = CHAINS[name]
        graph, fused, timings, _ = fused_program(chain, args.blocks)
        unfused, unfused_compile, _ = unfused_program(chain, args.blocks)
        naive, naive_compile, _ = naive_program(chain, args.blocks)
        per_op, per_op_compile, _ = per_op_program(chain, args.blocks)
        naive_gen, naive_gen_compile, _ = naive_generated_program(chain, args.blocks)
        sims = {}
        for kind, program in (("fused", fused), ("unfused", unfused), ("naive", naive),
                              ("per-op", per_op), ("naive-gen", naive_gen)):
            clock = time.perf_counter()
            sims[kind] = (simulate(program, timing_only=True), time.perf_counter() - clock)
        ((f, sim_fused), (u, sim_unfused), (n, sim_naive), (g, sim_per_op),
         (ng, sim_naive_gen)) = sims.values()
        cpe, floor, slot = kernel_cycles_per_element(chain, args.blocks)
        # 4 ACT SHAVEs (2 tiles x 2) share the elements; SHAVE cycles -> NCE cycles
        compute = floor * np.prod(SHAPE) / 4 * clock_ratio()
        acts = {kind: len(p.module.task_lists[1].tasks) for kind, p in
                (("fused", fused), ("unfused", unfused), ("naive", naive))}
        print(f"\n== chain '{name}': " + ", ".join(op for op, _ in chain))
        print(f"  fused   {f.cycles:>12,.0f} cycles  ({acts['fused']} ACT tasks; "
              f"kernel {cpe:.3f} SHAVE cycles/element)")
        print(f"  unfused {u.cycles:>12,.0f} cycles  ({acts['unfused']} ACT tasks; "
              f"intermediates in CMX)")
        print(f"  naive   {n.cycles:>12,.0f} cycles  ({acts['naive']} ACT tasks; one layer per op, "
              f"intermediates in DDR: {len(chain) * moved / 2**20:.0f} MiB through DDR)")
        print(f"  per-op  {g.cycles:>12,.0f} cycles  ({len(per_op.module.task_lists[1].tasks)} ACT "
              f"tasks; one generated kernel per op, intermediates in CMX)")
        print(f"  naive-gen {ng.cycles:>10,.0f} cycles  (one layer per op, intermediates in DDR, "
              f"each layer a generated kernel)")
        print(f"  unfused / fused   {u.cycles / f.cycles:6.2f}x")
        print(f"  per-op / fused    {g.cycles / f.cycles:6.2f}x   (fusion alone, same generator, "
              f"intermediates in CMX)")
        print(f"  naive-gen / fused {ng.cycles / f.cycles:6.2f}x   (fusion alone, same generator, "
              f"intermediates in DDR)")
        print(f"  naive / fused     {n.cycles / f.cycles:6.2f}x   (target >= 4x)")
        print(f"  fused / roofline  {f.cycles / roof:6.2f}x   (target <= 1.25x)")
        print(f"  compute floor     {compute:>12,.0f} cycles  (busiest SHAVE slot: {slot}, "
              f"{floor:.3f} cycles/element on each of 4 SHAVEs) = {compute / roof:.2f}x roofline;"
              f" fused / max(roofline, floor) {f.cycles / max(roof, compute):.2f}x")
        note = races_note(f, u, n)
        if note:
            print(note)
        print("  compiler stages (fused, ms):")
        for stage, seconds in timings:
            print(f"    {seconds * 1e3:9.3f}  {stage}")
        print(f"    {unfused_compile * 1e3:9.3f}  unfused program: compile passes")
        print(f"    {naive_compile * 1e3:9.3f}  naive program: compile passes")
        print(f"    {sim_fused * 1e3:9.3f}  simulate fused (timing only)")
        print(f"    {sim_unfused * 1e3:9.3f}  simulate unfused (timing only)")
        print(f"    {sim_naive * 1e3:9.3f}  simulate naive (timing only)")
        print(f"    {per_op_compile * 1e3:9.3f}  per-op program: compile passes")
        print(f"    {sim_per_op * 1e3:9.3f}  simulate per-op (timing only)")
        print(f"    {naive_gen_compile * 1e3:9.3f}  naive-gen program: compile passes")
        print(f"    {sim_naive_gen * 1e3:9.3f}  simulate naive-gen (timing only)")
        if args.check:
            print("  " + check(graph, fused, "fused"))
            print("  " + check(graph, unfused, "unfused"))
            print("  " + check(graph, naive, "naive"))
            print("  " + check(graph, per_op, "per-op"))
            print("  " + check(graph, naive_gen, "naive-gen"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
