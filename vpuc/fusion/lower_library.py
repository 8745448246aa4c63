"""Library kernels for the layers lower-graph takes from the ACT SHAVE library.

Softmax, LogSoftmax, MVN (LayerNormalization and InstanceNormalization without
their scale and shift) and ReduceMean/ReduceSum/ReduceMax run as the library
kernels ``softmax``, ``log_softmax``, ``mvn``, ``reduce_mean``, ``reduce_sum``
and ``reduce_max`` (kernels/*.s, docs/kernels.md).  Those kernels work along
R, the last *logical* dim, wherever it lies in memory: the shared driver finds
R through the memref's dims order and walks it with its stride (the group
path: 8 rows at once, one per lane, strided loads along R).  Two ways in:

- **in the block pipeline** (``pipeline_call``): an op whose reduced axis is
  already the last logical dim (a reduction keeping its dims) is one stage of
  an ACT segment, like a fused subgraph; lower-graph then never cuts the
  blocks along that dim;
- **as its own segment** (``library_segment`` / ``emit_library_segment``): any
  other axis.  The op's input and output are re-typed, not moved: the CMX
  buffer holds the tensor's bytes unchanged, declared with the kept dims
  first and the reduced axes merged into one last dim, under the dims order
  that puts every dim where it already is in memory (Softmax over C of a dense
  NCHW tensor is the kernel on N x H x W x C in order NHWC).  The DMA load and
  store are plain (flattening) copies.  This is what the hardware would do:
  the SHAVE kernels of the NPU plugin take the axis and stride along it, so a
  Transpose around the op would only add two DMA passes over the tensor
  (each as long as the kernel's own traffic) and a CMX buffer.  Reduced axes
  must be adjacent in memory (they merge into one dim); ``split_reductions`` turns
  a reduction over axes apart into a chain of such reductions before tokenizing.

Own segments are cut into blocks along the input's outermost memory dim of
extent > 1 when it is kept (its slices are contiguous in DDR), block k on tile
k % tiles in CMX slot (k // tiles) % 2, with the block pipeline's barriers:
load -> kernel -> store, a slot's next load waiting for its kernel, its next
kernel for its store.  Each block runs as two kernel invocations, one per ACT
SHAVE of the tile, on the halves of a kept dim of even extent (strided views
of the CMX buffers when it is not the outermost), when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value, label, type_text
from vpuc.ir.types import DimsOrder, Dynamic, TensorType

KERNEL_OF = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "MVN": "mvn",
             "ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}
REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax")
SLOTS = 2


@dataclass(frozen=True)
class LibraryCall:
    """One library kernel run: its library name, element types and scalar arguments."""

    library: str
    elem_in: str
    elem_out: str
    scalars: tuple[tuple[str, float | int], ...] = ()      # (elem, value), after the memrefs

    @property
    def kernel(self) -> str:
        return f"{self.library}_{self.elem_in}" + (
            "" if self.elem_in == self.elem_out else f"_{self.elem_out}")

    def declaration(self) -> str:
        params = [f"input: memref<*x{self.elem_in}>", f"output: memref<*x{self.elem_out}>"]
        if self.library == "mvn":
            params += ["eps: f32", "eps_outside: i32"]
        return f"kernel @{self.kernel}({', '.join(params)}) from library \"{self.library}\""


@dataclass
class LibrarySegment:
    """An op run by a library kernel as its own segment, on re-typed buffers."""

    op: object
    call: LibraryCall
    view_in: TensorType          # the input's bytes: kept dims, then the reduced axes merged
    view_out: TensorType
    cut: tuple[int, int, int] | None   # (input axis, output axis, view dim) to block along


def reduced_axes(op, rank: int) -> tuple[int, ...]:
    """The logical axes of the rank-``rank`` input that ``op`` reduces along, sorted."""
    if op.kind in ("Softmax", "LogSoftmax"):
        return (op.attrs["axis"] % rank,) if rank else ()
    return tuple(sorted({a % rank for a in op.attrs["axes"]})) if rank else ()


def _call(op, elem_in: str) -> LibraryCall | None:
    if op.kind == "MVN":
        if not op.attrs["normalize_variance"]:
            return None
        outside = int(op.attrs["eps_mode"] == "outside_sqrt")
        return LibraryCall("mvn", elem_in, op.type.elem.value,
                           (("f32", float(op.attrs["eps"])), ("i32", outside)))
    return LibraryCall(KERNEL_OF[op.kind], elem_in, op.type.elem.value)


def pipeline_call(op, in_type: TensorType) -> LibraryCall | None:
    """The kernel run of ``op`` as a block-pipeline stage: it reduces exactly the last
    logical dim (and keeps the dims), with element types the kernel takes."""
    if op.kind not in KERNEL_OF or in_type.elem.value not in ("f16", "f32") or in_type.rank == 0:
        return None
    if reduced_axes(op, in_type.rank) != (in_type.rank - 1,):
        return None
    if op.kind in REDUCTIONS and not op.attrs["keep_dims"]:
        return None
    if op.kind not in REDUCTIONS and in_type.elem != op.type.elem:
        return None
    return _call(op, in_type.elem.value)


def library_segment(op, in_type: TensorType) -> LibrarySegment | None:
    """``op`` as its own segment: any axes adjacent in memory, static shapes."""
    if op.kind not in KERNEL_OF or in_type.elem.value not in ("f16", "f32"):
        return None
    axes = reduced_axes(op, in_type.rank)
    if not axes:
        return None
    if any(isinstance(d, Dynamic) for d in in_type.dims + op.type.dims):
        return None
    if op.kind not in REDUCTIONS and in_type.elem != op.type.elem:
        return None
    call = _call(op, in_type.elem.value)
    if call is None:
        return None
    perm = in_type.order.perm
    where = sorted(perm.index(a) for a in axes)
    if where != list(range(where[0], where[0] + len(where))):
        return None                                    # not adjacent in memory
    kept = [a for a in range(in_type.rank) if a not in axes]
    merged = 1
    for a in axes:
        merged *= in_type.dims[a]
    view_in = _view(kept, merged, in_type, perm)
    if op.kind in REDUCTIONS:
        out_kept = kept if op.attrs["keep_dims"] else list(range(len(kept)))
        out_perm = op.type.order.perm
        order = [out_kept.index(a) for a in out_perm if a in out_kept] + [len(kept)]
        view_out = TensorType(tuple(op.type.dims[a] for a in out_kept) + (1,), op.type.elem,
                              DimsOrder(tuple(order)))
        out_axis = (lambda a: a) if op.attrs["keep_dims"] else kept.index
    else:
        view_out = _view(kept, merged, op.type, op.type.order.perm)
        out_axis = lambda a: a  # noqa: E731
    cut = None
    outer = _outermost(in_type)
    if outer is not None and outer not in axes and _outermost(op.type) == out_axis(outer):
        cut = (outer, out_axis(outer), kept.index(outer))
    return LibrarySegment(op, call, view_in, view_out, cut)


def _outermost(t: TensorType) -> int | None:
    """The logical dim outermost in memory among those of extent > 1: slices along it
    are contiguous."""
    return next((a for a in t.order.perm if t.dims[a] > 1), None)


def _view(kept: list[int], merged: int, t: TensorType, perm: tuple[int, ...]) -> TensorType:
    """``t``'s bytes as kept dims then one merged last dim (placed where the reduced
    axes lie in memory)."""
    order, placed = [], False
    for a in perm:
        if a in kept:
            order.append(kept.index(a))
        elif not placed:
            order.append(len(kept))
            placed = True
    dims = tuple(t.dims[a] for a in kept) + (merged,)
    return TensorType(dims, t.elem, DimsOrder(tuple(order)))


def library_problem(op, in_type: TensorType) -> str | None:
    """Why ``op`` (a kind some kernel runs) has no library lowering, for the error."""
    if op.kind not in KERNEL_OF:
        return None
    if in_type.elem.value not in ("f16", "f32"):
        return f"the library kernels take f16 and f32, not {in_type.elem}"
    if op.kind == "MVN" and not op.attrs["normalize_variance"]:
        return "the library mvn normalizes the variance (normalize_variance = false)"
    if any(isinstance(d, Dynamic) for d in in_type.dims):
        return "the axis is not the last logical dim and the shape is dynamic"
    return (f"the reduced axes {list(reduced_axes(op, in_type.rank))} are not adjacent in memory "
            f"(order {in_type.order})")


def _blocks(seg: LibrarySegment, tiles: int, budget: int) -> int:
    total = seg.view_in.nbytes + seg.view_out.nbytes
    extent = seg.view_in.dims[seg.cut[2]] if seg.cut else 1
    for blocks in range(min(tiles, extent), extent + 1):
        if extent % blocks == 0 and 2 * total // blocks <= budget:
            return blocks
    if 2 * total // extent <= budget or extent == 1 and total <= budget:
        return extent
    raise VpucError(f"{seg.op.kind} {seg.op.label}: a block of {total // extent} bytes does not "
                    "fit CMX; cutting along a reduced axis is not supported", seg.op.loc)


def emit_library_segment(prog: ProgramText, seg: LibrarySegment, src: Value, dst: Value, *,
                         tiles: int, budget: int, prefix: str, gate: tuple[str, ...],
                         finish: str | None) -> None:
    """Add ``seg``'s loads, kernel runs and stores to ``prog`` (``src``, ``dst`` declared
    in DDR by the caller)."""
    call, p, lp = seg.call, prefix, label(prefix)
    prog.declare_kernel(call.declaration())
    blocks = _blocks(seg, tiles, budget)
    used = min(tiles, blocks)
    reuse = used * SLOTS
    def block_view(t: TensorType) -> TensorType:
        if seg.cut is None:
            return t
        dims = list(t.dims)
        dims[seg.cut[2]] //= blocks
        return TensorType(tuple(dims), t.elem, t.order)
    def moved(t: TensorType, side: int) -> TensorType:   # a DDR block's own type
        if seg.cut is None:
            return t
        axis = seg.cut[side]
        return TensorType(tuple(d // blocks if i == axis else d for i, d in enumerate(t.dims)),
                          t.elem, t.order)
    block_in, block_out = block_view(seg.view_in), block_view(seg.view_out)
    if _ambiguous(block_in, moved(src.type, 0)) or _ambiguous(block_out, moved(dst.type, 1)):
        block_in, block_out = _leading_one(block_in), _leading_one(block_out)
    kept = len(block_in.dims) - 1
    half = next((d for d in range(kept) if block_in.dims[d] % 2 == 0), None)
    parts: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for t in range(used):
        for s in range(min(SLOTS, -(-blocks // used))):
            names = (f"%{p}in.t{t}s{s}", f"%{p}out.t{t}s{s}")
            prog.cmx.append(f"cmx {names[0]} : {type_text(block_in)} tile {t}")
            prog.cmx.append(f"cmx {names[1]} : {type_text(block_out)} tile {t}")
            parts[t, s] = [names]
            if half is not None:
                parts[t, s] = []
                for j in range(2):
                    pair = (f"{names[0]}p{j}", f"{names[1]}p{j}")
                    prog.views.append(f"view {pair[0]} = {names[0]}[{_slice(block_in, half, j, 2)}]")
                    prog.views.append(f"view {pair[1]} = {names[1]}[{_slice(block_out, half, j, 2)}]")
                    parts[t, s].append(pair)
    gate_waits = ", ".join(f"%{g}" for g in gate)
    for k in range(blocks):
        t, s = k % used, (k // used) % SLOTS
        before, later = k - reuse, k + reuse < blocks
        src_ref, dst_ref = f"%{src.name}", f"%{dst.name}"
        if blocks > 1:
            src_ref, dst_ref = f"%{p}{src.name}.b{k}", f"%{p}{dst.name}.b{k}"
            prog.views.append(f"view {src_ref} = %{src.name}[{_slice(src.type, seg.cut[0], k, blocks)}]")
            prog.views.append(f"view {dst_ref} = %{dst.name}[{_slice(dst.type, seg.cut[1], k, blocks)}]")
        prog.barriers += [f"barrier %{p}loaded{k}", f"barrier %{p}done{k}"]
        if later:
            prog.barriers.append(f"barrier %{p}stored{k}")
        wait = (f" waits(%{p}done{before})" if before >= 0
                else f" waits({gate_waits})" if gate else "")
        prog.dma.append(f"  {lp}load{k}: dma {src_ref} -> %{p}in.t{t}s{s} channel 0{wait} "
                        f"updates(%{p}loaded{k})")
        updates = [f"%{p}stored{k}"] if later else []
        if finish and k == blocks - 1:
            updates.append(f"%{finish}")
        upd = f" updates({', '.join(updates)})" if updates else ""
        prog.dma.append(f"  {lp}store{k}: dma %{p}out.t{t}s{s} -> {dst_ref} "
                        f"channel {prog.store_channel} "
                        f"waits(%{p}done{k}){upd}")
        waits = [f"%{p}loaded{k}"] + ([f"%{p}stored{before}"] if before >= 0 else [])
        region = [f"    %c{m} = const {value!r} : {elem}" for m, (elem, value) in enumerate(call.scalars)]
        args = ["%a0", "%r0"] + [f"%c{m}" for m in range(len(call.scalars))]
        for j, (src_part, dst_part) in enumerate(parts[t, s]):
            prog.act.append(f"  {lp}s{k}.{j}: sw @{call.kernel} on tile {t} inputs({src_part} as %a0) "
                            f"outputs({dst_part} as %r0) waits({', '.join(waits)}) "
                            f"updates(%{p}done{k}) {{")
            prog.act += region + [f"    run({', '.join(args)})", "  }"]


def _ambiguous(view: TensorType, moved: TensorType) -> bool:
    """Whether ``view`` has the shape of the DDR block it is copied from or to in another dims
    order: a plain DMA copies bytes in order (a flattening copy) only between different
    shapes; between equal ones it would be a permute (VIR's rule).  Softmax over C of a
    1x16x16 CHW tensor, seen as 1x16x16 with C last, is one."""
    return view.bound_shape == moved.bound_shape and view.order != moved.order


def _leading_one(t: TensorType) -> TensorType:
    """``t`` with a leading dim of 1: the same bytes, another shape.  Both sides of a kernel
    get it, so their dims still correspond and the kernel's ranks agree."""
    return TensorType((1,) + tuple(t.dims), t.elem, DimsOrder((0,) + tuple(a + 1 for a in t.order.perm)))


def _slice(t: TensorType, axis: int, k: int, blocks: int) -> str:
    chunk = t.dims[axis] // blocks
    return ", ".join(f"{k * chunk}:{(k + 1) * chunk}" if i == axis else f"0:{d}"
                     for i, d in enumerate(t.dims))
