"""Global pools with a window beyond the NCE's kernel limit, in CMX: two levels over the tiles.

The NCE pools windows of at most ``MAX_KERNEL`` x ``MAX_KERNEL`` cells (``verifier/dpu.py``
cites the NPU compiler's limit; its ``HandleLargeKernels`` pass splits larger pools into
levels).  A global average or max pool over H x W (MobileNetV3's squeeze-excite pools:
56 x 56, 14 x 14) runs here as

1. *level 1*: the input cut into channel chunks and bands of rows, each item loaded into
   one tile's CMX (items alternate over the tiles; an item of all the channels on the tile
   holding a resident input reads its rows in place, ``resident.in_place_input``) and
   pooled with ``a x b`` windows at stride ``a x b`` into a partial tensor in that tile's
   CMX;
2. *level 2*: on the chunk's home tile (its first band's), the bands' partials (the other
   tiles' copied CMX -> CMX) pooled by one ``(H/a) x (W/b)`` window into the output
   block, with the layer's post-op, stored as every DPU layer's block is
   (``LayerEmitter.store``).

No partial tensor goes to DDR.  Only exact splits are taken: ``a`` divides every band's
rows and ``b`` divides W, so every partial has the same weight and the mean of the
partial means is the mean (a max of maxes is always exact); each partial is rounded to
the layer's type once, one more rounding of relative size u (the tolerance the tests
derive).  Other shapes (a prime H or W above the limit) take ``lower_dpu_global_pool``'s
levels through DDR.

Which chunks, bands and windows: the cheapest the cost model's estimate of this emission
finds (``estimate``: loads in order on channel 0, each tile's DPU list in order, copies and
stores on the store channel), among those whose buffers fit a tile's CMX budget.  A 1x1
output pads to the MPE's grid (16 cells of a 4x4 grid at 16 channels), so one DPU task
over a 56 x 56 window cost 21,166 cycles for 3,136 taps; 8 x 8 partials of 7 x 7 windows
fill the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vpuc.cost import DpuWorkload, choose_mode, dpu_cost
from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.fusion.blocked_program import ProgramText, Value, label
from vpuc.fusion.lower_dpu import NHWC, DpuLayer, LayerEmitter
from vpuc.fusion.lower_dpu_channels import aligned, channel_chunks, variant_boxes
from vpuc.fusion.lower_dpu_nn_load import load_job_input
from vpuc.fusion.pool_stream import arrival, dpu_free as writer_dpu_free, most_bands
from vpuc.fusion.resident import in_place_input
from vpuc.fusion.lower_dpu_nn_plan import CHANNEL_GRANULE, Job, Plan
from vpuc.ir.types import TensorType
from vpuc.verifier.dpu import MAX_KERNEL     # the NCE's largest kernel side, cited there

MAX_BANDS = 4


@dataclass(frozen=True)
class Levels:
    """A split of a global pool: channel chunks, row bands per chunk, level-1 window."""
    chunks: tuple[tuple[int, int], ...]     # output channels [start, stop)
    bands: int                              # equal bands of rows per chunk
    window: tuple[int, int]                 # level 1's a x b (its stride too)

    def items(self, h: int) -> list[tuple[int, int, int]]:
        """(chunk, first row, rows) per level-1 item, in emission order (``item_tile``)."""
        rows = h // self.bands
        return [(j, b * rows, rows) for j in range(len(self.chunks)) for b in range(self.bands)]


def item_tile(k: int, x: Value, tiles: int) -> int:
    """Item ``k``'s tile: the items alternate over the tiles from tile 0; those on the tile
    holding a resident ``x`` read in place (``reads_in_place``).  Starting on that tile
    instead (more items in place) measured worse: MobileNetV3-Small 663,740 -> 665,098
    cycles, as an in-place read waits for the producer's last rows, which the estimate does
    not see, while a load of the first band runs beside the producer's later blocks."""
    return k % tiles


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, MAX_KERNEL) + 1) if n % d == 0]


