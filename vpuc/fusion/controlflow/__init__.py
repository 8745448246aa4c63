"""The control-flow optimizer: Linear IR passes, one per file (OpenVINO's control_flow_transformations).

``CONTROLFLOW_PASSES`` is the registry (file ``mark_loops.py`` <-> name
``mark-loops`` <-> class ``MarkLoopsPass``); ``CONTROLFLOW_PIPELINE`` the
order ``lower_subgraph`` runs them in:

1. optimize-domain: merge dims every port treats alike (fewer, longer loops);
2. mark-loops: group expressions into loop nests;
3. fuse-loops: fuse producer and consumer loops;
4. insert-buffers: scratch memory where a value crosses loop nests;
5. insert-load-store: explicit memory accesses;
6. init-loops: pointer increments and finalization offsets;
7. insert-loops: explicit LoopBegin / LoopEnd;
8. insert-broadcast-move: fill vectors from one element where the innermost dim broadcasts;
9. load-move-broadcast-to-broadcast-load: fuse Load + MoveBroadcast;
10. allocate-buffers: buffer registers, clusters and the scratchpad;
11. clean-repeated-data-pointer-shifts: move each pointer once per loop;
12. propagate-layout: the kernel arguments' layouts.
"""

from __future__ import annotations

from vpuc.fusion.controlflow.allocate_buffers import AllocateBuffersPass
from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.controlflow.clean_repeated_data_pointer_shifts import \
    CleanRepeatedDataPointerShiftsPass
from vpuc.fusion.controlflow.fuse_loops import FuseLoopsPass
from vpuc.fusion.controlflow.init_loops import InitLoopsPass
from vpuc.fusion.controlflow.insert_broadcast_move import InsertBroadcastMovePass
from vpuc.fusion.controlflow.insert_buffers import InsertBuffersPass
from vpuc.fusion.controlflow.insert_load_store import InsertLoadStorePass
from vpuc.fusion.controlflow.insert_loops import InsertLoopsPass
from vpuc.fusion.controlflow.load_move_broadcast_to_broadcast_load import \
    LoadMoveBroadcastToBroadcastLoadPass
from vpuc.fusion.controlflow.mark_loops import MarkLoopsPass
from vpuc.fusion.controlflow.optimize_domain import OptimizeDomainPass
from vpuc.fusion.controlflow.propagate_layout import PropagateLayoutPass

CONTROLFLOW_PASSES: dict[str, type[LirPass]] = {
    cls.name: cls
    for cls in (OptimizeDomainPass, MarkLoopsPass, FuseLoopsPass, InsertBuffersPass,
                InsertLoadStorePass, InitLoopsPass, InsertLoopsPass, InsertBroadcastMovePass,
                LoadMoveBroadcastToBroadcastLoadPass, AllocateBuffersPass,
                CleanRepeatedDataPointerShiftsPass, PropagateLayoutPass)
}

CONTROLFLOW_PIPELINE = list(CONTROLFLOW_PASSES)
