"""The cost of an ACT SHAVE kernel's reads of a memref operand left in DDR.

On NPU37XX an ACT SHAVE reads DDR through its L1 data cache and the shared NN L2
cache (the 37XX compiler surrounds a SW kernel with DDR operands by cache invalidate
and flush kernels: npu_compiler's ``AddSwKernelCacheHandlingOps``); vpuc's interpreter
counts the kernel's instructions as if every load hit, so the misses are this term,
charged on top of the interpreter's cycles:

    cycles = runs * DDR_read_latency + lines * LINE_BYTES / DDR_bandwidth

- a **run** is a stretch of consecutive bytes the kernel reads in order (a ``gather``
  row): its first line waits for the full DDR read latency, the same
  ``dma.ddr_read_latency_cycles`` the DMA model charges a transfer from DDR (fitted on
  VPUNN's DMA rows, vpuc/cost/archs/*.toml), and the lines after it stream behind it
  (assumption: the L1's line fills of a sequential run are pipelined, as a DMA's burst
  is, rather than each waiting out the latency);
- each **line** a run touches (``LINE_BYTES`` = 64, assumption: the usual cache-line
  size; a run aligned to its own size touches ``ceil(bytes / 64)``) moves at the DDR
  bandwidth the DMA model shares (``ddr.bandwidth_mbps``);
- no reuse between runs: a line read twice is charged twice (an upper bound; the L1
  data cache is small, and which lines it keeps depends on the run-time indices, which a
  timing-only run does not have).

What a library kernel reads of a DDR operand follows from its contract's shape rule:
``gather``'s table is read one row per index (``A * N`` runs of ``R`` elements, only the
gathered rows cross DDR; ``A`` is 1 for a table ``[K, R]``); any other operand is read whole, one run of its bytes.  The
simulator (``runtime_sim/engines/shave.py``) charges this per invocation, the bound
(``vpuc/cost/bound.py``) counts the DDR bytes, and the gather lowering
(``vpuc/fusion/lower_gather.py``) weighs it against streaming the table through CMX.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

LINE_BYTES = 64


@dataclass(frozen=True)
class DdrRead:
    """``runs`` stretches of ``run_bytes`` consecutive bytes each."""

    runs: int
    run_bytes: int

    @property
    def lines(self) -> int:
        return self.runs * -(-self.run_bytes // LINE_BYTES)

    @property
    def bytes(self) -> int:
        """The DDR bytes the reads move: whole lines."""
        return self.lines * LINE_BYTES


def ddr_read_cycles(read: DdrRead, latency: float, ddr_bytes_per_cycle: float) -> float:
    """NCE cycles of ``read``: each run's latency, each line at the DDR bandwidth."""
    if read.runs == 0 or read.run_bytes == 0:
        return 0.0
    return read.runs * latency + read.lines * LINE_BYTES / ddr_bytes_per_cycle


def library_ddr_read(shape_rule: str | None, operand: str, dims: dict[str, tuple[int, ...]],
                     elem_bytes: int) -> DdrRead:
    """What a library kernel with contract shape rule ``shape_rule`` reads of its memref
    ``operand`` (in DDR): ``dims`` holds every memref argument's logical dims by name,
    ``elem_bytes`` the operand's element size."""
    shape = dims[operand]
    if shape_rule == "gather" and operand == "data" and len(dims["output"]) in (2, 3):
        *a, n, r = dims["output"]
        return DdrRead(prod(a) * n, r * elem_bytes)
    return DdrRead(1, prod(shape) * elem_bytes)
