"""The schedule-free lower bound of a network's cycles (issue 13: achieved / bound).

No schedule of the network's work can end sooner than the bound, whatever its
tiling, overlap or residency, at the cost model's rates:

- a layer's **compute bound** is its DPU work at the DPU's unpadded rate (``ideal_dpu_cycles``:
  the output's MACs over the op class's MACs per cycle; no mode-grid padding,
  setup or fetch, which a better schedule could hide) spread over every DPU,
  or its ACT SHAVE cycles spread over every ACT SHAVE, whichever is longer;
- its **DDR bound** is the bytes that must cross DDR, at the DDR's bandwidth:
  constants (weights) read once, network inputs read once, outputs written
  once, and values between layers only when they cannot stay in CMX (larger
  than every tile's CMX together); a value that fits could stay resident;
- a layer alone takes at least the larger of the two; the **per-layer sum** adds
  them up (each layer's roofline, one after another: the issue's figure).  It
  is not a bound of a schedule that overlaps layers (independent layers, or a
  hand-written program whose every task is a layer, run side by side:
  ``examples/fused_chain.vir`` ends 13% under its per-layer sum), so it is
  reported, not used;
- the **bound** is the busiest resource: the largest whole-network total of the
  DPUs, the ACT SHAVEs or the DDR, which no overlap can shorten.

The simulator gathers each layer's work from the program it runs
(``runtime_sim/bound_input.py``); this module only does the arithmetic, so the
compiler could ask it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.cost.dpu import DENSE_LANES, DpuParams, DpuWorkload, op_class


@dataclass
class LayerWork:
    """What one layer must do, whatever the schedule."""
    name: str
    dpu_cycles: float = 0.0       # ideal DPU compute, summed over its workloads (one DPU)
    act_cycles: float = 0.0       # ACT SHAVE cycles (one ACT SHAVE)
    ddr_bytes: int = 0            # bytes that must cross DDR


@dataclass
class LayerBound:
    name: str
    compute: float
    ddr: float

    @property
    def cycles(self) -> float:
        return max(self.compute, self.ddr)

    @property
    def limit(self) -> str:
        return "compute" if self.compute >= self.ddr else "ddr"


@dataclass
class NetworkBound:
    layers: list[LayerBound] = field(default_factory=list)
    engine_totals: dict[str, float] = field(default_factory=dict)    # DPU, ACT_SHAVE, DDR

    @property
    def per_layer(self) -> float:
        return sum(layer.cycles for layer in self.layers)

    @property
    def busiest_engine(self) -> tuple[str, float]:
        if not self.engine_totals:
            return "", 0.0
        return max(self.engine_totals.items(), key=lambda item: item[1])

    @property
    def cycles(self) -> float:
        return self.busiest_engine[1]


def ideal_dpu_cycles(w: DpuWorkload, params: DpuParams) -> float:
    """A workload's compute at its op class's rate with nothing padded, set up or fetched:
    the least time any DPU schedule spends on it (``dpu_cost``'s compute term, unpadded)."""
    cls = op_class(w.op)
    kh, kw = w.kernel
    out = w.width * w.height * w.channels * w.batch
    if cls == "dense":      # fewer than 16 input channels still take 16 lanes (dpu.py)
        taps = max(w.in_channels, DENSE_LANES) * kh * kw
        rate = params.dense_macs_per_cycle[w.elem] * params.dense_efficiency
    else:
        taps = kh * kw if cls != "eltwise" else 1
        rate = params.rates[cls] * (params.int8_speedup if w.in_bytes == 1 else 1.0)
    return out * taps / rate


def network_bound(layers: list[LayerWork], dpus: int, shaves: int,
                  ddr_bytes_per_cycle: float) -> NetworkBound:
    """The bound of a network whose layers do ``layers``' work on ``dpus`` DPUs, ``shaves``
    ACT SHAVEs and a DDR of ``ddr_bytes_per_cycle``."""
    result = NetworkBound()
    totals = {"DPU": 0.0, "ACT_SHAVE": 0.0, "DDR": 0.0}
    for work in layers:
        dpu = work.dpu_cycles / dpus if dpus else 0.0
        act = work.act_cycles / shaves if shaves else 0.0
        ddr = work.ddr_bytes / ddr_bytes_per_cycle
        result.layers.append(LayerBound(work.name, max(dpu, act), ddr))
        totals["DPU"] += dpu
        totals["ACT_SHAVE"] += act
        totals["DDR"] += ddr
    result.engine_totals = totals
    return result
