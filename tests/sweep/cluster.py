"""A real Dask cluster for the sweep tests: ``dask scheduler`` and ``dask worker`` processes
on 127.0.0.1, started and stopped by id (each in its own session, so its children go too)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DASK = Path(sys.executable).parent / "dask"
QUIET = {"DASK_LOGGING__DISTRIBUTED": "error"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([str(DASK), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **QUIET})


def start_scheduler() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = start(["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"])
    return proc, f"tcp://127.0.0.1:{port}"


def start_worker(address: str, name: str, nanny: bool = True) -> subprocess.Popen:
    return start(["worker", address, "--nthreads", "1", "--name", name, "--no-dashboard",
                  "--host", "127.0.0.1", *([] if nanny else ["--no-nanny"])])


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process's session (it started one), SIGKILL what is left after 10 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


def wait_for_workers(address: str, names: set[str], timeout: float = 60.0) -> dict[str, str]:
    """Worker name -> address, once every worker in ``names`` is connected."""
    from dask.distributed import Client
    with Client(address, timeout="30s") as client:
        deadline = time.monotonic() + timeout
        while True:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            by_name = {str(w["name"]): addr for addr, w in workers.items()}
            if names <= set(by_name):
                return by_name
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers {names - set(by_name)} never joined {address}")
            time.sleep(0.2)
