"""Sweeps that run: on a real Dask cluster with a worker killed mid-sweep, on the local
default cluster with no flags, in process; reruns skip what is there; a failing point
records its error and the sweep goes on.

The reference is the serial in-process run of the same spec: the simulator is
deterministic, so every row of a distributed run equals its row there exactly.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.sweep.cluster import two_model_spec, wait_for_workers
from vpuc.sweep.dask_processes import start_worker, stop_session
from vpuc.sweep.engine import default_cache_dir, run_sweep
from vpuc.sweep.results import read_results
from vpuc.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = two_model_spec("""
tiles = [1, 2]
dma_channels = [1, 2]
ddr_bandwidth_mbps = { min = 15600, max = 31200, steps = 2 }
""")


def rows_by_id(path: Path) -> dict[str, dict]:
    rows = read_results(path).to_pylist()
    by_id = {r["point_id"]: r for r in rows}
    assert len(by_id) == len(rows), "a point is recorded twice"
    return by_id


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "two_models.toml"
    path.write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def serial_run(spec_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serial") / "serial.parquet"
    stats = run_sweep(load_spec(spec_file), out, in_process=True, progress=None)
    assert stats.computed == stats.total == 16 and stats.failed == 0
    return out


@pytest.fixture(scope="module")
def serial(serial_run) -> dict[str, dict]:
    return rows_by_id(serial_run)


def test_serial_reference_is_complete(serial):
    assert len(serial) == 16 and {r["model"] for r in serial.values()} == {"graph_conv",
                                                                            "fused_chain"}
    assert all(r["error"] is None and r["cycles"] > 0 for r in serial.values())
    # one DMA channel costs cycles: the channel sweep is not a no-op
    for model in ("graph_conv", "fused_chain"):
        one = min(r["cycles"] for r in serial.values() if r["model"] == model
                  and r["dma_channels"] == 1 and r["tiles"] == 2)
        two = min(r["cycles"] for r in serial.values() if r["model"] == model
                  and r["dma_channels"] == 2 and r["tiles"] == 2)
        assert one > two


def test_scheduler_sweep_survives_a_killed_worker(dask_scheduler, spec_file, serial, tmp_path):
    from dask.distributed import Client
    extra = start_worker(dask_scheduler, "vpuc-test-victim", nanny=False)
    killed: list[int] = []
    done = threading.Event()

    def kill_when_busy(victim: str) -> None:
        with Client(dask_scheduler, timeout="30s") as watcher:
            while not done.is_set():
                busy = watcher.processing(workers=[victim]).get(victim, ())
                if busy:           # it holds points: they must be run again elsewhere
                    os.kill(extra.pid, signal.SIGKILL)
                    killed.append(len(busy))
                    return
                time.sleep(0.01)

    try:
        victim = wait_for_workers(dask_scheduler, {"vpuc-test-victim"})["vpuc-test-victim"]
        watch = threading.Thread(target=kill_when_busy, args=(victim,))
        watch.start()
        out = tmp_path / "dask.parquet"
        try:
            stats = run_sweep(load_spec(spec_file), out, scheduler=dask_scheduler,
                              progress=None, flush_rows=2)
        finally:
            done.set()
            watch.join()
        assert killed, "the victim worker never held a point while the sweep ran"
        assert extra.wait(10) == -signal.SIGKILL
    finally:
        stop_session(extra)
    assert stats.computed == 16 and stats.failed == 0
    assert rows_by_id(out) == serial



def test_scheduler_sweep_inside_another_clients_context(dask_scheduler, tmp_path):
    """A caller's own current Dask client (``with Client(...)``, here already closed, so
    its event loop has stopped) must not carry the sweep's results: the engine waits on
    its own client's loop.  It waited on the caller's before, where rows arrived only
    when that loop's timers woke it (a 2 to 5 s floor per sweep), or never."""
    import contextvars
    from dask.distributed import Client
    spec = tmp_path / "two_points.toml"
    spec.write_text(f"""
[[models]]
path = "{ROOT / 'examples' / 'fused_chain.vir'}"

[parameters]
ddr_bandwidth_mbps = [15600, 31200]
""")
    reference = run_sweep(load_spec(spec), tmp_path / "serial.parquet", in_process=True,
                          progress=None)
    assert reference.computed == 2 and reference.failed == 0
    out, finished = tmp_path / "dask.parquet", []
    with Client(dask_scheduler, timeout="30s") as outer:
        outer.close()
        caller = contextvars.copy_context()     # the closed client is current in it
    # in a daemon thread, so a sweep that never finishes fails the test, not the session
    sweep = threading.Thread(target=lambda: finished.append(caller.run(
        run_sweep, load_spec(spec), out, scheduler=dask_scheduler, progress=None)),
        daemon=True)
    sweep.start()
    sweep.join(timeout=240)
    assert finished, "the sweep never finished: it waited on the caller's closed client"
    assert finished[0].computed == 2 and finished[0].failed == 0
    assert rows_by_id(out) == rows_by_id(tmp_path / "serial.parquet")

