"""A ``TopK`` graph op (ONNX TopK along the last axis: its values or its indices) as the
ACT SHAVE library kernel ``topk`` (kernels/topk.s, docs/kernels.md).

The input is seen by the kernel as ``[R, N]`` (R = the dims before the last, N the last),
its two outputs as ``[R, K]``: the op's part (values or i32 indices) is stored to DDR,
the other output stays a CMX scratch buffer.  All rows that fit one tile's CMX budget are
one call; a larger input is taken in chunks along its first dim (so a chunk is a plain
view of the DDR value), loaded, sorted and stored in turn on tile 0.  A single slice of
the first dim that does not fit is refused, naming the op.  The importer picks this
lowering where ``vpuc/cost/topk.py`` finds it cheaper than ArgMax's rounds.
"""

from __future__ import annotations

from math import prod

from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value, label, type_text
from vpuc.ir.graph import GraphOp
from vpuc.ir.types import DimsOrder, ElemType, TensorType

TOPK_OP = "TopK"
ALIGN = 64             # bytes each CMX buffer may lose to alignment


def chunk_slices(op: GraphOp, x: TensorType, budget: int) -> int:
    """Slices of the input's first dim per kernel call: all of them when they fit."""
    k, n = op.attrs["k"], x.dims[-1]
    rows_per_slice = prod(x.dims[1:-1]) if x.rank > 1 else 1
    slice_bytes = rows_per_slice * (n * x.elem.nbytes + k * (x.elem.nbytes + 4))
    first = x.dims[0] if x.rank > 1 else 1
    fit = (budget - 3 * ALIGN) // slice_bytes
    if fit < 1:
        raise VpucError(f"{op.kind} {op.label}: one slice of its input's first dim, "
                        f"{rows_per_slice} row(s) of {n} values and their {k} kept values and "
                        f"indices ({slice_bytes} bytes), does not fit the {budget} bytes of CMX "
                        "a tile has", op.loc)
    return min(first, fit)


def emit_topk(prog: ProgramText, op: GraphOp, x: Value, out: Value, *, budget: int,
              prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    """Add the TopK's loads, kernel calls and stores to ``prog`` (the values in DDR)."""
    p, lp = prefix, label(prefix)
    if x.type.order != DimsOrder.identity(x.type.rank) or \
            out.type.order != DimsOrder.identity(out.type.rank):
        raise VpucError(f"{op.kind} {op.label}: its values are laid out {x.type.order}/"
                        f"{out.type.order}; the topk kernel takes them in their logical order",
                        op.loc)
    k, n, elem = op.attrs["k"], x.type.dims[-1], x.type.elem
    per = chunk_slices(op, x.type, budget)
    first = x.type.dims[0] if x.type.rank > 1 else 1
    inner = prod(x.type.dims[1:-1]) if x.type.rank > 1 else 1
    chunks = -(-first // per)
    kernel = f"topk_{elem}"
    decl = (f"kernel @{kernel}(input: memref<*x{elem}>, values: memref<*x{elem}>, "
            f"indices: memref<*xi32>, k: i32, largest: i32) from library \"topk\"")
    prog.declare_kernel(decl)
    rows = per * inner
    buffers = {"in": TensorType((rows, n), elem, DimsOrder.identity(2)),
               "values": TensorType((rows, k), elem, DimsOrder.identity(2)),
               "indices": TensorType((rows, k), ElemType.I32, DimsOrder.identity(2))}
    for name, t in buffers.items():
        prog.cmx.append(f"cmx %{p}{name} : {type_text(t)} tile 0")
    part = "values" if op.attrs["part"] == "values" else "indices"
    gate_waits = ", ".join(f"%{g}" for g in gate)
    for c in range(chunks):
        start, size = c * per, min(per, first - c * per)
        src, dst = f"%{x.name}", f"%{out.name}"
        cmx = {name: f"%{p}{name}" for name in buffers}
        if chunks > 1:
            for side, value in (("src", x), ("dst", out)):
                spans = ", ".join(f"{start}:{start + size}" if i == 0 else f"0:{d}"
                                  for i, d in enumerate(value.type.dims))
                prog.views.append(f"view %{p}{side}{c} = %{value.name}[{spans}]")
            src, dst = f"%{p}src{c}", f"%{p}dst{c}"
        if size != per:                       # the last chunk: the buffers' first rows
            for name, t in buffers.items():
                prog.views.append(f"view %{p}{name}.last = %{p}{name}[0:{size * inner}, 0:{t.dims[1]}]")
                cmx[name] = f"%{p}{name}.last"
        prog.barriers += [f"barrier %{p}loaded{c}", f"barrier %{p}done{c}"]
        waits = f" waits(%{p}done{c - 1})" if c else (f" waits({gate_waits})" if gate else "")
        prog.dma.append(f"  {lp}load{c}: dma {src} -> {cmx['in']} channel 0{waits} "
                        f"updates(%{p}loaded{c})")
        after = [f"%{p}loaded{c}"] + ([f"%{p}stored{c - 1}"] if c else [])
        prog.act.append(f"  {lp}t{c}: sw @{kernel} on tile 0 inputs({cmx['in']} as %a0) "
                        f"outputs({cmx['values']} as %r0, {cmx['indices']} as %r1) "
                        f"waits({', '.join(after)}) updates(%{p}done{c}) {{")
        prog.act += [f"    %c0 = const {k} : i32", f"    %c1 = const {int(op.attrs['largest'])} : i32",
                     "    run(%a0, %r0, %r1, %c0, %c1)", "  }"]
        last = c == chunks - 1
        updates = [f"%{p}stored{c}"] if not last else ([f"%{finish}"] if finish else [])
        if not last:
            prog.barriers.append(f"barrier %{p}stored{c}")
        prog.dma.append(f"  {lp}store{c}: dma {cmx[part]} -> {dst} channel {prog.store_channel} "
                        f"waits(%{p}done{c})" + (f" updates({', '.join(updates)})" if updates else ""))
