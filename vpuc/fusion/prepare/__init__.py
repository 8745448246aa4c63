"""The generator's preparation passes: target-independent, run after the control-flow optimizer.

``PREPARE_PASSES`` is the registry (``init_live_ranges.py`` <-> ``init-live-ranges``
<-> ``InitLiveRangesPass``); ``PREPARE_PIPELINE`` the order ``lower_subgraph``
runs them in.  The tail and offset passes run *before* the register passes
(OpenVINO assigns registers first and copies them into the tail): the tail
adds mask values that need registers too, and allocating on the final code
lets one allocation serve every loop copy.

1. insert-specific-iterations: main body + masked tail;
2. cleanup-loop-offsets: fold finalization offsets into outer loops, drop dead ones;
3. optimize-loop-single-evaluation: loops that run once lose back edge and increments;
4. init-live-ranges: abstract registers and live ranges;
5. insert-reg-spills: spills when a register class runs out;
6. assign-registers: physical registers.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.prepare.assign_registers import AssignRegistersPass
from vpuc.fusion.prepare.cleanup_loop_offsets import CleanupLoopOffsetsPass
from vpuc.fusion.prepare.init_live_ranges import InitLiveRangesPass
from vpuc.fusion.prepare.insert_reg_spills import InsertRegSpillsPass
from vpuc.fusion.prepare.insert_specific_iterations import InsertSpecificIterationsPass
from vpuc.fusion.prepare.optimize_loop_single_evaluation import OptimizeLoopSingleEvaluationPass

PREPARE_PASSES: dict[str, type[LirPass]] = {
    cls.name: cls
    for cls in (InsertSpecificIterationsPass, CleanupLoopOffsetsPass,
                OptimizeLoopSingleEvaluationPass, InitLiveRangesPass, InsertRegSpillsPass,
                AssignRegistersPass)
}

PREPARE_PIPELINE = list(PREPARE_PASSES)
