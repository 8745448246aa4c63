"""One sweep point: compile (or reuse the cached blob), simulate, measure; errors as data.

``compile_task`` (once per model, structure and compile options), ``run_point``
(once per point) and ``run_points`` (a few points of one compile, the compile
included when it has no task of its own) are what Dask workers run, so they take and
return plain data and never raise for a bad point: a compile or simulation error becomes the row's
``error`` (with ``error_stage``), the other points go on.

Blobs are cached as their bytes in ``cache_dir``, named by a content hash of the
model file, its input shapes, the point's *structure* and compile options and the
vpuc version: points that differ only in timing parameters compile once (the
compiler's cost model then reads the shipped timing file).  With the spec's
``compile_timing`` the compiler reads each point's timing model instead, and the
timing parameters join the key.  Every
point simulates the blob read back from its bytes (``read_blob`` checked against
the point's structure), so a cache hit and a fresh compile run the same program.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import DpuTask
from vpuc.sweep.params import (compile_options, sim_arch_of, structure_of, timing_of,
                               timing_values)
from vpuc.sweep.points import Point, digest_of

BLOB_SUFFIXES = (".blob", ".elf")


def blob_key(point: Point, structure, options: dict) -> str:
    from vpuc import __version__
    what = {"model": digest_of(Path(point.path)), "shapes": list(point.input_shapes),
            "structure": dataclasses.asdict(structure), "options": options,
            "vpuc": __version__}
    if point.compile_timing:     # the lowering's choices follow the point's timing too
        what["timing"] = timing_values(point.values)
    key = json.dumps(what, sort_keys=True, default=list)
    return hashlib.sha256(key.encode()).hexdigest()


def compiled_blob(point: Point, structure, cache_dir: str | None) -> bytes:
    """The blob bytes of ``point``'s model for ``structure`` (from the cache when there)."""
    from vpuc import api
    from vpuc.fileio import write_atomically
    options = compile_options(point.values)
    if point.path.endswith(BLOB_SUFFIXES):
        if options:
            raise VpucError(f"{point.path} is a blob, already compiled; compile options "
                            f"({', '.join(options)}) do not apply to it")
        return Path(point.path).read_bytes()
    cached = Path(cache_dir) / f"{blob_key(point, structure, options)}.blob" if cache_dir else None
    if cached is not None and cached.is_file():
        return cached.read_bytes()
    fmt = options.pop("format", "fb")
    if point.compile_timing:
        options["timing"] = timing_of(point.arch, point.values)
    program = api.compile(point.path, structure, fmt, report=api.CompileReport(),
                          input_shapes=dict(point.input_shapes) or None, **options)
    data = api.write_blob(program, fmt)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(cached, data)
    return data


def _busy_percent(plan, timeline, total: float) -> dict[str, float]:
    """Busy time of each engine kind over all its tracks, percent of tracks x total."""
    from runtime_sim.report import track_stats
    busy: dict[str, list[float]] = {}
    for s in track_stats(plan, timeline):
        busy.setdefault(s.name.rstrip("0123456789."), []).append(s.busy)
    return {kind: (100.0 * sum(b) / (len(b) * total) if total else 0.0)
            for kind, b in busy.items()}


def peak_cmx_bytes(module) -> int:
    """The highest CMX byte any placed buffer reaches, over the tiles."""
    from vpuc.ir.module import BufferKind
    ends = [b.offset + b.type.nbytes for b in module.buffers
            if b.kind is BufferKind.CMX and b.offset is not None]
    return max(ends, default=0)


def measure(program, run, blob: bytes) -> dict:
    result = run.result
    plan, timeline, total = result.plan, result.timeline, result.cycles
    busy = _busy_percent(plan, timeline, total)
    transfers = [t for t in plan.transfers if t is not None]
    return {"cycles": float(total), "time_us": float(result.arch.us(total)),
            "dpu_busy_percent": busy.get("DPU", 0.0),
            "act_shave_busy_percent": busy.get("SHAVE", 0.0),
            "dma_busy_percent": busy.get("DMA", 0.0),
            "ddr_bytes": int(sum(t.ddr_bytes for t in transfers)),
            "dma_bytes": int(sum(plan.nbytes)),
            "peak_cmx_bytes": peak_cmx_bytes(program.module),
            "barrier_count": len(program.module.barriers),
            "blob_bytes": len(blob),
            # one per block of a DPU layer: how a tiling limit (cmx_budget) cut the layers
            "dpu_task_count": sum(1 for tl in program.module.task_lists for t in tl.tasks
                                  if isinstance(t, DpuTask))}


def error_row(point: Point, stage: str | None, error: str | None) -> dict:
    """``point``'s row without metrics: its identity, parameters, cost and error."""
    return {"point_id": point.id, "model": point.model, **point.values, "cost": point.cost,
            "error": error, "error_stage": stage}


def compile_key(point: Point) -> str | None:
    """What ``point``'s compile depends on (points with one key share one compile); None
    for a blob model, which is not compiled."""
    if point.path.endswith(BLOB_SUFFIXES):
        return None
    return blob_key(point, structure_of(point.arch, point.values),
                    compile_options(point.values))


def compile_task(point: Point, cache_dir: str | None = None) -> tuple[bytes | None, str | None]:
    """(blob bytes, None), or (None, the compile error): the shared compile of the points
    whose ``compile_key`` is ``point``'s, as its own Dask task."""
    try:
        return compiled_blob(point, structure_of(point.arch, point.values), cache_dir), None
    except VpucError as exc:
        return None, exc.render()
    except Exception as exc:   # a bug in vpuc: recorded on every point that needs this blob
        return None, f"internal error: {type(exc).__name__}: {exc}"


def run_point(point: Point, cache_dir: str | None = None,
              compiled: tuple[bytes | None, str | None] | None = None) -> dict:
    """The result row of ``point``: its identity, parameters, cost, metrics and error
    (``compiled``: what ``compile_task`` gave for it, else it compiles or reads the cache)."""
    from vpuc import api
    from vpuc.blob import read_blob
    row = error_row(point, None, None)
    stage = "compile"
    try:
        structure = structure_of(point.arch, point.values)
        if compiled is not None and compiled[1] is not None:
            row["error"], row["error_stage"] = compiled[1], stage
            return row
        blob = compiled[0] if compiled is not None else compiled_blob(point, structure,
                                                                       cache_dir)
        stage = "simulate"
        program = read_blob(blob, Path(point.path).name, arch=structure)
        sim_arch = sim_arch_of(point.arch, structure, point.values)
        run = api.simulate(program, arch=sim_arch, timing_only=not point.numerics,
                           races=False, source=point.path)
        row.update(measure(program, run, blob))
    except VpucError as exc:
        row["error"], row["error_stage"] = exc.render(), stage
    except Exception as exc:   # a bug in vpuc at this point: recorded, the sweep goes on
        row["error"], row["error_stage"] = f"internal error: {type(exc).__name__}: {exc}", stage
    return row


def run_points(points: list[Point], cache_dir: str | None = None,
               compiled: tuple[bytes | None, str | None] | None = None) -> list[dict]:
    """The rows of ``points``, which share one ``compile_key``: compiled once here unless
    ``compiled`` (the result of their ``compile_task``) is given."""
    if compiled is None and compile_key(points[0]) is not None:
        compiled = compile_task(points[0], cache_dir)
    return [run_point(p, cache_dir, compiled) for p in points]
