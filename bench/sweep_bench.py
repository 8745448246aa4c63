"""Sweep benchmark: points per second of ``vpuc sweep`` with 1 and 2 Dask workers.

For each worker count it starts a ``dask scheduler`` and that many single-threaded
``dask worker`` processes on 127.0.0.1 (what ``--scheduler`` runs on; each process
in a session of its own, as separately started workers are), warms every worker up
(imports, one compile), then runs the spec's points through ``run_sweep`` with a
fresh result and a fresh blob cache (so every structure compiles), several times.
It prints the median points/s of each count and their ratio; the target is >= 1.7
with 2 workers on a 2-core machine.  Beside them, what explains a ratio: how much of
the wall time the workers spent inside tasks (the engine's overhead between points),
how much of it they were on a CPU (other processes competing for the cores), and CPU
milliseconds per point (work done twice would raise it with 2 workers), and the CPU
milliseconds per point of the scheduler and of the client (this process), which
compete with the workers for the cores.  Cluster start-up is not timed: it is paid once
per sweep, not per point.

``--local`` uses a LocalCluster instead (the default of ``vpuc sweep``): its workers
share the session of the process that starts them, and Linux's autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled``) gives one session one share of the
CPU however many processes it has, so on a machine busy with other sessions the
second worker adds little; on an idle machine both modes get both cores.

    python bench/sweep_bench.py [--spec examples/sweep_tiles.toml] [--repeat 3] [--local] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vpuc.sweep.dask_processes import start_scheduler, start_worker, stop_session  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.7
OVERHEAD = "_overhead_cpu_ms_per_point"    # the scheduler's and the client's CPU per point


def _warm(model: str) -> int:
    """Runs on each worker: the imports and one compile every point needs anyway."""
    from vpuc import api
    import vpuc.sweep.work  # noqa: F401
    return len(api.write_blob(api.compile(model, report=api.CompileReport())))


@contextmanager
def process_cluster(workers: int):
    """A scheduler and ``workers`` worker processes, each in its own session; stopped by id."""
    from dask.distributed import Client
    scheduler, address = start_scheduler()
    procs = [scheduler]
    try:
        procs += [start_worker(address) for _ in range(workers)]
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
            yield address, client, {"scheduler": scheduler.pid, "client": os.getpid()}
    finally:
        for p in reversed(procs):      # workers first: none waits on a scheduler gone
            stop_session(p)


@contextmanager
def local_cluster(workers: int):
    from dask.distributed import Client, LocalCluster
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        yield cluster.scheduler_address, client, {"scheduler+client": os.getpid()}


def _cpu_seconds() -> float:
    """Runs on each worker: CPU time its process has had (user + system)."""
    import psutil
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _process_cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    import psutil
    return {name: sum(psutil.Process(pid).cpu_times()[:2]) for name, pid in pids.items()}


def measure_runs(spec, workers: int, repeat: int, local: bool) -> list[dict]:
    """Per run: points/s; the workers' task occupancy (time inside tasks over workers x
    wall time: what the engine leaves idle between points shows as less than 1); their CPU
    share (CPU time over workers x wall time: other processes competing for the cores
    show as less than 1); their CPU milliseconds per point; and the CPU milliseconds per
    point of the scheduler and this (client) process, which compete with the workers."""
    from dask.distributed import get_task_stream
    from vpuc.sweep.engine import run_sweep
    runs = []
    with (local_cluster if local else process_cluster)(workers) as (address, client, pids):
        client.run(_warm, str(spec.models[0].path))
        client.get_task_stream()       # installs the scheduler's task-stream recorder
        for _ in range(repeat):
            cpu_before = client.run(_cpu_seconds)
            overhead_before = _process_cpu_seconds(pids)
            with tempfile.TemporaryDirectory() as tmp, \
                    get_task_stream(client=client) as stream:
                stats = run_sweep(spec, Path(tmp) / "bench.parquet", scheduler=address,
                                  cache_dir=Path(tmp) / "cache", progress=None)
            overhead = {name: cpu - overhead_before[name]
                        for name, cpu in _process_cpu_seconds(pids).items()}
            cpu = sum(client.run(_cpu_seconds).values()) - sum(cpu_before.values())
            assert stats.computed == stats.total and stats.failed == 0, stats
            in_tasks = sum(s["stop"] - s["start"] for task in stream.data
                           for s in task["startstops"] if s["action"] == "compute")
            wall = workers * stats.seconds
            runs.append({"points_per_s": stats.points_per_second,
                         "task_occupancy": in_tasks / wall, "cpu_share": cpu / wall,
                         "cpu_ms_per_point": 1000 * cpu / stats.computed,
                         **{f"{name}{OVERHEAD}": 1000 * cpu / stats.computed
                            for name, cpu in overhead.items()}})
    return runs


def _summary(runs: list[dict]) -> dict:
    return {"points_per_s": [round(r["points_per_s"], 3) for r in runs],
            **{f"median_{k}": round(statistics.median(r[k] for r in runs), 3)
               for k in runs[0]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(REPO / "examples" / "sweep_tiles.toml"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--local", action="store_true",
                        help="a LocalCluster (workers in this session) instead of processes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("distributed").setLevel(logging.CRITICAL)   # shutdown chatter
    from vpuc.sweep.points import points_of
    from vpuc.sweep.spec import load_spec
    spec = load_spec(args.spec)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    one = _summary(measure_runs(spec, 1, args.repeat, args.local))
    two = _summary(measure_runs(spec, 2, args.repeat, args.local))
    ratio = two["median_points_per_s"] / one["median_points_per_s"]
    result = {"points": len(points_of(spec)), "cluster": "local" if args.local else "processes",
              "one_worker": one, "two_workers": two,
              "ratio": round(ratio, 3), "target": TARGET, "cores": os.cpu_count(),
              "load_average_before": round(load_before, 2),
              "load_average_after": round(os.getloadavg()[0], 2),
              "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['points']} points, {args.repeat} runs each, {result['cluster']} "
              f"cluster, {result['cores']} cores, load average {result['load_average_before']} "
              f"before, {result['load_average_after']} after")
        for label, r in (("1 worker ", one), ("2 workers", two)):
            print(f"{label}: {r['median_points_per_s']:.2f} points/s (runs: "
                  f"{r['points_per_s']}); in tasks {r['median_task_occupancy']:.0%}, "
                  f"on a CPU {r['median_cpu_share']:.0%} of the time, "
                  f"{r['median_cpu_ms_per_point']:.0f} CPU ms/point; "
                  + ", ".join(f"{k[len('median_'):-len(OVERHEAD)]} {v:.1f}"
                              for k, v in r.items() if k.endswith(OVERHEAD))
                  + " CPU ms/point")
        print(f"ratio {ratio:.2f}x (target >= {TARGET}x): "
              f"{'met' if ratio >= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
