"""The DMA engine: transfers, their numerics, and DDR bandwidth shared between channels.

A transfer costs ``dispatch + setup + bytes / rate``; setup, the rate's cap
and the bytes of work come from the cost model (``vpuc.cost.dma``: latency by
direction, engine and CMX port, permute).  When a side is in DDR the rate is
also capped by its fair share of the DDR bandwidth: the
transfers moving data to or from DDR at a moment share it max-min fairly
(processor sharing), and every time one starts or ends moving data the others
are re-timed from the bytes they have left.

Numerics use the regions' strides: a copy moves bytes in memory order (so it
may reshape), a permute copies logical elements into another dims order, a
convert rounds through f32 to the destination type.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.memory import Memory
from runtime_sim.simarch import SimArch
from vpuc.cost.dma import Transfer, transfer_cost
from vpuc.ir.symbols import Region
from vpuc.ir.tasks import DmaMode, DmaTask
from vpuc.ir.types import TensorType


def plan_transfer(mode: DmaMode, src: TensorType, src_ddr: bool, dst: TensorType, dst_ddr: bool,
                  arch: SimArch) -> Transfer:
    return transfer_for(mode, src.nbytes, src.elem.nbytes, src_ddr, dst.nbytes, dst_ddr, arch)


def transfer_for(mode: DmaMode, src_bytes: int, src_elem_bytes: int, src_ddr: bool,
                 dst_bytes: int, dst_ddr: bool, arch: SimArch,
                 run_bytes: int | None = None) -> Transfer:
    """A transfer's cost from its two sides' bytes and places and its shortest contiguous
    run (None: both sides contiguous), the cost model's."""
    return transfer_cost(mode is DmaMode.PERMUTE, src_bytes, src_elem_bytes, src_ddr,
                         dst_bytes, dst_ddr, arch.dma, run_bytes)


class DdrSharing:
    """Transfers in their data phase; rates are recomputed whenever one joins or leaves."""

    def __init__(self, ddr_bytes_per_cycle: float) -> None:
        self.capacity = ddr_bytes_per_cycle
        self.active: dict[int, list] = {}     # unit -> [bytes left, rate, cap, ddr sides]
        self.last = 0.0
        # DDR bytes/cycle in use from each time on (two flat lists: no object per sample).
        self.times: list[float] = [0.0]
        self.rates: list[float] = [0.0]

    def join(self, unit: int, t: float, transfer: Transfer) -> list[tuple[int, float]]:
        """``transfer`` starts moving data: (unit, finish time) of every active transfer."""
        if not self.active:
            return [(unit, self.join_alone(unit, t, transfer))]
        self._advance(t)
        self.active[unit] = [float(transfer.nbytes), 0.0, transfer.cap, transfer.ddr_sides]
        return self._retime(t)

    def join_alone(self, unit: int, t: float, transfer: Transfer) -> float:
        """``join`` when nothing else moves data: the general computation for one transfer,
        term for term, so the result is bit-identical.  (The runtime's event loop does the
        same inline with ``solo``'s numbers.)"""
        nbytes, rate, used = self.solo(transfer)
        self.last = t
        self.active[unit] = [nbytes, rate, transfer.cap, transfer.ddr_sides]
        if used != self.rates[-1]:
            self.times.append(t)
            self.rates.append(used)
        return t + nbytes / rate

    def solo(self, transfer: Transfer) -> tuple[float, float, float]:
        """(bytes left, rate, DDR bytes/cycle in use) of ``transfer`` moving data alone: what
        ``_retime`` gives one transfer, term for term (it depends on the transfer only)."""
        sides = transfer.ddr_sides
        if sides:
            capacity = self.capacity
            demand = transfer.cap * sides
            given = demand if demand <= capacity else capacity
            return float(transfer.nbytes), given / sides, capacity - (capacity - given)
        return float(transfer.nbytes), transfer.cap, 0.0

    def leave(self, unit: int, t: float) -> list[tuple[int, float]]:
        """``unit`` has moved all its data: (unit, finish time) of the others, re-timed."""
        if len(self.active) == 1:
            self.leave_alone(t)
            return []
        self._advance(t)
        del self.active[unit]
        return self._retime(t)

    def leave_alone(self, t: float) -> None:
        """``leave`` of the only active transfer (the runtime's fast path)."""
        self.active.clear()
        self.last = t
        if self.rates[-1] != 0.0:
            self.times.append(t)
            self.rates.append(0.0)

    def _advance(self, t: float) -> None:
        elapsed = t - self.last
        if elapsed > 0:
            for state in self.active.values():
                state[0] = max(state[0] - state[1] * elapsed, 0.0)
        self.last = t

    def _retime(self, t: float) -> list[tuple[int, float]]:
        """Water-filling: each DDR user gets an equal share of what is left, up to
        its own demand; a transfer without DDR sides runs at its cap."""
        active = self.active
        users = [(state[2] * state[3], unit) for unit, state in active.items() if state[3]]
        if len(users) > 1:
            users.sort()
        left, count = self.capacity, len(users)
        for demand, unit in users:
            given = demand if demand * count <= left else left / count
            state = active[unit]
            state[1] = given / state[3]
            left -= given
            count -= 1
        used = self.capacity - left
        for state in active.values():
            if not state[3]:
                state[1] = state[2]
        if used != self.rates[-1]:
            self.times.append(t)
            self.rates.append(used)
        return [(unit, t + state[0] / state[1]) for unit, state in active.items()]


