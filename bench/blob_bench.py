"""Blob benchmark: compile (passes + serialize) and read back the 10k and 100k
task programs of bench/gen_program.py, in both formats.

For each size it prints the wall time of every phase (parse, passes,
serialize, read-back with and without the verifier), the blob size and the
bytes per task, and checks the targets: serialize + read-back (verified) take
at most the parse time of the same program, and reading the blob takes at
most a timing-only simulation of what it read (issue 13, "reading a blob no
slower than simulating it").  Read and simulate are timed in pairs, one after
the other, each simulation on the program its pair just read (so nothing the
reader leaves for later is paid by an earlier read), after one untimed pair per
format (the format timed first pays no warm-up the other skips): the ratio is the median of
the pairs' ratios, with its spread (min-max), so a load change on a shared
machine hits both sides of a pair alike.  Other phases are the median of
--repeat runs.  The phases run with the garbage collector paused, as the
parser, the pass manager and the simulator run.

    python bench/blob_bench.py [--sizes 10000,100000] [--repeat 3] [--json] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_program import generate  # noqa: E402

from vpuc.arch import load_arch  # noqa: E402
from vpuc.blob import decode_blob, read_blob, write_blob  # noqa: E402
from vpuc.diagnostics import VpucError  # noqa: E402
from vpuc.passes.base import PassContext  # noqa: E402
from vpuc.passes.manager import PassManager  # noqa: E402
from vpuc.passes.registry import PIPELINES, parse_pipeline  # noqa: E402
from vpuc.perf import gc_paused  # noqa: E402
from vpuc.vir.parser import parse_text  # noqa: E402
from runtime_sim.simulator import simulate  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PIPELINE = "compile" if "compile" in PIPELINES else "kernels"
# If the library kernels are not there, an assembly kernel of the same contract stands in.
ASM_STAND_IN = REPO / "tests" / "unit" / "data" / "clamp_test.s"


# --cpu: this process's CPU time instead of wall time, for a machine other jobs share.
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]


def timed(fn):
    started = clock()
    with gc_paused():
        result = fn()
    return result, clock() - started


def best_of(repeat: int, fn):
    """The result and the median wall time of ``repeat`` runs."""
    times, result = [], None
    for _ in range(repeat):
        result = None
        result, seconds = timed(fn)
        times.append(seconds)
    return result, statistics.median(times)


def read_and_simulate(repeat: int, data: bytes):
    """``repeat`` pairs of (read the blob, simulate what it read, timing-only): the last
    program read, the median read and simulate times and each pair's read/simulate ratio."""
    reads, sims, ratios, back = [], [], [], None
    for _ in range(repeat):
        back = None
        back, t_read = timed(lambda: read_blob(data, "bench.blob"))
        _, t_sim = timed(lambda: simulate(back, timing_only=True, races=False))
        reads.append(t_read)
        sims.append(t_sim)
        ratios.append(t_read / t_sim)
    return back, statistics.median(reads), statistics.median(sims), ratios


def compile_program(text: str):
    module = parse_text(text, "bench.vir")
    ctx = PassContext(load_arch(module.arch))
    PassManager(parse_pipeline(PIPELINE)).run(module, ctx)
    return ctx.artifacts["program"]


def program_text(size: int) -> tuple[str, str]:
    text = generate(size)
    try:
        compile_program(generate(8))
        return text, "library hswish"
    except VpucError:
        stand_in = f'from asm "{ASM_STAND_IN}"'
        return (text.replace('from library "hswish"', stand_in)
                .replace('from library "runtime"', stand_in), f"asm {ASM_STAND_IN.name}")


def run(size: int, repeat: int) -> list[dict]:
    text, kernel = program_text(size)
    tasks = size // 4 * 4
    _, t_parse = best_of(repeat, lambda: parse_text(text, "bench.vir"))
    module = parse_text(text, "bench.vir")
    ctx = PassContext(load_arch(module.arch))
    _, t_passes = timed(lambda: PassManager(parse_pipeline(PIPELINE)).run(module, ctx))
    program = ctx.artifacts["program"]
    rows = []
    for fmt in ("fb", "elf"):
        data, t_write = best_of(repeat, lambda: write_blob(program, fmt, {"format": fmt}))
        read_and_simulate(1, data)     # untimed warm-up pair: the first format read pays no more
        back, t_read, t_sim, ratios = read_and_simulate(repeat, data)
        _, t_read_raw = best_of(repeat, lambda: read_blob(data, "bench.blob", verify=False))
        _, t_decode = best_of(repeat, lambda: decode_blob(data, "bench.blob", sizes=False))
        assert back.module == program.module and back.invocations == program.invocations
        rows.append(dict(tasks=tasks, format=fmt, kernel=kernel, parse=t_parse, passes=t_passes,
                         serialize=t_write, read=t_read, read_unverified=t_read_raw,
                         decode=t_decode,
                         simulate=t_sim, bytes=len(data), bytes_per_task=len(data) / tasks,
                         read_ratio=statistics.median(ratios), read_ratio_min=min(ratios),
                         read_ratio_max=max(ratios),
                         target_met=t_write + t_read <= t_parse,
                         read_met=statistics.median(ratios) <= 1.0))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    ap.add_argument("--cpu", action="store_true",
                    help="time with this process's CPU time (a shared machine), not wall time")
    args = ap.parse_args()
    global clock
    clock = CLOCK["cpu" if args.cpu else "wall"]
    parse_text("module @warmup\n", "warmup.vir")
    rows = [row for size in args.sizes.split(",") for row in run(int(size), args.repeat)]
    print(f"{'tasks':>7} {'fmt':>4} {'parse':>8} {'passes':>8} {'serialize':>9} {'read':>8} "
          f"{'read -v':>8} {'decode':>8} {'ser+read':>8} {'simulate':>8} {'blob':>10} "
          f"{'B/task':>7}  targets")
    for r in rows:
        both = r["serialize"] + r["read"]
        print(f"{r['tasks']:>7} {r['format']:>4} {r['parse']:>7.2f}s {r['passes']:>7.2f}s "
              f"{r['serialize']:>8.2f}s {r['read']:>7.2f}s {r['read_unverified']:>7.2f}s "
              f"{r['decode']:>7.2f}s "
              f"{both:>7.2f}s {r['simulate']:>7.2f}s {r['bytes']:>10} {r['bytes_per_task']:>7.1f}  "
              f"{'met' if r['target_met'] else 'MISSED'} ({both / r['parse']:.0%} of parse), "
              f"{'met' if r['read_met'] else 'MISSED'} (read {r['read_ratio']:.2f}x simulate, "
              f"pairs {r['read_ratio_min']:.2f}-{r['read_ratio_max']:.2f})")
    print(f"kernel: {rows[0]['kernel']}; read = read_blob with the verifier, read -v without, "
          "decode = the bytes to checked records (hash included), before the Program is built; "
          f"simulate = timing-only, no race checks, each on the program its pair read; "
          "read/simulate = the median (and range) of the pairs' ratios; medians of --repeat "
          "runs of "
          f"{'CPU' if args.cpu else 'wall'} time; "
          "targets: serialize + read <= parse, read <= simulate")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
