"""The sweep engine: the points a result lacks, run on Dask, rows streamed into Parquet.

Local by default: a ``LocalCluster`` with one single-threaded worker process per
core (the simulator is pure Python, so processes, not threads, run points at once).
The points of one model x structure x compile options run in tasks of at most
``CHUNK_POINTS`` points; their blob is compiled once however many timing settings
use it: inside the task when one task holds them all, else in a compile task of its
own that their tasks depend on.  Fewer, larger tasks leave the scheduler less to
do between points and no blob to fetch from another worker.
``scheduler="tcp://HOST:PORT"`` runs the same points on an existing cluster whose
workers see the same files (models, the cache directory).  vpuc schedules
nothing itself: Dask resubmits the points of a worker that dies to the others, and
``as_completed`` hands each task's rows over once; ``ResultWriter`` keeps a row out
if its point is already recorded.  ``in_process=True`` runs the points one after
another in this process (the reference the distributed run is compared with).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from vpuc.diagnostics import VpucError
from vpuc.sweep.points import points_of
from vpuc.sweep.results import ResultWriter
from vpuc.sweep.spec import SweepSpec
from vpuc.sweep.work import compile_key, compile_task, error_row, run_point, run_points


@dataclass
class SweepStats:
    total: int = 0           # points the spec names
    skipped: int = 0         # already in the result
    computed: int = 0        # run now
    failed: int = 0          # of those, with an error recorded
    seconds: float = 0.0

    @property
    def points_per_second(self) -> float:
        return self.computed / self.seconds if self.seconds else 0.0


class ProgressBar:
    """``[#####.....] 12/32 points, 1 failed, 3.1/s`` on a terminal, redrawn in place;
    elsewhere (a log, CI) one line per tenth of the work, so logs stay short."""

    WIDTH = 30

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total, self.stream, self.done, self.failed = total, stream, 0, 0
        self.started = time.perf_counter()
        self.tty = bool(stream) and hasattr(stream, "isatty") and stream.isatty()
        self.shown_tenth = -1

    def step(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        if self.stream is None:
            return
        tenth = self.done * 10 // max(self.total, 1)
        if self.tty or tenth != self.shown_tenth or self.done == self.total:
            self.shown_tenth = tenth
            self.stream.write(("\r" if self.tty else "") + self.line()
                              + ("" if self.tty and self.done < self.total else "\n"))
            self.stream.flush()

    def line(self) -> str:
        filled = self.WIDTH * self.done // max(self.total, 1)
        rate = self.done / max(time.perf_counter() - self.started, 1e-9)
        return (f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} "
                f"points, {self.failed} failed, {rate:.1f}/s")


CHUNK_POINTS = 4            # points per task: few tasks, yet rows still stream and balance
CONNECT_TIMEOUT = "10s"     # to reach a --scheduler; Dask retries the connection until then


def default_cache_dir(output: Path) -> Path:
    return output.with_name(output.name + ".cache")


def _client(scheduler: str | None, workers: int | None):
    """A Dask client of the cluster at ``scheduler``, or of a new LocalCluster."""
    from dask.distributed import Client, LocalCluster
    if scheduler:
        try:
            return Client(scheduler, timeout=CONNECT_TIMEOUT), None
        except (OSError, TimeoutError) as exc:
            raise VpucError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                           processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    return Client(cluster), cluster


def run_sweep(spec: SweepSpec, output: str | Path, *, scheduler: str | None = None,
              workers: int | None = None, in_process: bool = False,
              cache_dir: str | Path | None = None, progress: TextIO | None = sys.stderr,
              on_row: Callable[[dict], None] | None = None, flush_rows: int = 8,
              flush_seconds: float = 2.0) -> SweepStats:
    """Run every point of ``spec`` not yet in ``output`` and append their rows to it."""
    output = Path(output)
    cache = str(Path(cache_dir) if cache_dir else default_cache_dir(output))
    writer = ResultWriter(output, spec)
    points = points_of(spec)
    todo = [p for p in points if p.id not in writer.done]
    stats = SweepStats(total=len(points), skipped=len(points) - len(todo))
    bar = ProgressBar(len(todo), progress)
    started = last_flush = time.perf_counter()

    def record(row: dict) -> None:
        nonlocal last_flush
        if writer.add(row):
            stats.computed += 1
            stats.failed += row["error"] is not None
            bar.step(row["error"] is not None)
        if len(writer.pending) >= flush_rows or time.perf_counter() - last_flush > flush_seconds:
            writer.flush()
            last_flush = time.perf_counter()
        if on_row is not None:
            on_row(row)

    try:
        if in_process or not todo:
            for p in todo:
                record(run_point(p, cache))
        else:
            _run_on_dask(todo, cache, scheduler, workers, record)
    finally:
        writer.flush()
        stats.seconds = time.perf_counter() - started
    return stats


def _chunks_by_compile(todo) -> list[tuple[str | None, list[list]]]:
    """``todo`` grouped by ``compile_key`` (in first-seen order), each group cut into
    chunks of at most ``CHUNK_POINTS`` points."""
    groups: dict[str | None, list] = {}
    for p in todo:
        groups.setdefault(compile_key(p), []).append(p)
    return [(key, [ps[i:i + CHUNK_POINTS] for i in range(0, len(ps), CHUNK_POINTS)])
            for key, ps in groups.items()]


def _run_on_dask(todo, cache: str, scheduler: str | None, workers: int | None,
                 record: Callable[[dict], None]) -> None:
    from dask.distributed import as_completed
    client, cluster = _client(scheduler, workers)
    try:
        run = uuid.uuid4().hex[:8]     # fresh keys: a long-lived cluster holds no stale rows
        compiles, futures, chunk_of = [], [], {}
        for key, chunks in _chunks_by_compile(todo):
            # Several chunks of one compile wait for one compile task instead of
            # compiling the same blob on several workers at once.
            compiled = None
            if key is not None and len(chunks) > 1:
                compiled = client.submit(compile_task, chunks[0][0], cache, pure=False,
                                         key=f"vpuc-compile-{key[:24]}-{run}")
            for chunk in chunks:
                future = client.submit(run_points, chunk, cache, compiled, pure=False,
                                       key=f"vpuc-points-{chunk[0].id}-{run}")
                futures.append(future)
                chunk_of[future.key] = chunk
            if compiled is not None:
                compiles.append(compiled)
        # On this client's event loop: ``as_completed`` otherwise waits on the loop of
        # the caller's current client (``with Client(...)``), which nothing wakes when
        # our futures finish, so rows came in only on that loop's timers (seconds late).
        for future in as_completed(futures, loop=client.loop):
            try:
                rows = future.result()
            except Exception as exc:   # e.g. KilledWorker: its workers kept dying on it
                rows = [error_row(p, "worker", f"{type(exc).__name__}: {exc}")
                        for p in chunk_of[future.key]]
            for row in rows:
                record(row)
            future.release()
        for future in compiles:
            future.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
