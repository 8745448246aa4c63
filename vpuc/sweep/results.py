"""Sweep results: a Parquet dataset (a directory of part files) written as points finish.

``results.parquet/`` holds ``part-NNNNNN.parquet`` files; each is one batch of
finished points, written to a hidden temporary name and renamed into place, so a
sweep stopped at any moment leaves only whole parts (pyarrow's dataset reader
skips names starting with ``.``).  A rerun reads the ``point_id`` column back and
runs only the points missing; ``ResultWriter`` drops a row whose id is already
there, so no point is recorded twice.  The schema's metadata keeps what the report
page needs from the spec (the cost proxy, the parameter names, the metrics).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vpuc.diagnostics import VpucError
from vpuc.sweep.params import PARAMS
from vpuc.sweep.spec import SweepSpec

PART = re.compile(r"^part-(\d{6})\.parquet$")
INT_METRICS = ("ddr_bytes", "dma_bytes", "peak_cmx_bytes", "barrier_count", "blob_bytes",
               "dpu_task_count")
META_KEY = b"vpuc.sweep"


def schema_of(spec: SweepSpec) -> pa.Schema:
    arrow = {int: pa.int64(), float: pa.float64(), str: pa.string()}
    fields = [pa.field("point_id", pa.string(), nullable=False),
              pa.field("model", pa.string(), nullable=False)]
    fields += [pa.field(a.name, arrow[PARAMS[a.name].type]) for a in spec.axes]
    fields.append(pa.field("cost", pa.float64()))
    fields += [pa.field(m, pa.int64() if m in INT_METRICS else pa.float64())
               for m in spec.metrics]
    fields += [pa.field("error", pa.string()), pa.field("error_stage", pa.string())]
    meta = {"cost": spec.cost, "parameters": [a.name for a in spec.axes],
            "metrics": list(spec.metrics), "spec": str(spec.path), "arch": spec.arch,
            "compile_timing": spec.compile_timing}
    return pa.schema(fields, metadata={META_KEY: json.dumps(meta).encode()})


def parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if PART.match(p.name)) \
        if directory.is_dir() else []


def read_results(path: str | Path) -> pa.Table:
    """Every row of a sweep result (a directory of part files), in part order."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise VpucError(f"{path}: not a sweep result; expected the directory `vpuc sweep -o` "
                        "writes")
    files = parts(path)
    if not files:
        raise VpucError(f"{path}: no sweep results (no part-*.parquet files)")
    try:
        tables = [pq.read_table(f) for f in files]
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowException, OSError) as exc:
        raise VpucError(f"{path}: cannot read the sweep results ({exc})") from None


def sweep_metadata(table: pa.Table) -> dict:
    raw = (table.schema.metadata or {}).get(META_KEY)
    return json.loads(raw) if raw else {}


class ResultWriter:
    """Appends rows to a result directory as part files; never writes an id twice."""

    def __init__(self, path: str | Path, spec: SweepSpec) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise VpucError(f"{self.path}: exists and is not a sweep result directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self.schema = schema_of(spec)
        existing = parts(self.path)
        self.next_part = int(PART.match(existing[-1].name).group(1)) + 1 if existing else 0
        self.done: set[str] = set()
        for f in existing:
            try:
                self.done.update(pq.read_table(f, columns=["point_id"]).column(0).to_pylist())
            except (pa.ArrowException, OSError) as exc:
                raise VpucError(f"{f}: cannot read this part of the sweep results ({exc}); "
                                "remove it to rerun its points") from None
        self.pending: list[dict] = []
        self.written = 0

    def add(self, row: dict) -> bool:
        """Queue ``row`` unless its point is already recorded; whether it was new."""
        if row["point_id"] in self.done:
            return False
        self.done.add(row["point_id"])
        self.pending.append(row)
        return True

    def flush(self) -> None:
        """Write the queued rows as one new part file (atomically)."""
        if not self.pending:
            return
        columns = {f.name: [r.get(f.name) for r in self.pending] for f in self.schema}
        table = pa.Table.from_pydict(columns, schema=self.schema)
        name = f"part-{self.next_part:06d}.parquet"
        temp = self.path / f".{name}.{os.getpid()}.tmp"
        pq.write_table(table, temp)
        os.replace(temp, self.path / name)
        self.next_part += 1
        self.written += len(self.pending)
        self.pending = []
