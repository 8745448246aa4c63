"""The "naive" unfused program of an elementwise chain: one layer per op, DDR in between.

What an NPU compiler without fusion emits when the tensor does not fit in CMX:
every op of the chain is its own software layer, tiled on its own.  For each op
in order, for every block of rows (block *k* on tile ``k % tiles``):

    DMA the block of the op's input DDR -> CMX (channel 0)
    -> one library ACT SHAVE kernel, split over the tile's two ACT SHAVEs
       (views of the block's CMX buffers, like ``vpuc.fusion.blocked_program``)
    -> DMA the block of the op's output CMX -> DDR (channel 1)

so every intermediate tensor is written to DDR in full and read back by the
next layer (two DDR scratch tensors, ping-ponged: layer *i* writes
``t{i % 2}``).  CMX holds two input and two output slots per tile (double
buffering); the *n*-th block a tile runs (counting over all layers) uses slot
``n % 2``.  Constants are 1x1x1x1 tensors, loaded into the CMX of each tile
once per layer.

Barriers, per (layer i, block k): ``loaded`` (its input block, and for the
layer's first block on a tile its constant, is in CMX), ``done`` (both kernel
halves ran), ``stored`` (its output block is in DDR).  Only what is needed:

- the load of (i + 1, k) waits for ``stored`` of (i, k) (data, through DDR);
- a load waits for ``done`` of the previous user of its input slot (write after read);
- a kernel waits for ``loaded`` and for ``stored`` of the previous user of its
  output slot (write after read);
- a store waits for ``done``;

less every wait that the task's other waits or its DMA channel's order (each
channel is a FIFO) already imply -- e.g. no slot waits when the previous user
of the slot is (i - 1, k) itself -- so a ``stored`` barrier exists only where
someone needs it.

Layer i + 1 thus starts on block k as soon as layer i's block k is in DDR (and a
slot is free), with the queues in layer-major order, as the compiler would list
the tasks.  Writing t{i % 2} again in layer i + 2 is ordered after its reads by
layer i + 1 through these chains (load -> kernel -> store of the same block).

``build_naive_program(chain, shape, blocks=...)`` returns VIR text; it passes the
``compile`` pipeline (verify, allocate-cmx, physical barriers, ...).
"""

from __future__ import annotations

# graph op -> vpuc library kernel (kernels/*.s)
LIBRARY = {"Multiply": "mul", "Add": "add", "Subtract": "sub", "Maximum": "max",
           "Minimum": "min", "Relu": "relu", "Clamp": "clamp", "HSwish": "hswish",
           "Sigmoid": "sigmoid", "Tanh": "tanh", "Gelu": "gelu", "Swish": "swish"}

SLOTS = 2


def kernel_decls(chain) -> list[str]:
    """One ``kernel ... from library`` declaration per library kernel the chain uses."""
    decls, used = [], set()
    for op, arg in chain:
        kernel = LIBRARY[op]
        if kernel in used:
            continue
        used.add(kernel)
        if op == "Clamp":
            decls.append(f'kernel @{kernel}(input: memref<*xf16>, output: memref<*xf16>, '
                         f'minVal: f16, maxVal: f16) from library "{kernel}"')
        elif arg is None:
            decls.append(f'kernel @{kernel}(input: memref<*xf16>, output: memref<*xf16>) '
                         f'from library "{kernel}"')
        else:
            decls.append(f'kernel @{kernel}(a: memref<*xf16>, b: memref<*xf16>, '
                         f'output: memref<*xf16>) from library "{kernel}"')
    return decls


def _type(dims, order: str) -> str:
    return "x".join(map(str, dims)) + f"xf16 {order}"


def _slices(dims, axis: int, start: int, stop: int) -> str:
    return ", ".join(f"{start}:{stop}" if i == axis else f"0:{d}" for i, d in enumerate(dims))


