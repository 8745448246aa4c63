"""A task-level program for a chain of ACT SHAVE kernels, in blocks over the tiles.

The shape compiled elementwise networks take (and ``examples/double_buffer.vir``
writes by hand): the tensors are cut along one logical axis into blocks; block
*k* runs on tile ``k % tiles`` in CMX slot ``(k // tiles) % 2`` (double
buffering), and is

    DMA in (channel 0) -> stage 1 -> ... -> stage n -> DMA out (channel 1)

where each stage is one kernel invocation per ACT SHAVE of the tile, each on
its part of the block (views of the block's CMX buffers), and every value
between stages stays in CMX.  Barriers: ``loaded``/``done``/``stored`` per
block, one per stage boundary; the loads of block k wait for ``done`` of the
block that used its slot before (k - 2*tiles), its first stage for that
block's ``stored``.  Buffers are one per (value, tile, slot), placed by
allocate-cmx; a constant that does not span the axis is loaded into each slot
once.

``build_program(...)`` returns VIR text (the verifier checks what it builds);
``lower-graph`` (fused subgraphs, generated kernels) and ``bench/fusion_bench.py``
(fused and unfused) use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vpuc.ir.module import ConstInit
from vpuc.ir.types import TensorType

SLOTS = 2


@dataclass
class Value:
    name: str
    type: TensorType             # the whole tensor (logical dims, dims order)
    kind: str                    # input, output, const or temp
    init: ConstInit | None = None
    also_output: bool = False    # a temp that is also a graph output


@dataclass
class Stage:
    kernel: str
    inputs: list[str]
    outputs: list[str]
    scalars: list[tuple[str, float]] = field(default_factory=list)   # (elem, value), after memrefs
    parts: int = 2               # invocations per block (one per ACT SHAVE)


def sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.$]", "_", name)


def _type_text(t: TensorType) -> str:
    text = "x".join([str(d) for d in t.dims] + [str(t.elem)])
    return text + (f" {t.order}" if t.rank > 1 else "")


def block_type(t: TensorType, axis: int, rank: int, size: int) -> TensorType:
    """``t`` with its dim along master axis ``axis`` (right-aligned ranks) set to ``size``
    when it spans that axis (dims of 1 broadcast and stay)."""
    a = axis - (rank - t.rank)
    if a < 0 or t.dims[a] == 1:
        return t
    dims = tuple(size if i == a else d for i, d in enumerate(t.dims))
    return TensorType(dims, t.elem, t.order)


def _slices(t: TensorType, axis: int, rank: int, start: int, stop: int) -> str:
    a = axis - (rank - t.rank)
    parts = []
    for i, d in enumerate(t.dims):
        parts.append(f"{start}:{stop}" if i == a and d != 1 else f"0:{d}")
    return ", ".join(parts)


def build_program(module: str, kernel_decls: list[str], values: list[Value],
                  stages: list[Stage], *, axis: int, rank: int, extent: int, blocks: int,
                  tiles: int = 2, stacks: int = 16384, arch: str = "NPU37XX") -> str:
    if extent % blocks:
        raise ValueError(f"{blocks} blocks do not divide the extent {extent}")
    chunk = extent // blocks
    by_name = {v.name: v for v in values}
    lines = [f"module @{module} arch {arch}", ""]
    lines += kernel_decls
    lines += ['kernel @runtime() from library "runtime"',
              f"runtime @runtime stacks({', '.join([str(stacks)] * tiles)})", ""]
    for v in values:
        t = _type_text(v.type)
        if v.kind == "input":
            lines.append(f"input %{v.name} : {t}")
        elif v.kind == "output" or v.also_output:
            lines.append(f"output %{v.name} : {t}")
        elif v.kind == "const":
            lines.append(f"const %{v.name} : {t} = {v.init}")
    used_tiles = min(tiles, blocks)
    for v in values:
        bt = _type_text(block_type(v.type, axis, rank, chunk))
        for t in range(used_tiles):
            for s in range(min(SLOTS, -(-blocks // used_tiles))):
                lines.append(f"cmx %{v.name}.t{t}s{s} : {bt} tile {t}")
    lines.append("")
    moved = [v for v in values if v.kind in ("input", "const", "output") or v.also_output]
    for k in range(blocks):
        for v in moved:
            if v.type.is_static:
                lines.append(f"view %{v.name}.b{k} = %{v.name}"
                             f"[{_slices(v.type, axis, rank, k * chunk, (k + 1) * chunk)}]")
    parts_of: dict[tuple, list[str]] = {}
    for k in range(min(blocks, used_tiles * SLOTS)):
        t, s = k % used_tiles, (k // used_tiles) % SLOTS
        for st in stages:
            for v in st.inputs + st.outputs:
                key = (v, t, s, st.parts)
                if key in parts_of:
                    continue
                if st.parts == 1 or chunk % st.parts:
                    parts_of[key] = [f"%{v}.t{t}s{s}"]
                    continue
                bt, sub = block_type(by_name[v].type, axis, rank, chunk), chunk // st.parts
                names = []
                for j in range(st.parts):
                    name = f"%{v}.t{t}s{s}p{j}"
                    lines.append(f"view {name} = %{v}.t{t}s{s}"
                                 f"[{_slices(bt, axis, rank, j * sub, (j + 1) * sub)}]")
                    names.append(name)
                parts_of[key] = names
    reuse = used_tiles * SLOTS
    barriers, dma, act = [], [], []
    for k in range(blocks):
        t, s = k % used_tiles, (k // used_tiles) % SLOTS
        before = k - reuse
        later = k + reuse < blocks
        barriers += [f"barrier %loaded{k}", f"barrier %done{k}"]
        if later:
            barriers.append(f"barrier %stored{k}")
        barriers += [f"barrier %stage{k}.{i}" for i in range(len(stages) - 1)]
        for v in values:
            if v.kind not in ("input", "const"):
                continue
            if v.kind == "const" and before >= 0 and block_type(v.type, axis, rank, 1) == v.type:
                continue                 # the same for every block: already in this slot
            src = f"%{v.name}.b{k}" if v.type.is_static else f"%{v.name}"
            wait = f" waits(%done{before})" if before >= 0 else ""
            dma.append(f"  load{k}.{v.name}: dma {src} -> %{v.name}.t{t}s{s} channel 0{wait} "
                       f"updates(%loaded{k})")
        for v in values:
            if v.kind == "output" or v.also_output:
                dst = f"%{v.name}.b{k}" if v.type.is_static else f"%{v.name}"
                upd = f" updates(%stored{k})" if later else ""
                dma.append(f"  store{k}.{v.name}: dma %{v.name}.t{t}s{s} -> {dst} channel 1 "
                           f"waits(%done{k}){upd}")
        for i, st in enumerate(stages):
            waits = [f"%loaded{k}"] + ([f"%stored{before}"] if before >= 0 and i == 0 else []) \
                if i == 0 else [f"%stage{k}.{i - 1}"]
            update = f"%done{k}" if i == len(stages) - 1 else f"%stage{k}.{i}"
            ins = [parts_of[(v, t, s, st.parts)] for v in st.inputs]
            outs = [parts_of[(v, t, s, st.parts)] for v in st.outputs]
            count = len(outs[0]) if outs else 1
            for j in range(count):
                pick = lambda names: names[j] if len(names) > 1 else names[0]  # noqa: E731
                binds_in = ", ".join(f"{pick(n)} as %a{m}" for m, n in enumerate(ins))
                binds_out = ", ".join(f"{pick(n)} as %r{m}" for m, n in enumerate(outs))
                region = [f"    %c{m} = const {value!r} : {elem}"
                          for m, (elem, value) in enumerate(st.scalars)]
                args = [f"%a{m}" for m in range(len(ins))] + [f"%r{m}" for m in range(len(outs))]
                args += [f"%c{m}" for m in range(len(st.scalars))]
                act.append(f"  s{k}.{i}.{j}: sw @{st.kernel} on tile {t} inputs({binds_in}) "
                           f"outputs({binds_out}) waits({', '.join(waits)}) updates({update}) {{")
                act += region + [f"    run({', '.join(args)})", "  }"]
    lines += [""] + barriers + ["", "tasks DMA {"] + dma + ["}", "", "tasks ACT_SHAVE {"] + act + ["}"]
    return "\n".join(lines) + "\n"
