"""The lower bound of the program being run (``vpuc/cost/bound.py``), from its units.

The simulator never sees the graph, so each layer's work is read off the
program, layer by layer (``layer_report.layer_of``, the same grouping as the
per-layer reports):

- DPU: every variant's workload (``engines/dpu.workload``) at its ideal rate, but for
  NCE permutes: they lay values out, which a schedule keeping NHWC values between
  layers never needs (and a DMA could do for the model's input), as the transposing
  DMAs they replace counted nothing either;
- ACT SHAVE: the cycles each invocation took (its instructions, which no
  schedule changes), but for the DDR reads of a library kernel's inputs left in DDR
  (``vpuc/cost/shave_ddr.py``): those are counted as DDR bytes, whole cache lines;
- DDR: per DDR buffer the DMA units touch, the bytes read from and written to
  it, each capped at the buffer's size (read once, written once), counting a
  ``ddr`` scratch buffer only when it is larger than every tile's CMX together
  (a smaller one could have stayed in CMX).  A buffer read by several layers is
  charged to the first.

``bound_data`` is the ``bound`` field of ``vpuc run --json`` and summary.json.
"""

from __future__ import annotations

from runtime_sim.engines.dpu import workload
from runtime_sim.engines.shave_ddr import task_ddr_cycles, task_ddr_reads
from runtime_sim.layer_report import layer_of
from runtime_sim.plan import ACT, DMA, DPU, Plan
from runtime_sim.runtime import Timeline
from vpuc.cost.bound import LayerWork, NetworkBound, ideal_dpu_cycles, network_bound
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DpuOp


def layer_work(plan: Plan, timeline: Timeline) -> list[LayerWork]:
    """Each layer's schedule-free work, layers in the order of their first unit."""
    structure = plan.arch.structure
    cmx_total = structure.tiles * structure.cmx_bytes
    layers: dict[str, LayerWork] = {}
    charged: dict[tuple[str, str], int] = {}       # (buffer, read|write) -> bytes so far
    names, kinds, variants = plan.names, plan.kind, plan.variant
    kernels = {k.name: k for k in plan.program.module.kernels}
    for u in range(plan.size):
        name = layer_of(names[u])
        work = layers.get(name)
        if work is None:
            work = layers[name] = LayerWork(name)
        kind = kinds[u]
        if kind == DPU and plan.task[u].op is DpuOp.PERMUTE:
            continue
        if kind == DPU:
            tensors = {k: r.type for k, r in plan.dpu_regions(u).items()}
            w = workload(plan.task[u], variants[u], tensors)
            work.dpu_cycles += ideal_dpu_cycles(w, plan.arch.dpu)
        elif kind == ACT:
            took = timeline.end[u] - timeline.start[u]
            reads = task_ddr_reads(plan.task[u], kernels.get(plan.task[u].kernel), plan.region)
            if reads:           # the DDR reads' stalls are the DDR's work, not the SHAVE's
                took -= task_ddr_cycles(reads, plan.arch.dma.ddr_read_latency,
                                        plan.arch.ddr_bytes_per_cycle)
                work.ddr_bytes += sum(r.bytes for r in reads)
            work.act_cycles += max(took, 0.0)
        elif kind == DMA:
            src, dst = plan.dma_regions(u)
            for region, way in ((src, "read"), (dst, "write")):
                root = region.root
                if root.kind is BufferKind.CMX or (root.kind is BufferKind.DDR
                                                    and root.type.nbytes <= cmx_total):
                    continue
                key = (root.name, way)
                done = charged.get(key, 0)
                extra = min(region.type.nbytes, root.type.nbytes - done)
                if extra > 0:
                    charged[key] = done + extra
                    work.ddr_bytes += extra
    return list(layers.values())


def program_bound(plan: Plan, timeline: Timeline) -> NetworkBound:
    structure = plan.arch.structure
    return network_bound(layer_work(plan, timeline),
                         dpus=structure.tiles * structure.dpus_per_tile,
                         shaves=structure.tiles * structure.act_shaves_per_tile,
                         ddr_bytes_per_cycle=plan.arch.ddr_bytes_per_cycle)


def bound_data(plan: Plan, timeline: Timeline, rounded) -> dict:
    """The bound as plain data: cycles, achieved / bound, how it was reached."""
    bound = program_bound(plan, timeline)
    engine, busiest = bound.busiest_engine
    cycles = bound.cycles
    return {"cycles": rounded(cycles),
            "achieved_over_bound": rounded(timeline.total / cycles, 4) if cycles else None,
            "per_layer_cycles": rounded(bound.per_layer),
            "achieved_over_per_layer": (rounded(timeline.total / bound.per_layer, 4)
                                        if bound.per_layer else None),
            "busiest_engine": {"name": engine, "cycles": rounded(busiest)},
            "engine_totals": {k: rounded(v) for k, v in bound.engine_totals.items()},
            "layers": len(bound.layers),
            "ddr_limited_layers": sum(1 for layer in bound.layers if layer.limit == "ddr")}