def _waits(layers: int, blocks: int, prev: dict) -> tuple[dict, dict]:
    """The barriers each load and each kernel of item (i, k) waits for, as lists of
    ``(kind, item)``: what it needs (the data of (i - 1, k) in DDR; its slot free:
    the previous user's kernel done for a load, its store done for a kernel), less
    what its other waits or its DMA channel's order (each channel is a FIFO, here in
    item order) already guarantee.  Happens-before as bit sets of the events known
    to have ended: 3n load, 3n + 1 kernel, 3n + 2 store of the n-th item."""
    items = [(i, k) for i in range(layers) for k in range(blocks)]
    index = {item: n for n, item in enumerate(items)}
    ended = {}                                   # (kind, item) -> events ended when it fires
    channel0 = channel1 = 0
    load_waits, act_waits = {}, {}

    def prune(base: int, needs: list[tuple[str, tuple, int]]) -> tuple[list, int]:
        kept = list(needs)
        for need in needs:
            others = base
            for other in kept:
                if other is not need:
                    others |= ended[other[0], other[1]]
            if others >> need[2] & 1:
                kept.remove(need)
        known = base
        for kind, item, _ in kept:
            known |= ended[kind, item]
        return [(kind, item) for kind, item, _ in kept], known

    for n, (i, k) in enumerate(items):
        p = prev[i, k]
        needs = ([("stored", (i - 1, k), 3 * (n - blocks) + 2)] if i > 0 else []) + \
            ([("done", p, 3 * index[p] + 1)] if p is not None else [])
        load_waits[i, k], before = prune(channel0, needs)
        channel0 = ended["loaded", (i, k)] = before | 1 << 3 * n
        needs = [("loaded", (i, k), 3 * n)] + \
            ([("stored", p, 3 * index[p] + 2)] if p is not None else [])
        act_waits[i, k], before = prune(0, needs)
        ended["done", (i, k)] = before | 1 << 3 * n + 1
        channel1 = ended["stored", (i, k)] = channel1 | ended["done", (i, k)] | 1 << 3 * n + 2
    return load_waits, act_waits