def candidates(c: int, h: int, w: int, tiles: int, streamed: bool = False):
    """Every exact split (module docstring): level 2's window within the limit too; with
    ``streamed`` (``pool_stream``) up to one level-1 window's rows a band."""
    windows = [(a, b) for a in _divisors(h) for b in _divisors(w) if a * b > 1
               and h // a <= MAX_KERNEL and w // b <= MAX_KERNEL]
    parts = sorted({len(_chunks(c, p)) for p in range(1, math.ceil(c / CHANNEL_GRANULE) + 1)})
    for count in parts:
        chunks = tuple(_chunks(c, count))
        for a, b in windows:
            for bands in range(1, most_bands(h, a, tiles, streamed, MAX_BANDS) + 1):
                if (h // a) % bands == 0:
                    yield Levels(chunks, bands, (a, b))


def _chunks(c: int, parts: int) -> list[tuple[int, int]]:
    size = math.ceil(math.ceil(c / parts) / CHANNEL_GRANULE) * CHANNEL_GRANULE
    edges = list(range(0, c, size)) + [c]
    return list(zip(edges, edges[1:]))


def _workload(op: str, x: Value, cols: int, rows: int, occ: int, kernel) -> DpuWorkload:
    elem, n = x.type.elem, x.type.dims[0]
    return DpuWorkload(op=op, elem=elem.value, width=cols, height=rows, channels=occ,
                       in_channels=occ, kernel=kernel, stride=kernel, batch=n,
                       in_bytes=elem.nbytes, out_bytes=elem.nbytes, weight_bytes=elem.nbytes)


def _task_cycles(op: str, x: Value, cols: int, rows: int, occ: int, kernel, timing) -> float:
    """One task of one row run, its variants the channel chunks ``variant_boxes`` cuts."""
    total = 0.0
    for _, _, z0, z1, _ in variant_boxes(op, [(0, rows, "")], (0, occ - 1)):
        w = _workload(op, x, cols, rows, z1 - z0 + 1, kernel)
        total += dpu_cost(w, timing.dpu, choose_mode(w, timing.dpu)).cycles \
            + timing.dispatch["DPU"]
    return total


def _dma(nbytes: int, elem_bytes: int, permute: bool, src_ddr: bool, dst_ddr: bool,
         timing) -> float:
    """A DMA task's cycles by the cost model (CMX -> CMX copies of resident values too)."""
    transfer = transfer_cost(permute, nbytes, elem_bytes, src_ddr, nbytes, dst_ddr, timing.dma)
    return dma_task_cycles(transfer, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)


def footprint(lv: Levels, x: Value, tiles: int) -> int:
    """The largest CMX bytes a tile holds at once: two input blocks (the load of item k
    waits for item ``k - 2 tiles``'s level 1) and every partial, gathered and output buffer
    of the tile (a bound: the allocator reuses by lifetime)."""
    n, _, h, w = x.type.dims
    nbytes = x.type.elem.nbytes
    a, b = lv.window
    per_tile = [0] * tiles
    biggest = [0] * tiles
    for k, (j, _, rows) in enumerate(lv.items(h)):
        occ = aligned(lv.chunks[j][1] - lv.chunks[j][0])
        t = item_tile(k, x, tiles)
        biggest[t] = max(biggest[t], n * occ * rows * w * nbytes)
        per_tile[t] += n * occ * (rows // a) * (w // b) * nbytes
        if k % lv.bands == 0:         # the chunk's home: its gathered partials, its output
            per_tile[t] += n * occ * (h // a) * (w // b) * nbytes + n * occ * nbytes
    return max(2 * big + rest for big, rest in zip(biggest, per_tile))


def reads_in_place(lv: Levels, j: int, x: Value, t: int) -> bool:
    """Whether chunk ``j``'s item on tile ``t`` reads its rows straight from the resident
    ``x`` (``resident.in_place_input``: its tile, all of its channels, already aligned)."""
    c = x.type.dims[1]
    return x.tile == t and x.kind == "ddr" and x.type.order == NHWC \
        and lv.chunks[j] == (0, c) and aligned(c) == c


def estimate(lv: Levels, op: str, x: Value, out: Value, tiles: int, timing,
             channels: int, rows_stored=None, dpu_start: list[float] | None = None) -> float:
    """The makespan of ``emit_levels``' tasks by the cost model, as the runtime orders them:
    loads in order on channel 0; each tile's DPU list in emission order (chunk by chunk:
    its items' level 1, then its level 2); copies of partials and stores on the store
    channel, also in order (with one DMA channel, all transfers share one FIFO).  With
    ``rows_stored`` (``pool_stream.arrival``) an item starts no sooner than its rows are
    stored, each tile's DPU tasks no sooner than ``dpu_start`` (``pool_stream.dpu_free``)."""
    n, _, h, w = x.type.dims
    nbytes = x.type.elem.nbytes
    a, b = lv.window
    permute = x.type.order != NHWC
    load_free, store_free = 0.0, 0.0
    dpu_free = list(dpu_start) if dpu_start is not None else [0.0] * tiles
    l1_end: list[float] = []
    end = 0.0
    items = lv.items(h)
    for j, (c0, c1) in enumerate(lv.chunks):
        occ, real = aligned(c1 - c0), c1 - c0
        ready = 0.0
        home = item_tile(j * lv.bands, x, tiles)
        for k in range(j * lv.bands, (j + 1) * lv.bands):
            _, r0, rows = items[k]
            t = item_tile(k, x, tiles)
            stored = rows_stored(r0 + rows) if rows_stored is not None else 0.0
            if reads_in_place(lv, j, x, t):
                begin = max(dpu_free[t], stored)    # no load: the producer wrote the rows
            else:
                start = load_free if k < 2 * tiles else max(load_free, l1_end[k - 2 * tiles])
                start = max(start, stored)
                load_free = start + _dma(n * real * rows * w * nbytes, nbytes, permute,
                                         x.tile is None, False, timing)
                if channels == 1:
                    store_free = load_free
                begin = max(load_free, dpu_free[t])
            dpu_free[t] = begin + _task_cycles(op, x, w // b, rows // a, occ, (a, b), timing)
            l1_end.append(dpu_free[t])
            if t != home:               # copied into the home tile's gathered partials
                part = n * occ * (rows // a) * (w // b) * nbytes
                store_free = max(store_free, dpu_free[t]) \
                    + _dma(part, nbytes, False, False, False, timing)
                if channels == 1:
                    load_free = store_free
                ready = max(ready, store_free)
            else:
                ready = max(ready, dpu_free[t])
        begin = max(ready, dpu_free[home])
        dpu_free[home] = begin + _task_cycles(op, x, 1, 1, occ, (h // a, w // b), timing)
        store_free = max(store_free, dpu_free[home]) \
            + _dma(n * real * nbytes, nbytes, out.type.order != NHWC, False,
                   out.tile is None, timing)
        if channels == 1:
            load_free = store_free
        end = max(end, store_free)
    return end


def choose_levels(plan: Plan, x: Value, out: Value, tiles: int,
                  prog: ProgramText) -> Levels | None:
    """The cheapest split that fits (module docstring); None when there is no exact one."""
    n, c, h, w = x.type.dims
    if prog.timing is None:
        return None
    best, best_cycles = None, math.inf
    rows_stored = arrival(prog, x)
    for lv in candidates(c, h, w, tiles, rows_stored is not None):
        if footprint(lv, x, tiles) > prog.cmx_budget:
            continue
        cycles = estimate(lv, plan.dpu_op, x, out, tiles, prog.timing, prog.dma_channels,
                          rows_stored, writer_dpu_free(prog, x, tiles))
        if cycles < best_cycles - 1e-9:
            best, best_cycles = lv, cycles
    return best


def emit_levels(prog: ProgramText, layer: DpuLayer, lv: Levels, op: str, x: Value,
                values: dict[str, Value], tiles: int, prefix: str, gate: tuple[str, ...],
                finish: str | None) -> None:
    """The tasks of ``lv`` (module docstring) over ``x`` into the layer's output."""
    out = values[layer.output]
    n, c, h, w = x.type.dims
    elem = x.type.elem
    a, b = lv.window
    nh, nw = h // a, w // b
    items = lv.items(h)
    e1 = LayerEmitter(prog, f"{prefix}l1.", tiles, gate, None, len(items))
    e2 = LayerEmitter(prog, prefix, tiles, gate, finish, len(lv.chunks))
    p1, p2 = e1.p, e2.p
    e1.tile = lambda k: item_tile(k, x, tiles)      # in_place_input and the loads ask it
    reuse = 2 * tiles
    for k in range(len(items)):
        prog.barriers.append(f"barrier %{p1}done{k}")
    for j in range(len(lv.chunks)):
        prog.barriers.append(f"barrier %{p2}done{j}")
        if j + e2.reuse < e2.blocks:
            prog.barriers.append(f"barrier %{p2}stored{j}")
    for j, (c0, c1) in enumerate(lv.chunks):
        occ = aligned(c1 - c0)
        first = j * lv.bands
        home = item_tile(first, x, tiles)
        gathered = e2.cmx(f"part.c{j}", TensorType((n, occ, nh, nw), elem, NHWC), home)
        ready = []
        copies = []
        for k in range(first, first + lv.bands):
            _, r0, rows = items[k]
            t = item_tile(k, x, tiles)
            before = [f"%{p1}done{k - reuse}"] if k >= reuse else [f"%{g}" for g in gate]
            xin = in_place_input(e1, k, x, occ, r0, rows) if (c0, c1) == (0, c) else None
            if xin is None:
                prog.barriers.append(f"barrier %{p1}loaded{k}")
                waits = f" waits({', '.join(before)})" if before else ""
                xin = load_job_input(e1, k, x, Job((c0, c1), (c0, c1)), (r0, rows), (0, w),
                                     waits, [f"%{p1}loaded{k}"])
                before = [f"%{p1}loaded{k}"]
            rows_out, q0 = rows // a, r0 // a
            slices = [f"0:{n}", f"0:{occ}", f"{q0}:{q0 + rows_out}", f"0:{nw}"]
            part = e1.view(f"part.v{k}", gathered[1:], slices) if t == home else \
                e1.cmx(f"part.c{k}", TensorType((n, occ, rows_out, nw), elem, NHWC), t)
            _task(prog, f"{label(p1)}c{k}", f"dpu {op} on tile {t} in({xin}) out({part}) "
                  f"kernel({a}, {b}) stride({a}, {b}) pad(0, 0, 0, 0)",
                  before, f"%{p1}done{k}", (nw, rows_out, occ), op, x, (a, b),
                  prog.timing)
            if t == home:
                ready.append(f"%{p1}done{k}")
            else:
                copies.append((k, part, e1.view(f"part.d{k}", gathered[1:], slices)))
        for k, src, dst in copies:      # the other tiles' partials, into the home tile
            prog.barriers.append(f"barrier %{p1}copied{k}")
            e1.dma(f"copy{k}", src, dst, prog.store_channel, f" waits(%{p1}done{k})",
                   [f"%{p1}copied{k}"])
            ready.append(f"%{p1}copied{k}")
        if j >= e2.reuse:
            ready.append(f"%{p2}stored{j - e2.reuse}")
        y = e2.cmx(f"out.c{j}", TensorType((n, occ, 1, 1), elem, NHWC), home)
        _task(prog, f"{label(p2)}c{j}", f"dpu {op} on tile {home} in({gathered}) out({y}) "
              f"kernel({nh}, {nw}) stride(1, 1) pad(0, 0, 0, 0){layer.post}", ready,
              f"%{p2}done{j}", (1, 1, occ), op, x, (nh, nw), prog.timing)
        dst = e2.view(f"out.v{j}", out.name, [f"0:{n}", f"{c0}:{c1}", "0:1", "0:1"])
        if occ > c1 - c0:                # only the real channels are stored
            y = e2.view(f"out.r{j}", y[1:], [f"0:{n}", f"0:{c1 - c0}", "0:1", "0:1"])
        e2.store(j, y, dst, permute=out.type.order != NHWC)


def _task(prog: ProgramText, name: str, head: str, waits: list[str], done: str,
          extent: tuple[int, int, int], op: str, x: Value, kernel, timing) -> None:
    """One DPU task of one row run, its variants cut into channel chunks (``variant_boxes``)
    in the modes the cost model picks."""
    cols, rows, occ = extent
    wait = f" waits({', '.join(waits)})" if waits else ""
    prog.dpu.append(f"  {name}: {head}{wait} updates({done}) {{")
    for r0, r1, z0, z1, _ in variant_boxes(op, [(0, rows, "")], (0, occ - 1)):
        mode = choose_mode(_workload(op, x, cols, rows, z1 - z0 + 1, kernel), timing.dpu)
        prog.dpu.append(f"    variant start(0, {r0}, {z0}) end({cols - 1}, {r1 - 1}, {z1}) "
                        f"mode({mode})")
    prog.dpu.append("  }")
