"""Front-end benchmark: bare lark parse vs our parse to IR vs verification.

For programs of 1k, 10k and 100k tasks (bench/gen_program.py) it prints a
table of best-of-N wall times and the ratios to the floor, which is lark's own
parse of the same text into its tree (with the garbage collector paused, as
ours is, so the comparison is about work, not about GC settings).  Peak RSS of
a process doing parse + verify of each size is measured in a fresh child, also
as bytes per task (the whole process: interpreter, imports, the text, the IR
and the verifier's peak, over the task count).

    python bench/compile_bench.py [--sizes 1000,10000,100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_program import generate  # noqa: E402

from vpuc.arch import load_arch  # noqa: E402
from vpuc.verifier import verify_module  # noqa: E402
from vpuc.vir.parser import bare_parser, parse_text  # noqa: E402


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def bare_parse(text: str) -> None:
    gc.disable()
    try:
        bare_parser().parse(text)
    finally:
        gc.enable()


def peak_rss_mib(size: int) -> float:
    """Parse + verify in a fresh process; its peak RSS in MiB.

    The child's VmHWM, not its ``ru_maxrss``: Linux carries the maximum RSS over
    ``execve``, so a child of this (large) process would report ours."""
    code = (
        "import resource, sys; sys.path[:0] = [%r, %r]\n"
        "from gen_program import generate\n"
        "from vpuc.vir.parser import parse_text\n"
        "from vpuc.verifier import verify_module\n"
        "m = parse_text(generate(%d), 'bench.vir')\n"
        "verify_module(m).raise_if_errors()\n"
        "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "print(hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    ) % (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent), size)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()
    arch = load_arch("NPU37XX")
    rows = []
    bare_parser()  # build the parsers outside the timings
    parse_text("module @warmup\n", "warmup.vir")
    for size in (int(s) for s in args.sizes.split(",")):
        text = generate(size)
        repeat = args.repeat if size <= 10000 else max(1, args.repeat - 1)
        t_bare = best_of(repeat, lambda: bare_parse(text))
        t_parse = best_of(repeat, lambda: parse_text(text, "bench.vir"))
        module = parse_text(text, "bench.vir")
        t_verify = best_of(repeat, lambda: verify_module(module, arch).raise_if_errors())
        rows.append(dict(tasks=size, bare=t_bare, parse=t_parse, verify=t_verify,
                         total=t_parse + t_verify, rss_mib=peak_rss_mib(size)))
    print(f"{'tasks':>7} {'bare lark':>10} {'parse→IR':>10} {'verify':>10} {'total':>10} "
          f"{'parse/bare':>10} {'total/bare':>10} {'peak RSS':>10} {'per task':>10}")
    for r in rows:
        print(f"{r['tasks']:>7} {r['bare']:>9.3f}s {r['parse']:>9.3f}s {r['verify']:>9.3f}s "
              f"{r['total']:>9.3f}s {r['parse'] / r['bare']:>9.2f}x {r['total'] / r['bare']:>9.2f}x "
              f"{r['rss_mib']:>7.0f}MiB {r['rss_mib'] * 2**20 / r['tasks']:>8.0f} B")
    by_size = {r["tasks"]: r for r in rows}
    if 10000 in by_size and 100000 in by_size:
        growth = by_size[100000]["total"] / by_size[10000]["total"]
        print(f"growth 10k → 100k tasks: {growth:.2f}x (target ≤ 12x)")
    print("targets: parse/bare ≤ 1.5x, total/bare ≤ 2.5x, peak RSS at 100k ≤ 4 KB per task")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
