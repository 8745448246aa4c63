"""An ``IndexedGather`` (ONNX Gather on run-time indices: an embedding lookup) as the ACT
SHAVE library kernel ``gather`` (kernels/gather.s, docs/kernels.md).

On the NPU the indices are only known when the model runs, so no DMA can be planned per
row (the copy ops' ``lower_dma`` plans them from constant indices).  A table that does
not fit CMX is either left in DDR or streamed through CMX, whichever the cost model finds
cheaper (``table_in_ddr``: few indices over a large table read from DDR, many indices
over a smaller one stream):

- **in DDR** (``_emit_from_ddr``): an ACT SHAVE reads DDR through its caches
  (``vpuc/abi/ddr_aperture.py``), so the kernel binds the table where it lies and reads
  only the rows its indices pick, each paying the DDR read latency
  (``vpuc/cost/shave_ddr.py``).  The indices are shared out over every ACT SHAVE of
  both tiles, whose calls overlap those latencies; tile 1's calls write a result of its
  own, copied into tile 0's by one CMX -> CMX DMA before the one store.  The kernel
  takes the table as declared: ``[K, R]`` gathered along 0 or ``[A, K, R]`` along 1.
- **streamed**: in chunks of as many rows along the gathered axis as two chunk slots
  leave room for beside the output and the indices: chunk k is loaded into slot k % 2
  while the kernel runs on chunk k - 1, and each kernel call copies the rows whose index
  falls in its chunk ``[first, first + K)`` into the one output buffer, which is stored
  once.  A table that fits is one chunk, one load and one call.  The bytes are seen by
  the kernel as

    data    [A, K, R]   A = the dims before the axis, R = those after it (a row)
    indices [N]         N = every index (the indices' dims flattened)
    output  [A, N, R]

  re-typed by the plain (flattening) DMA copies that load and store them.  The chunks'
  kernel calls are ordered (each waits for the one before: they write one buffer), the
  chunks' loads overlap them; all on tile 0.  The cost: every byte of the table crosses
  DDR -> CMX once per inference, each call reads every index once
  (``vpuc/cost/gather.py``).
"""

from __future__ import annotations

from math import prod

from vpuc.cost.blocks import Move, block_stages, pipeline_cycles
from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.cost.gather import gather_call_cycles
from vpuc.cost.shave_ddr import DdrRead, ddr_read_cycles
from vpuc.cost.shave import act_invocation_cycles
from vpuc.cost.timing import Timing
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value, label, type_text
from vpuc.ir.graph import GraphOp
from vpuc.ir.types import DimsOrder, ElemType, TensorType

GATHER_OP = "IndexedGather"
SLOTS = 2
SHAVES_PER_TILE = 2    # NPU37XX's ACT SHAVEs per tile (vpuc/archs/npu37xx.toml), as act_split.py
CANDIDATES = 8         # chunk sizes tried: the largest that fits, its half, ..., its eighth
ALIGN = 64             # bytes each CMX buffer may lose to alignment


def gather_shape(op: GraphOp, data: TensorType, indices: TensorType) -> tuple[int, int, int, int]:
    """(A, K, R, N): the data as [A, K, R] around the axis, and the number of indices."""
    axis = op.attrs["axis"] % data.rank
    return (prod(data.dims[:axis]), data.dims[axis], prod(data.dims[axis + 1:]),
            prod(indices.dims))


def chunk_rows(op: GraphOp, data: TensorType, indices: TensorType, budget: int,
               timing: Timing | None = None) -> int:
    return streamed(op, data, indices, budget, timing)[0]


