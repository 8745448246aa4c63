"""The sweep tests' wait for the workers of a real Dask cluster to join (its ``dask
scheduler`` and ``dask worker`` processes: ``vpuc.sweep.dask_processes``)."""

from __future__ import annotations

import time



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
