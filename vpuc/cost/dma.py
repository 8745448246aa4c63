"""The cost of one DMA transfer: latency by direction, rate by engine, permute and stride.

A transfer costs ``setup + bytes / rate`` NCE cycles; a DMA task adds the
runtime's dispatch before it (``dma_data_start``, ``dma_task_cycles``).  Mechanisms:

- ``setup``, the latency before data moves, by direction: the larger of the
  source's read latency and the destination's write latency (VPUNN
  ``DMATheoreticalCyclesLegacyLNL``: ``max(input_latency, output_latency)``).
  DDR reads and DDR writes have their own latency (fitted: a write is posted, so
  DDR -> CMX waits for the first read data, CMX -> DDR does not); CMX has VPUNN's
  ``cmxLatency``.
- ``rate``: the channel's engine (32 B per DMA cycle, VPUNN ``DMA_engine_B``),
  capped by the CMX port when a side is in CMX; a side in DDR also takes its
  share of the DDR bandwidth, which the simulator divides between the transfers
  that use it at the same moment (``runtime_sim/engines/dma.py``).
- ``permute``: a transfer that reorders dims moves one element per DMA cycle
  (VPUNN ``dma_theoretical_cost_provider.h``).
- ``strided``: a transfer whose contiguous runs are shorter than the engine's
  burst moves a whole burst per run (the descriptor walks run by run), so its
  bytes of work are ``runs * max(run, burst)`` (VPUNN ``dma_strided_math_cost_provider``
  charges per-plane strides the same way; the burst size is the engine width).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DmaParams:
    """The DMA part of the timing model, in NCE cycles and bytes per NCE cycle."""
    engine_bytes_per_cycle: float
    cmx_bytes_per_cycle: float
    permute_elements_per_cycle: float
    ddr_read_latency: float
    ddr_write_latency: float
    cmx_latency: float
    burst_bytes: int


@dataclass(slots=True)
class Transfer:
    nbytes: int        # bytes of work: the larger of the two sides (strided runs rounded up)
    setup: float       # NCE cycles before data moves
    cap: float         # bytes per NCE cycle without DDR contention
    ddr_sides: int     # 0, 1 or 2 sides in DDR (a DDR -> DDR copy uses DDR twice)
    ddr_bytes: int     # bytes read from plus written to DDR


def transfer_cost(permute: bool, src_bytes: int, src_elem_bytes: int, src_ddr: bool,
                  dst_bytes: int, dst_ddr: bool, params: DmaParams,
                  run_bytes: int | None = None) -> Transfer:
    """A transfer's cost from its two sides' bytes and places; ``run_bytes`` is the
    length of its shortest contiguous run when it is strided (None: contiguous)."""
    cap = params.engine_bytes_per_cycle
    if not src_ddr or not dst_ddr:
        cap = min(cap, params.cmx_bytes_per_cycle)
    if permute:
        cap = min(cap, params.permute_elements_per_cycle * src_elem_bytes)
    read = params.ddr_read_latency if src_ddr else params.cmx_latency
    write = params.ddr_write_latency if dst_ddr else params.cmx_latency
    work = max(src_bytes, dst_bytes)
    if run_bytes is not None and 0 < run_bytes < params.burst_bytes and not permute:
        work = -(-work // run_bytes) * params.burst_bytes
    ddr_bytes = (src_bytes if src_ddr else 0) + (dst_bytes if dst_ddr else 0)
    return Transfer(work, max(read, write), cap, src_ddr + dst_ddr, ddr_bytes)


def transfer_cycles(transfer: Transfer, ddr_bytes_per_cycle: float) -> float:
    """A transfer's cycles when it has the DDR to itself (the compiler's estimate)."""
    rate = transfer.cap
    if transfer.ddr_sides:
        rate = min(rate, ddr_bytes_per_cycle / transfer.ddr_sides)
    return transfer.setup + transfer.nbytes / rate


def dma_data_start(start: float, transfer: Transfer, dispatch: float) -> float:
    """When a DMA task started at NCE cycle ``start`` begins moving data: the runtime's
    dispatch, then the transfer's setup (its latency)."""
    return start + dispatch + transfer.setup


def dma_task_cycles(transfer: Transfer, dispatch: float, ddr_bytes_per_cycle: float) -> float:
    """A DMA task's cycles, dispatch included, when it has the DDR to itself."""
    return dispatch + transfer_cycles(transfer, ddr_bytes_per_cycle)