def test_local_default_needs_no_flags(spec_file, serial_run, serial, tmp_path):
    spec = tmp_path / "local.toml"
    spec.write_text(spec_file.read_text())
    # the serial run's blobs where the default cache is: points only simulate (CI time),
    # and cached blobs must give the rows fresh compiles gave
    shutil.copytree(default_cache_dir(serial_run), tmp_path / "local.parquet.cache")
    done = subprocess.run([sys.executable, "-m", "vpuc", "sweep", spec.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "16 points run (0 with errors), 0 already there" in done.stdout
    assert "16/16 points" in done.stderr                   # the progress bar's last line
    assert rows_by_id(tmp_path / "local.parquet") == serial
    assert list((tmp_path / "local.parquet.cache").glob("*.blob"))


def test_rerun_skips_the_points_already_there(spec_file, serial_run, serial, tmp_path):
    out = tmp_path / "rerun.parquet"
    spec = load_spec(spec_file)
    cache = default_cache_dir(serial_run)
    first = run_sweep(spec, out, in_process=True, progress=None, cache_dir=cache)
    again = run_sweep(spec, out, in_process=True, progress=None, cache_dir=cache)
    assert (first.computed, first.skipped) == (16, 0)
    assert (again.computed, again.skipped) == (0, 16)
    wider = tmp_path / "wider.toml"
    wider.write_text(spec_file.read_text().replace("tiles = [1, 2]", "tiles = [1, 2, 3]"))
    more = run_sweep(load_spec(wider), out, in_process=True, progress=None, cache_dir=cache)
    assert (more.computed, more.skipped) == (8, 16)
    rows = rows_by_id(out)
    assert len(rows) == 24 and {k: rows[k] for k in serial} == serial


def test_a_failing_point_records_its_error_and_the_sweep_goes_on(tmp_path):
    spec = tmp_path / "fail.toml"
    spec.write_text(f"""
[[models]]
path = "{ROOT / 'examples' / 'graph_conv.vir'}"

[parameters]
cmx_bytes = [8192, 2097152]
""")
    out = tmp_path / "fail.parquet"
    stats = run_sweep(load_spec(spec), out, in_process=True, progress=None)
    assert (stats.computed, stats.failed) == (2, 1)
    small, full = sorted(rows_by_id(out).values(), key=lambda r: r["cmx_bytes"])
    assert small["cycles"] is None and small["error_stage"] == "compile"
    # the default CMX budget is half the tile's CMX: the convolution's blocks do not fit
    # 4 KiB, a located error at the layer
    assert re.search(r"graph_conv\.vir:\d+:\d+: error: .*%conv does not fit a tile's CMX: "
                     r".* over a budget of 4096", small["error"]), small["error"]
    assert full["error"] is None and full["cycles"] > 0


def test_a_sweep_over_the_cmx_budget_cuts_layers_into_blocks(tmp_path):
    """The tiling limit is a compile option: each budget is its own compile; a smaller one
    cuts the convolution into more blocks (more DPU tasks), and one too small for the layer
    is that point's located error while the sweep goes on."""
    spec = tmp_path / "budget.toml"
    spec.write_text(f"""
[[models]]
path = "{ROOT / 'examples' / 'graph_conv.vir'}"

[parameters]
cmx_budget = [4096, 8000, 65536, 1048576]
""")
    out = tmp_path / "budget.parquet"
    stats = run_sweep(load_spec(spec), out, in_process=True, progress=None)
    assert (stats.computed, stats.failed) == (4, 1)
    rows = sorted(rows_by_id(out).values(), key=lambda r: r["cmx_budget"])
    assert rows[0]["cycles"] is None and rows[0]["error_stage"] == "compile"
    assert re.search(r"graph_conv\.vir:\d+:\d+: error: .*%conv does not fit a tile's CMX: "
                     r".* over a budget of 4096", rows[0]["error"]), rows[0]["error"]
    small, medium, default = rows[1:]
    assert all(r["error"] is None for r in rows[1:])
    assert small["dpu_task_count"] > medium["dpu_task_count"]
    # each point's cycles are its own compile's (the budget changes the program)
    from vpuc import api
    for row in (small, medium):
        program = api.compile(ROOT / "examples" / "graph_conv.vir", cmx_budget=row["cmx_budget"])
        assert row["cycles"] == api.simulate(program, timing_only=True, races=False).cycles
    # 1 MiB is today's default: the same program as a compile without the option
    from vpuc import api
    program = api.compile(ROOT / "examples" / "graph_conv.vir")
    assert default["dpu_task_count"] == sum(type(t).__name__ == "DpuTask"
                                            for tl in program.module.task_lists
                                            for t in tl.tasks)
    assert default["cycles"] == api.simulate(program, timing_only=True, races=False).cycles


def test_an_unreachable_scheduler_is_an_error(spec_file, tmp_path, capsys, monkeypatch):
    from vpuc.sweep.dask_processes import free_port
    from vpuc.cli import main
    monkeypatch.setattr("vpuc.sweep.engine.CONNECT_TIMEOUT", "1s")
    code = main(["sweep", str(spec_file), "-o", str(tmp_path / "out"), "--scheduler",
                 f"tcp://127.0.0.1:{free_port()}", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot reach the Dask scheduler" in err and "Traceback" not in err