def build_naive_program(chain, shape, *, blocks: int, axis: int = 2, tiles: int = 2,
                        parts: int = 2, order: str = "NHWC", module: str = "naive",
                        stacks: int = 16384, arch: str = "NPU37XX",
                        generated: list[tuple[str, str]] | None = None) -> str:
    """VIR text of the per-layer program of ``chain`` (a list of ``(op, constant or
    attrs)``, as in ``bench/fusion_bench.py``) on an f16 tensor of logical ``shape``
    cut along logical dim ``axis`` into ``blocks`` blocks.  ``generated``: per layer,
    (kernel name, declaration) of a generated one-op kernel (its constants inside) to
    use instead of the library kernel."""
    if not chain:
        raise ValueError("an empty chain")
    extent = shape[axis]
    if extent % blocks:
        raise ValueError(f"{blocks} blocks do not divide the extent {extent}")
    chunk = extent // blocks
    if chunk % parts:
        parts = 1                       # the block does not split evenly: one kernel per block
    sub = chunk // parts
    used_tiles = min(tiles, blocks)
    layers = len(chain)
    tile_of = [k % used_tiles for k in range(blocks)]
    block_dims = tuple(chunk if i == axis else d for i, d in enumerate(shape))
    full, blk, one = _type(shape, order), _type(block_dims, order), _type((1,) * len(shape), order)

    temps = [f"t{j}" for j in range(min(2, layers - 1))]
    src = ["x"] + [temps[(i - 1) % 2] for i in range(1, layers)]
    dst = [temps[i % 2] for i in range(layers - 1)] + ["y"]

    # The schedule, layer-major: item (i, k) on tile tile_of[k], slot by per-tile count.
    slot, prev = {}, {}
    count, last = [0] * used_tiles, {}
    for i in range(layers):
        for k in range(blocks):
            t = tile_of[k]
            s = count[t] % SLOTS
            count[t] += 1
            slot[i, k] = s
            prev[i, k] = last.get((t, s))        # the item that used this slot before
            last[t, s] = (i, k)
    load_waits, act_waits = _waits(layers, blocks, prev)
    stored_waited = {w for ws in (*load_waits.values(), *act_waits.values())
                     for kind, w in ws if kind == "stored"}
    slots_on = [min(SLOTS, c) for c in count]

    lines = [f"module @{module} arch {arch}", ""]
    lines += [decl for _, decl in generated] if generated else kernel_decls(chain)
    lines += ['kernel @runtime() from library "runtime"',
              f"runtime @runtime stacks({', '.join([str(stacks)] * tiles)})", ""]
    lines += [f"input %x : {full}", f"output %y : {full}"]
    lines += [f"ddr %{name} : {full}" for name in temps]
    for i, (op, arg) in enumerate(chain):
        if op != "Clamp" and arg is not None and not generated:
            lines.append(f"const %k{i} : {one} = [{arg!r}]")
    for t in range(used_tiles):
        for s in range(slots_on[t]):
            lines += [f"cmx %in.t{t}s{s} : {blk} tile {t}", f"cmx %out.t{t}s{s} : {blk} tile {t}"]
        for i, (op, arg) in enumerate(chain):
            if op != "Clamp" and arg is not None and not generated:
                lines.append(f"cmx %k{i}.t{t} : {one} tile {t}")
    lines.append("")
    for name in ["x", *temps, "y"]:
        for k in range(blocks):
            lines.append(f"view %{name}.b{k} = %{name}"
                         f"[{_slices(shape, axis, k * chunk, (k + 1) * chunk)}]")
    if parts > 1:
        for t in range(used_tiles):
            for s in range(slots_on[t]):
                for buf in ("in", "out"):
                    for j in range(parts):
                        lines.append(f"view %{buf}.t{t}s{s}p{j} = %{buf}.t{t}s{s}"
                                     f"[{_slices(block_dims, axis, j * sub, (j + 1) * sub)}]")
    lines.append("")

    barriers, loads, stores, act = [], [], [], []
    for i, (op, arg) in enumerate(chain):
        kernel = generated[i][0] if generated else LIBRARY[op]
        binary = op != "Clamp" and arg is not None and not generated
        first_on = {}
        for k in range(blocks):
            first_on.setdefault(tile_of[k], k)
        for k in range(blocks):
            t, s = tile_of[k], slot[i, k]
            name = f"{i}.{k}"
            barriers += [f"barrier %loaded{name}", f"barrier %done{name}"]
            if (i, k) in stored_waited:
                barriers.append(f"barrier %stored{name}")
            if binary and first_on[t] == k:
                loads.append(f"  kload{i}.t{t}: dma %k{i} -> %k{i}.t{t} channel 0 "
                             f"updates(%loaded{name})")
            waits = [f"%{kind}{w[0]}.{w[1]}" for kind, w in load_waits[i, k]]
            wait = f" waits({', '.join(waits)})" if waits else ""
            loads.append(f"  load{name}: dma %{src[i]}.b{k} -> %in.t{t}s{s} channel 0{wait} "
                         f"updates(%loaded{name})")
            upd = f" updates(%stored{name})" if (i, k) in stored_waited else ""
            stores.append(f"  store{name}: dma %out.t{t}s{s} -> %{dst[i]}.b{k} channel 1 "
                          f"waits(%done{name}){upd}")
            waits = [f"%{kind}{w[0]}.{w[1]}" for kind, w in act_waits[i, k]]
            for j in range(parts):
                part = f"p{j}" if parts > 1 else ""
                binds = [f"%in.t{t}s{s}{part} as %a0"] + ([f"%k{i}.t{t} as %a1"] if binary else [])
                args = ["%a0"] + (["%a1"] if binary else []) + ["%r0"]
                region = []
                if op == "Clamp" and not generated:
                    region = [f"    %c0 = const {arg[0]!r} : f16", f"    %c1 = const {arg[1]!r} : f16"]
                    args += ["%c0", "%c1"]
                act.append(f"  s{name}.{j}: sw @{kernel} on tile {t} inputs({', '.join(binds)}) "
                           f"outputs(%out.t{t}s{s}{part} as %r0) waits({', '.join(waits)}) "
                           f"updates(%done{name}) {{")
                act += region + [f"    run({', '.join(args)})", "  }"]
    lines += barriers + ["", "tasks DMA {"] + loads + stores + ["}", "",
                                                                 "tasks ACT_SHAVE {"] + act + ["}"]
    return "\n".join(lines) + "\n"