# ------------------------------------------------------------------ numerics

def run_transfer(task: DmaTask, src: Region, dst: Region, memory: Memory) -> None:
    if bytewise(task, src, dst, memory):
        memory.bytes_of(dst)[...] = memory.bytes_of(src)
    else:
        copy_elements(task, src, dst, memory)


def bytewise(task: DmaTask, src: Region, dst: Region, memory: Memory) -> bool:
    """Whether the transfer is a copy of static dense regions of one element type: their
    memory order is their address order, so the copy (any reshape included) is their
    bytes, moved without making arrays of them.  Most DMAs are (MNv3: 585 of 778)."""
    return (task.mode is DmaMode.COPY and src.is_dense and dst.is_dense
            and src.span_bytes == dst.span_bytes and src.type.elem is dst.type.elem
            and src.root.name not in memory.dynamic and dst.root.name not in memory.dynamic)


def copy_elements(task: DmaTask, src: Region, dst: Region, memory: Memory) -> None:
    """The transfer on arrays of the regions' logical shapes (any mode, strides, dims)."""
    shape = None
    if not src.root.type.is_static:
        shape = memory.shape_of(src)
        memory.set_dynamic_dims(dst.root, shape)
    a = memory.view(src)
    b = memory.view(dst, shape)
    if task.mode is DmaMode.PERMUTE:
        b[...] = a
    elif task.mode is DmaMode.CONVERT:
        b[...] = convert(a, b.dtype)
    elif a.shape == b.shape and src.type.order == dst.type.order:
        b[...] = a
    else:
        # A reshaping copy moves bytes in memory order, whatever the logical shapes.
        src_mem = a.transpose(src.type.order.perm).reshape(-1)
        b.transpose(dst.type.order.perm)[...] = src_mem.reshape(
            [b.shape[d] for d in dst.type.order.perm])


def convert(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Through f32 (f64 stays f64), rounded once: floats to nearest even, integers
    half to even and saturated."""
    wide = np.float64 if values.dtype == np.float64 or dtype == np.float64 else np.float32
    compute = values.astype(wide)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        compute = np.nan_to_num(compute, nan=0.0)  # NaN converts to 0, as the DPU's output stage
        return np.clip(np.rint(compute), info.min, info.max).astype(dtype)
    return compute.astype(dtype)
