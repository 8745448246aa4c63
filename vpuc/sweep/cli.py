"""``vpuc sweep SPEC.toml [-o results.parquet] [--scheduler tcp://HOST:PORT] [--workers N]``."""

from __future__ import annotations

import sys
from pathlib import Path

from vpuc.diagnostics import UsageError


def add_sweep_parser(sub) -> None:
    sw = sub.add_parser(
        "sweep", help="run a design-space sweep (architectures x models x options) on Dask",
        description="Run every point of SPEC (models x sampled parameters over the "
                    "architecture's structure, its timing model and compile options) on Dask "
                    "and stream the rows into a Parquet result; points already in the result "
                    "are skipped (docs/sweep.md).")
    sw.add_argument("spec", metavar="SPEC.toml", help="the sweep spec")
    sw.add_argument("-o", "--output", metavar="RESULTS",
                    help="the result directory of Parquet part files (default: SPEC with "
                         ".parquet)")
    where = sw.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                       help="run on this existing Dask cluster (default: a local cluster)")
    where.add_argument("--in-process", action="store_true",
                       help="run the points one by one in this process, without Dask")
    sw.add_argument("--workers", type=int, metavar="N",
                    help="workers of the local cluster (default: one per core)")
    sw.add_argument("--cache", metavar="DIR",
                    help="where compiled blobs are cached (default: RESULTS.cache)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(handler=cmd_sweep)


def cmd_sweep(args) -> int:
    from vpuc.sweep.engine import run_sweep
    from vpuc.sweep.spec import load_spec
    if args.workers is not None and (args.workers < 1 or args.scheduler or args.in_process):
        raise UsageError("--workers takes a positive number and applies to the local cluster "
                         "only")
    spec = load_spec(args.spec)
    output = Path(args.output) if args.output else Path(args.spec).with_suffix(".parquet")
    stats = run_sweep(spec, output, scheduler=args.scheduler, workers=args.workers,
                      in_process=args.in_process, cache_dir=args.cache,
                      progress=None if args.no_progress else sys.stderr)
    print(f"{output}: {stats.computed} points run ({stats.failed} with errors), "
          f"{stats.skipped} already there, {stats.total} in the spec; "
          f"{stats.seconds:.1f} s, {stats.points_per_second:.2f} points/s")
    return 0
