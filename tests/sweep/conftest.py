"""The sweep tests' cluster: $VPUC_DASK_SCHEDULER when .ci/run started one, else a
scheduler and two workers of our own on 127.0.0.1 for this session, stopped after."""

from __future__ import annotations

import os

import pytest

from tests.sweep.cluster import wait_for_workers
from vpuc.sweep.dask_processes import start_scheduler, start_worker, stop_session


@pytest.fixture(scope="session")
def dask_scheduler():
    given = os.environ.get("VPUC_DASK_SCHEDULER")
    if given:
        yield given
        return
    scheduler, address = start_scheduler()
    workers = []
    try:
        workers = [start_worker(address, f"vpuc-test-{i}") for i in range(2)]
        wait_for_workers(address, {"vpuc-test-0", "vpuc-test-1"})
        yield address
    finally:
        for proc in workers + [scheduler]:
            stop_session(proc)
