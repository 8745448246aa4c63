"""``stop_session``: SIGTERM to the process's whole session, SIGKILL after the grace time,
a process already gone is no error (the cluster fixtures and the benchmark rely on it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from vpuc.sweep.dask_processes import stop_session

# A parent (ignoring SIGTERM if told to) and a child in its session; the parent says the
# child's pid on stdout, then both wait to be stopped.
TREE = """
import signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         stdout=subprocess.DEVNULL)
print(child.pid, flush=True)
time.sleep(600)
"""


def _start(mode: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", TREE, mode], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    proc.stdout.close()
    return proc, child


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"    # a zombie is gone too
    except FileNotFoundError:
        return True


def test_sigterm_stops_the_session_with_its_children():
    proc, child = _start("obey")
    stop_session(proc, grace=30)
    assert proc.returncode == -signal.SIGTERM
    assert _wait_gone(child)


def test_sigkill_after_the_grace_time():
    proc, child = _start("ignore")
    stop_session(proc, grace=0.5)
    assert proc.returncode == -signal.SIGKILL
    assert _wait_gone(child)


def test_a_process_already_gone_is_no_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    stop_session(proc)
    assert proc.returncode == 0


def _wait_gone(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
