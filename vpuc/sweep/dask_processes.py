"""``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, started and stopped by id.

What ``--scheduler`` sweeps run on, for the sweep tests and ``bench/sweep_bench.py``.
Each process starts a session of its own (``start_new_session``), so stopping it
signals its whole process group: a worker's nanny and the worker it spawned go
together, and nothing else on the machine is touched.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

DASK = Path(sys.executable).parent / "dask"
QUIET = {"DASK_LOGGING__DISTRIBUTED": "error"}
STOP_GRACE_SECONDS = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dask(args: list[str]) -> subprocess.Popen:
    """``dask ARGS...`` in a session of its own, its output discarded."""
    return subprocess.Popen([str(DASK), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **QUIET})


def start_scheduler() -> tuple[subprocess.Popen, str]:
    """A scheduler on a free port of 127.0.0.1, and its address."""
    port = free_port()
    proc = start_dask(["scheduler", "--host", "127.0.0.1", "--port", str(port),
                       "--no-dashboard"])
    return proc, f"tcp://127.0.0.1:{port}"


def start_worker(address: str, name: str | None = None, nanny: bool = True) -> subprocess.Popen:
    """A single-threaded worker (the simulator is pure Python: one core per process)."""
    return start_dask(["worker", address, "--nthreads", "1", "--no-dashboard",
                       "--host", "127.0.0.1", *(["--name", name] if name else []),
                       *([] if nanny else ["--no-nanny"])])


def stop_session(proc: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM ``proc``'s session (it started one), SIGKILL it if still there after
    ``grace`` seconds; reaps ``proc``.  A process already gone is not an error."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass                    # it exited between the timeout and the kill
        proc.wait()
    except ProcessLookupError:
        proc.wait()
