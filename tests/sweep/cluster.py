"""The sweep tests' shared pieces: the wait for the workers of a real Dask cluster to
join (its ``dask scheduler`` and ``dask worker`` processes: ``vpuc.sweep.dask_processes``),
and the two-model spec they sweep."""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def two_model_spec(parameters: str) -> str:
    """A sweep spec over graph_conv.vir and fused_chain.vir with the cost proxy
    ``cmx_bytes * tiles``; ``parameters``: the body of its [parameters] table."""
    return f"""
[sweep]
cost = "cmx_bytes * tiles"

[[models]]
path = "{ROOT / 'examples' / 'graph_conv.vir'}"

[[models]]
path = "{ROOT / 'examples' / 'fused_chain.vir'}"

[parameters]
{parameters.strip()}
"""