def streamed(op: GraphOp, data: TensorType, indices: TensorType, budget: int,
             timing: Timing | None = None) -> tuple[int, float | None]:
    """The table rows per chunk: all of them when they fit beside the output and the
    indices; else, among the chunk sizes two slots leave room for (the largest, a half of
    it, a third ...), the one whose load -> kernel flow shop the cost model finds fastest:
    larger chunks read every index fewer times, smaller ones expose less of the first
    load and of the last call."""
    a, k, r, n = gather_shape(op, data, indices)
    row = a * r * data.elem.nbytes                       # one row index's bytes, all of A
    room = budget - a * n * r * data.elem.nbytes - 4 * n - 4 * ALIGN
    if k * row <= room:
        return k, None
    largest = min(room // (SLOTS * row), k)
    if largest < 1:
        raise VpucError(f"{op.kind} {op.label}: its output ({a * n * r * data.elem.nbytes} "
                        f"bytes) and two table rows ({row} bytes each) do not fit the "
                        f"{budget} bytes of CMX a tile has", op.loc)
    if timing is None:
        return largest, None
    out = Move(a * n * r * data.elem.nbytes, data.elem.nbytes)
    index_load = block_stages([Move(4 * n, 4)], 0.0, [], timing).load
    def estimate(rows: int) -> float:
        chunks = -(-k // rows)
        stages = []
        for c in range(chunks):
            size = min(rows, k - c * rows)
            copies = n * a * size / k              # the indices a chunk takes, if uniform
            call = act_invocation_cycles(gather_call_cycles(n, round(copies), r * data.elem.nbytes),
                                         timing.shave_cycle, timing.dispatch["ACT_SHAVE"])
            stages.append(block_stages([Move(size * row, data.elem.nbytes)], call,
                                       [out] if c == chunks - 1 else [], timing))
        return pipeline_cycles(stages, tiles=1, resident_cycles=index_load)
    candidates = sorted({max(1, largest // j) for j in range(1, CANDIDATES + 1)}, reverse=True)
    best = min(candidates, key=estimate)
    return best, estimate(best)


def kernel_table_shape(op: GraphOp, data: TensorType) -> bool:
    """Whether the kernel takes ``data`` bound as it is declared: [K, R] gathered along 0
    (A = 1), or [A, K, R] along 1 (a table in DDR is bound whole, not re-typed by a DMA)."""
    axis = op.attrs["axis"] % data.rank
    return (data.rank, axis) in ((2, 0), (3, 1))


def ddr_parts(n: int, tiles: int = 1) -> list[tuple[int, int, int]]:
    """The indices' share of each call of a gather from a table in DDR: (tile, lo, hi), the
    indices [lo, hi), one part per ACT SHAVE of ``tiles`` tiles, tile 0's first (each call
    waits out its rows' DDR latencies, so calls on every SHAVE overlap them)."""
    parts = max(1, min(SHAVES_PER_TILE * tiles, n))
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(i // SHAVES_PER_TILE, lo, hi) for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))]


def table_in_ddr_cycles(op: GraphOp, data: TensorType, indices: TensorType,
                        timing: Timing, tiles: int = 1) -> float:
    """The cost model's cycles of the gather with its table left in DDR: the indices' load,
    the calls on every ACT SHAVE side by side (the largest share's SHAVE cycles and DDR
    reads, run by run), the other tiles' rows copied into tile 0's (CMX -> CMX), and the
    output's store, one after another."""
    a, k, r, n = gather_shape(op, data, indices)
    elem = data.elem.nbytes
    parts = ddr_parts(n, tiles)
    share = max(hi - lo for _, lo, hi in parts) if n else 0
    others = sum(hi - lo for t, lo, hi in parts if t > 0)
    gather_in = 0.0
    if others:
        copy = transfer_cost(False, a * others * r * elem, elem, False, a * others * r * elem,
                             False, timing.dma)
        gather_in = dma_task_cycles(copy, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)
    shave = act_invocation_cycles(gather_call_cycles(share, share * a, r * elem),
                                  timing.shave_cycle, timing.dispatch["ACT_SHAVE"])
    reads = ddr_read_cycles(DdrRead(a * share, r * elem), timing.dma.ddr_read_latency,
                            timing.ddr_bytes_per_cycle)
    moves = block_stages([Move(4 * n, 4)], 0.0, [Move(a * n * r * elem, elem)], timing)
    return moves.load + shave + reads + gather_in + moves.store


def table_in_ddr(op: GraphOp, data: TensorType, indices: TensorType, budget: int,
                 timing: Timing | None, tiles: int = 1) -> bool:
    """Leave the table in DDR: when it does not fit CMX, the kernel can take it as declared,
    and the cost model finds reading the gathered rows from DDR cheaper than streaming it."""
    if timing is None or not kernel_table_shape(op, data):
        return False
    rows, stream = streamed(op, data, indices, budget, timing)
    return stream is not None and \
        table_in_ddr_cycles(op, data, indices, timing, tiles) < stream


def _emit_from_ddr(prog: ProgramText, p: str, kernel: str, table: Value, indices: Value,
                   res_type: TensorType, k: int, tiles: int, waits: str) -> None:
    """The calls reading the rows from ``table`` in DDR, ``ddr_parts``' share of the indices
    each: tile 0's into the result (``%{p}rows``) directly; another tile's into a result of
    its own in its CMX, beside its own copy of the indices, then copied into tile 0's rows
    by one CMX -> CMX DMA.  Every index load updates ``%{p}indexed``, every call on tile 0
    and every copy ``%{p}done0``, which the store waits on."""
    lp, n = label(p), prod(indices.type.dims)
    parts = ddr_parts(n, tiles)
    axis = res_type.rank - 2                     # the indices' axis of [A, N, R] or [N, R]

    def rows_view(base: str, lo: int, hi: int, dims: tuple[int, ...]) -> str:
        return f"{base}[{', '.join(f'{lo}:{hi}' if i == axis else f'0:{d}' for i, d in enumerate(dims))}]"

    for t in sorted({t for t, _, _ in parts}):
        mine = [(lo, hi) for tt, lo, hi in parts if tt == t]
        first, last = mine[0][0], mine[-1][1]
        idx, res, done, at, dims = f"%{p}idx", f"%{p}rows", f"%{p}done0", 0, res_type.dims
        if t > 0:
            idx, res, done, at = f"%{p}idx.t{t}", f"%{p}rows.t{t}", f"%{p}done.t{t}", first
            dims = tuple(last - first if i == axis else d for i, d in enumerate(res_type.dims))
            own = TensorType(dims, res_type.elem, DimsOrder.identity(len(dims)))
            prog.cmx += [f"cmx {idx} : {type_text(TensorType((n,), ElemType.I32, DimsOrder.identity(1)))} tile {t}",
                         f"cmx {res} : {type_text(own)} tile {t}"]
            prog.barriers.append(f"barrier {done}")
            prog.dma.append(f"  {lp}load_idx.t{t}: dma %{indices.name} -> {idx} channel 0"
                            f"{waits} updates(%{p}indexed)")
        for i, (lo, hi) in enumerate(mine):
            idx_i, res_i = idx, res
            if len(parts) > 1:
                idx_i, res_i = f"{idx}.p{i}", f"{res}.p{i}"
                prog.views += [f"view {idx_i} = {idx}[{lo}:{hi}]",
                               f"view {res_i} = {rows_view(res, lo - at, hi - at, dims)}"]
            prog.act.append(f"  {lp}g{t}.{i}: sw @{kernel} on tile {t} inputs(%{table.name} as "
                            f"%a0, {idx_i} as %a1) outputs({res_i} as %r0) waits(%{p}indexed) "
                            f"updates({done}) {{")
            prog.act += ["    %c0 = const 0 : i32", f"    %c1 = const {k} : i32",
                         "    run(%a0, %a1, %r0, %c0, %c1)", "  }"]
        if t > 0:                        # this tile's rows into tile 0's
            into = f"%{p}rows.from{t}"
            prog.views.append(f"view {into} = {rows_view(f'%{p}rows', first, last, res_type.dims)}")
            prog.dma.append(f"  {lp}join{t}: dma {res} -> {into} channel {prog.store_channel} "
                            f"waits({done}) updates(%{p}done0)")
    prog.barriers.append(f"barrier %{p}done0")


def _identity(t: TensorType) -> bool:
    return t.order == DimsOrder.identity(t.rank)


def emit_gather(prog: ProgramText, op: GraphOp, data: Value, indices: Value, out: Value, *,
                budget: int, prefix: str, gate: tuple[str, ...], finish: str | None,
                tiles: int = 1) -> None:
    """Add the gather's loads, kernel calls and store to ``prog`` (the values in DDR)."""
    p, lp = prefix, label(prefix)
    if not all(_identity(v.type) for v in (data, indices, out)):
        raise VpucError(f"{op.kind} {op.label}: its values are laid out "
                        f"{data.type.order}/{indices.type.order}/{out.type.order}; the gather "
                        "kernel takes them in their logical order", op.loc)
    a, k, r, n = gather_shape(op, data.type, indices.type)
    elem = data.type.elem
    in_ddr = table_in_ddr(op, data.type, indices.type, budget, prog.timing, tiles)
    rows = k if in_ddr else chunk_rows(op, data.type, indices.type, budget, prog.timing)
    chunks = -(-k // rows)
    kernel = f"gather_{elem}"
    decl = (f"kernel @{kernel}(data: memref<*x{elem}>, indices: memref<*xi32>, "
            f"output: memref<*x{elem}>, first: i32, extent: i32) from library \"gather\"")
    prog.declare_kernel(decl)
    idx, res = f"%{p}idx", f"%{p}rows"
    prog.cmx.append(f"cmx {idx} : {type_text(TensorType((n,), ElemType.I32, DimsOrder.identity(1)))} tile 0")
    res_dims = (n, r) if in_ddr and data.type.rank == 2 else (a, n, r)
    prog.cmx.append(f"cmx {res} : {type_text(TensorType(res_dims, elem, DimsOrder.identity(len(res_dims))))} tile 0")
    for s in range(0 if in_ddr else min(SLOTS, chunks)):
        prog.cmx.append(f"cmx %{p}table.s{s} : "
                        f"{type_text(TensorType((a, rows, r), elem, DimsOrder.identity(3)))} tile 0")
    gate_waits = ", ".join(f"%{g}" for g in gate)
    waits = f" waits({gate_waits})" if gate else ""
    prog.barriers.append(f"barrier %{p}indexed")
    prog.dma.append(f"  {lp}load_idx: dma %{indices.name} -> {idx} channel 0{waits} "
                    f"updates(%{p}indexed)")
    if in_ddr:
        _emit_from_ddr(prog, p, kernel, data, indices,
                       TensorType(res_dims, elem, DimsOrder.identity(len(res_dims))), k, tiles,
                       waits)
    axis = op.attrs["axis"] % data.type.rank
    for c in range(0 if in_ddr else chunks):
        first, size = c * rows, min(rows, k - c * rows)
        s = c % SLOTS
        src, slot = f"%{data.name}", f"%{p}table.s{s}"
        if chunks > 1:
            src = f"%{p}chunk{c}"
            spans = ", ".join(f"{first}:{first + size}" if i == axis else f"0:{d}"
                              for i, d in enumerate(data.type.dims))
            prog.views.append(f"view {src} = %{data.name}[{spans}]")
        if size != rows:                         # the last chunk: the slot's first rows
            slot = f"%{p}table.s{s}.last"
            prog.views.append(f"view {slot} = %{p}table.s{s}[0:{a}, 0:{size}, 0:{r}]")
        prog.barriers += [f"barrier %{p}loaded{c}", f"barrier %{p}done{c}"]
        before = c - SLOTS
        load_waits = f" waits(%{p}done{before})" if before >= 0 else waits
        prog.dma.append(f"  {lp}load{c}: dma {src} -> {slot} channel 0{load_waits} "
                        f"updates(%{p}loaded{c})")
        after = [f"%{p}loaded{c}", f"%{p}indexed" if c == 0 else f"%{p}done{c - 1}"]
        prog.act.append(f"  {lp}g{c}: sw @{kernel} on tile 0 inputs({slot} as %a0, {idx} as %a1) "
                        f"outputs({res} as %r0) waits({', '.join(after)}) updates(%{p}done{c}) {{")
        prog.act += [f"    %c0 = const {first} : i32", f"    %c1 = const {k} : i32",
                     "    run(%a0, %a1, %r0, %c0, %c1)", "  }"]
    updates = f" updates(%{finish})" if finish else ""
    prog.dma.append(f"  {lp}store: dma {res} -> %{out.name} channel {prog.store_channel} "
                    f"waits(%{p}done{chunks - 1}){updates}")
