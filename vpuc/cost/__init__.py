"""One cost model for the NPU: a DPU workload, a DMA transfer, an ACT SHAVE invocation.

The simulator charges with it (``runtime_sim/engines``) and the compiler asks it
(workload splitting and execution modes in ``vpuc/fusion/lower_dpu*.py``).  It
imports neither: both sit above it.  Numbers come from the architecture's timing
file (``timing.py``); formulas and their sources are in ``dpu.py``, ``dma.py``,
``modes.py`` and ``shave.py``.
"""

from vpuc.cost.dma import (DmaParams, Transfer, dma_data_start, dma_task_cycles, transfer_cost,
                           transfer_cycles)
from vpuc.cost.dpu import (DpuCost, DpuParams, DpuWorkload, choose_mode, dpu_cost,
                           dpu_variant_cycles)
from vpuc.cost.modes import MODE_NAMES, ModeGrid
from vpuc.cost.shave import act_invocation_cycles, act_invocation_end, act_shave_budget
from vpuc.cost.timing import Timing, load_timing

__all__ = ["DmaParams", "Transfer", "dma_data_start", "dma_task_cycles", "transfer_cost",
           "transfer_cycles", "DpuCost", "DpuParams", "DpuWorkload", "choose_mode", "dpu_cost",
           "dpu_variant_cycles", "MODE_NAMES", "ModeGrid", "act_invocation_cycles",
           "act_invocation_end", "act_shave_budget", "Timing", "load_timing"]
