"""Graph layers as DPU tasks: Convolution and MaxPool in ``lower_dpu_window``, MatMul in
``lower_dpu_matmul``, the CNN layers of imported models (and layers split over channels)
in ``lower_dpu_nn``; here what they share (``LayerEmitter``, block counts, variants).

``lower-graph`` calls ``dpu_layer`` for every Convolution, MatMul and MaxPool
the tokenizer left out, then ``emit_layer`` to add the layer's tasks to the
program being built.

Expects: a verified, typed graph tokenized for the ``shave`` target, so the
post-ops the DPU applies are marked ``skipped-by-plugin``
(``targets/shave.py``); the layer's data operands and its result in DDR
(``input``, ``const``, ``output`` or ``ddr`` buffers of the whole tensor, in the
graph's dims orders; constant convolution weights preferably NHWC).

Guarantees:

- the marked chain after a Convolution or MatMul (one bias ``Add`` with a
  per-channel constant, then one activation) is folded into the DPU task as
  ``bias(...)`` (one value per output channel: f32, or packed after constant weights in
  their type when exact there, ``lower_dpu_channels.packs_bias``) and ``post ...``; its ops
  produce nothing of their own, and the layer writes the chain's last value;
- a layer the DPU cannot run, or a marked op without a DPU form, is a
  ``VpucError`` at the op naming its kind, attributes and the reason
  (``lower_dpu_support.dpu_problem``);
- the output rows (H, or M for a matmul) are cut into blocks, double-buffered,
  that fit in the context's ``cmx_budget`` bytes of a tile (a block's input rows with the halo
  the window needs, its output rows, the weights); the count is the one the cost
  model's pipeline estimate (``vpuc.cost.blocks``, with the context's timing
  model) finds fastest among those, except for a matmul and a layer split over
  channels (each block loading its own weights), which take the fewest that fit.  Block *k* runs on tile ``k % tiles``:
  DMA in (channel 0; ``permute`` into NHWC when the DDR tensor is not NHWC, its rows
  then halved over both channels: one element a cycle is far below the DDR's rate) ->
  one DPU task whose rows are split into the variants, each with its execution
  mode, that the cost model (``vpuc.cost``) finds fastest -> DMA out (channel 1, or 0 on a target
  with one).  Weights and bias
  are loaded once per tile.  A block pads only at the real image border; a 1x1
  strided convolution without padding on an NHWC input loads only the rows and
  columns it reads (a strided DMA) and runs at stride 1.  Its
  first loads wait on ``gate``, its last store updates ``finish``;
- every buffer is in CMX of the task's tile, unplaced (allocate-cmx places them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from vpuc.cost import DpuWorkload, Timing, choose_mode, dpu_cost
from vpuc.cost.dpu import remembered
from vpuc.fusion.lower_dpu_blocks import choose_blocks, resident_cycles  # noqa: F401 (theirs)
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value, label, type_text
from vpuc.fusion.lower_dpu_channels import CHANNELWISE_OPS, channel_chunks, variant_boxes
from vpuc.fusion.lower_dpu_support import (DPU_ACTIVATIONS, const_text, dpu_problem, eltwise_anchor,
                                           post_op_text)
from vpuc.reference.graph import constant_value
from vpuc.fusion.targets.mark_skipped import SKIPPED
from vpuc.ir.graph import Graph, GraphIndex, GraphOp
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.vir.printer import format_attr

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


@dataclass
class DpuLayer:
    op: GraphOp                     # the Convolution, MatMul or MaxPool
    chain: list[GraphOp]            # the post-ops folded into it, in order
    bias: np.ndarray | None         # float32, one per output channel
    post: str                       # "" or " post relu", ...

    @property
    def last(self) -> GraphOp:
        return self.chain[-1] if self.chain else self.op

    @property
    def output(self) -> str:
        """The graph value the DPU tasks write."""
        return self.last.result


def describe(op: GraphOp) -> str:
    """``Kind{every attribute} %value``, as messages name a layer."""
    attrs = ", ".join(f"{k} = {format_attr(v)}" for k, v in op.attrs.items())
    return f"{op.kind}{{{attrs}}} {op.label}" if attrs else f"{op.kind} {op.label}"


def dpu_layer(graph: Graph, index: GraphIndex, op: GraphOp) -> DpuLayer:
    """The layer ``op`` with its marked post-op chain folded in; VpucError if the DPU cannot."""
    problem = dpu_problem(op, index)
    if problem is not None:
        raise VpucError(f"{describe(op)} cannot run on the DPU: {problem}", op.loc)
    chain, current = [], op
    while True:
        users = index.users.get(current.result, [])
        if len(users) != 1 or SKIPPED not in graph.ops[users[0]].marks \
                or eltwise_anchor(graph.ops[users[0]]):
            break
        current = graph.ops[users[0]]
        chain.append(current)
    bias, post = None, ""
    for link in chain:
        if link.kind == "Add" and bias is None and not post:
            bias = _bias(op, link, index)
        elif link.kind in DPU_ACTIVATIONS and not post:
            post = " " + post_op_text(link)
        else:
            raise VpucError(f"internal: {link.label} ({link.kind}) is marked as a DPU post-op of "
                            f"{op.label}, but a DPU task has no post-op for it here", link.loc)
    return DpuLayer(op, chain, bias, post)


def _bias(anchor: GraphOp, add: GraphOp, index: GraphIndex) -> np.ndarray:
    """The per-channel constant of a bias Add, one float32 per output channel."""
    data = anchor.result if anchor.result in add.operands else None
    other = next(o for o in add.operands if o != data)
    value = constant_value(index.producer(other)).astype(np.float32)
    rank = anchor.type.rank
    value = value.reshape((1,) * (rank - value.ndim) + value.shape)
    axis = rank - 1 if anchor.kind == "MatMul" else 1
    channels = anchor.type.dims[axis]
    return np.broadcast_to(value.reshape(-1), (channels,)) if value.size == 1 else value.reshape(-1)


def vector(size: int, elem: ElemType) -> TensorType:
    return TensorType((size,), elem, DimsOrder.identity(1))


def split_rows(rows: int, workload_of: Callable[[int], DpuWorkload],
               timing: Timing) -> list[tuple[int, int, str]]:
    """[(first row, end row, mode)] of a block's variants: the cut into 1, 2 or 4 runs of
    rows (as even as rows allow), each in its cheapest execution mode (a channelwise op's:
    a mode per channel chunk, ``run_cost``), that the cost model says ends first; each
    variant also pays the runtime's dispatch.  Ties go to fewer variants."""
    return split_rows_cost(rows, workload_of, timing)[0]


def split_rows_cost(rows: int, workload_of: Callable[[int], DpuWorkload],
                    timing: Timing) -> tuple[list[tuple[int, int, str]], float]:
    """``split_rows`` and the cycles the cost model gives its variants."""
    best, best_cycles = None, math.inf
    for parts in (1, 2, 4):
        if parts > rows:
            break
        edges = [rows * i // parts for i in range(parts + 1)]
        plan, cycles = [], 0.0
        for a, b in zip(edges, edges[1:]):
            mode, run = run_cost(workload_of(b - a), timing)
            cycles += run
            plan.append((a, b, mode))
        if cycles < best_cycles - 1e-9:
            best, best_cycles = plan, cycles
    return best, best_cycles


def run_cost(w: DpuWorkload, timing: Timing) -> tuple[str | tuple[str, ...], float]:
    """(mode, cycles) of one run of rows: its workload in its cheapest mode, dispatch
    included.  A channelwise op's run is one variant per channel chunk
    (``lower_dpu_channels.variant_boxes``): each gets the mode cheapest for its own box (a
    tuple, chunk by chunk), so no variant costs more than in the run's one mode: 240
    channels are chunks of 64, 64, 64, 32 and 16, and the mode of 240 (CUBOID_4x16, a
    64-channel grid) ran the last two padded to 64 each.  The cycles stay the run's as one
    workload: the block-count and channel-cut choices (``choose_blocks``,
    ``lower_dpu_nn_cut``) were tuned on it; charging each chunk's setup and dispatch there
    cut MobileNetV3-Small's 240-channel 5x5 layers over channels instead of rows, 656,763
    cycles against 619,541 (their HardSwish epilogues, which the estimate does not see,
    lost more than the variants saved)."""
    # the row-block searches ask it again
    return remembered(timing.dpu, ("run", w, timing.dispatch["DPU"]),
                      lambda: _run_cost(w, timing))


def _run_cost(w: DpuWorkload, timing: Timing) -> tuple[str | tuple[str, ...], float]:
    mode = choose_mode(w, timing.dpu)
    cycles = dpu_cost(w, timing.dpu, mode).cycles + timing.dispatch["DPU"]
    if w.op not in CHANNELWISE_OPS:
        return mode, cycles
    return tuple(choose_mode(replace(w, channels=c1 - c0, in_channels=c1 - c0), timing.dpu)
                 for c0, c1 in channel_chunks(w.channels)), cycles


def layer_timing(prog: ProgramText, op: GraphOp) -> Timing:
    """The timing model the program is built for; its absence is an error at ``op``."""
    if prog.timing is None:
        raise VpucError(f"{describe(op)}: no timing model for the target; lowering a DPU "
                        "layer asks the cost model (vpuc/cost/archs/<arch>.toml, or "
                        "timing=FILE)", op.loc)
    return prog.timing


# The share of the target's physical barriers one layer's blocks in flight may hold: the
# segments that overlap it (``schedule_deps``: up to two more) and the prefetch hold theirs.
LAYER_BARRIER_SHARE = 2


def in_flight_slots(prog: ProgramText, blocks: int, used: int) -> int:
    """CMX slots per tile for ``blocks`` blocks on ``used`` tiles that could each have a slot
    of its own: that many when their barriers (``loaded`` and ``done`` per block: nothing
    waits for a store) fit the layer's share of the physical barriers
    (``prog.physical_barriers // LAYER_BARRIER_SHARE``), else the most slots whose blocks in flight
    (``slots * used``, each holding ``loaded``, ``done`` and ``stored`` until the block that
    takes its slot runs) fit it, at least two (double buffering)."""
    share = prog.physical_barriers // LAYER_BARRIER_SHARE
    if 2 * blocks <= share:
        return -(-blocks // used)
    return max(2, share // (3 * used))


class LayerEmitter:
    """Names, barriers and the per-block DMA/DPU pattern shared by every DPU layer."""

    def __init__(self, prog: ProgramText, prefix: str, tiles: int, gate: tuple[str, ...],
                 finish: str | None, blocks: int, slots: int = 2) -> None:
        """``slots``: the CMX slots per tile blocks take in turn (block k waits for the slot
        of block ``k - slots * tiles``)."""
        self.prog, self.p, self.lp = prog, prefix, label(prefix)
        self.gate, self.finish, self.blocks = gate, finish, blocks
        self.used = min(tiles, blocks)
        self.reuse = slots * self.used
        self.timing = prog.timing          # emit_layer checked it is there
        self.declared: set[str] = set()    # consts emitted on first use (zero sources)
        self.store_at: dict[int, int] = {}  # block -> index in prog.dma of its store
        # what the output blocks' epilogue (``ProgramText.epilogue``) needs of a store's source
        self.cmx_of: dict[str, tuple[TensorType, int]] = {}     # CMX buffer -> type, tile
        self.view_of: dict[str, tuple[str, list[str]]] = {}     # view -> its base, slices
        # blocks whose DPU task writes the output in place, no store (resident.in_place_blocks)
        self.in_place: set[int] = set()
        # blocks on other tiles whose DPU task writes a copy of its output there, no store
        # (resident.cast_blocks)
        self.cast: set[int] = set()
        # blocks whose DPU task reads its input rows in place, no load (resident.in_place_input)
        self.reads_in_place: set[int] = set()
        self.updated: set[str] = set()     # the barriers the DMAs so far update
        # every block's output in a CMX buffer of its own, no block waiting for the store
        # of the block whose slot it takes (``lower_dpu_nn``: a layer streaming its weights)
        self.own_outputs = False

    def tile(self, k: int) -> int:
        return k % self.used

    def cmx(self, name: str, t: TensorType, tile: int) -> str:
        self.prog.cmx.append(f"cmx %{self.p}{name} : {type_text(t)} tile {tile}")
        self.cmx_of[f"%{self.p}{name}"] = (t, tile)
        return f"%{self.p}{name}"

    def view(self, name: str, base: str, slices: list[str]) -> str:
        self.prog.views.append(f"view %{self.p}{name} = %{base}[{', '.join(slices)}]")
        self.view_of[f"%{self.p}{name}"] = (f"%{base}", slices)
        return f"%{self.p}{name}"

    def load_waits(self, k: int) -> str:
        waits = self._load_waits(k)
        return f" waits({', '.join(waits)})" if waits else ""

    def _load_waits(self, k: int) -> list[str]:
        if k >= self.reuse:
            return [f"%{self.p}done{k - self.reuse}"]
        return [f"%{g}" for g in self.gate]

    def dma(self, name: str, src: str, dst: str, channel: int, waits: str, updates: list[str],
            permute: bool = False, before_store: int | None = None) -> None:
        """Append a DMA task; ``before_store=k``: a load of block ``k`` on the store channel,
        listed right after the store of the block whose slot it takes (``k - reuse``), so
        it waits in the channel's FIFO for nothing its own waits do not already imply (it
        runs beside the loads of the real data, not behind the stores of later blocks)."""
        mode = "permute " if permute else ""
        self.updated.update(updates)
        upd = f" updates({', '.join(updates)})" if updates else ""
        line = f"  {self.lp}{name}: dma {mode}{src} -> {dst} channel {channel}{waits}{upd}"
        after = None if before_store is None else before_store - self.reuse + 1
        at = self.store_at.get(max(after, 0)) if after is not None else None
        if at is None:
            self.prog.dma.append(line)
            return
        self.prog.dma.insert(at, line)
        self.store_at = {j: i + (i >= at) for j, i in self.store_at.items()}

    def barriers(self, k: int) -> None:
        self.prog.barriers.append(f"barrier %{self.p}loaded{k}")
        if self._done_waited(k):
            self.prog.barriers.append(f"barrier %{self.p}done{k}")
        if self._slot_stored(k):
            self.prog.barriers.append(f"barrier %{self.p}stored{k}")

    def task(self, k: int, head: str, extent: tuple[int, int, int],
             workload_of: Callable[[int], DpuWorkload]) -> None:
        """One DPU task for block ``k``: ``head`` up to its post-op, its rows split into the
        variants and modes the cost model finds cheapest (``split_rows``), a channelwise
        op's also into channel chunks (``lower_dpu_channels.variant_boxes``)."""
        waits = [f"%{self.p}loaded{k}"]
        if k in self.reads_in_place and waits[0] not in self.updated:    # nothing loaded
            self.prog.barriers.remove(f"barrier {waits[0]}")
            waits = self._load_waits(k)
        if k >= self.reuse and self._slot_stored(k - self.reuse):
            waits.append(f"%{self.p}stored{k - self.reuse}")
        if k in self.cast and k == min(j for j in self.cast if self.tile(j) == self.tile(k)):
            # a tile's first task writing the value on another tile starts after the gate,
            # as the stores it replaces did behind the previous segment's in their FIFO:
            # the value's bytes may be what a value read on that tile before left
            # (allocate-cmx found no room otherwise: SqueezeNet's fire modules, their
            # values kept in DDR, 481,831 -> 700,378 cycles); relax_gates moves it back
            # when the trial allows.  Waiting instead for the first task writing the value
            # in place: SqueezeNet 468,793, but MobileNetV3-Small 546,787 -> 553,356 (a
            # layer's first two blocks one after the other)
            waits += [f"%{g}" for g in self.gate if f"%{g}" not in waits]
        updates = [f"%{self.p}done{k}"] if self._done_waited(k) else []
        if k in self.no_store:      # no store: the task stands for it (``store``'s updates)
            # the last such task of each tile: a tile's DPU queue runs its tasks in order
            lasts = {max(j for j in self.no_store if self.tile(j) == t)
                     for t in {self.tile(j) for j in self.no_store}}
            updates += [f"%{b}" for b in self._stored_updates(k, lasts)]
        upd = f" updates({', '.join(updates)})" if updates else ""
        wait = f" waits({', '.join(waits)})" if waits else ""
        self.prog.dpu.append(f"  {self.lp}c{k}: {head}{wait}{upd} {{")
        x, rows, z = extent
        runs = split_rows(rows, workload_of, self.timing)
        for a, b, z0, z1, mode in variant_boxes(head.split()[1], runs, z):   # channel chunks
            self.prog.dpu.append(f"    variant start({x[0]}, {a}, {z0}) end({x[1]}, {b - 1}, "
                                 f"{z1}) mode({mode})")
        self.prog.dpu.append("  }")

    def load_bias(self, t: int, bias: np.ndarray | None) -> str:
        """The bias in tile ``t``'s CMX (declared in DDR with tile 0's load); "" without one."""
        if bias is None:
            return ""
        if t == 0:
            self.prog.buffers.append(f"const %{self.p}bias : {bias.size}xf32 = {const_text(bias, self.p + 'bias')}")
        cmx = self.cmx(f"bias.t{t}", vector(bias.size, ElemType.F32), t)
        self.dma(f"load_bias.t{t}", f"%{self.p}bias", cmx, 0, self.load_waits(t),
                 [f"%{self.p}loaded{t}"])
        return f" bias({cmx})"

    def _done_waited(self, k: int) -> bool:
        """Whether anything waits on block ``k``'s ``done``: its store, or the load taking
        its slot."""
        return k not in self.no_store or k + self.reuse < self.blocks

    @property
    def no_store(self) -> set[int]:
        """The blocks whose DPU task writes the output value itself: in place or as a copy."""
        return self.in_place | self.cast

    def _stored_updates(self, k: int, lasts: set[int]) -> list[str]:
        """The barriers block ``k``'s store (or in-place task) updates: its slot's
        ``stored`` and, for the ``lasts`` of its kind, the gate (updated by the last store
        and by the last task per tile writing the output itself, in place or as a copy: a
        barrier fires when all its producers have)."""
        updates = [f"{self.p}stored{k}"] if self._slot_stored(k) else []
        return updates + ([self.finish] if self.finish and k in lasts else [])

    def _slot_stored(self, k: int) -> bool:
        """Whether block ``k`` has a ``stored`` barrier: the output slot the block that takes
        its slot writes must wait for its store.  A block written in place has no output
        slot (and the block after it on its tile, in place too, runs after it in the tile's
        DPU queue): such a barrier would fire with its ``done`` and only take a physical
        barrier (MobileNetV3-Small at cmx_budget 12288 needed 10 more).  A block writing a
        copy on the value's tile (``cast``) has a slot that nothing reads."""
        return k + self.reuse < self.blocks and k not in self.no_store and not self.own_outputs

    def store(self, k: int, src: str, dst: str, permute: bool = False) -> None:
        last = max(j for j in range(self.blocks) if j not in self.no_store)
        updates = [f"%{b}" for b in self._stored_updates(k, {last})]
        ready = f"%{self.p}done{k}"
        if self.prog.epilogue is not None:
            src, ready = self._epilogue(k, src, dst), f"%{self.p}acted{k}"
            # an epilogue whose output is another shape (a fused pool) stores elsewhere
            retarget = getattr(self.prog.epilogue, "store_target", None)
            dst = dst if retarget is None else retarget(self, k, dst)
        self.dma(f"store{k}", src, dst, self.prog.store_channel, f" waits({ready})",
                 updates, permute)
        self.store_at[k] = len(self.prog.dma) - 1


    def _epilogue(self, k: int, src: str, dst: str) -> str:
        """Run ``prog.epilogue`` (``fuse_epilogue.Epilogue``) on the CMX block behind the store
        source ``src`` (the block, or a view of its real channels); the same part of its
        output."""
        pinned = getattr(self.prog.epilogue, "pins", {}).get(k)
        if pinned is not None and src == pinned[1]:
            # the block's rows written into the epilogue's input buffer (a fused pool's)
            base, slices = self.view_of[src]
            base_type, tile = self.cmx_of[base]
            n, c, _, w = base_type.dims
            r0, r1 = (int(v) for v in slices[2].split(":")[:2])
            rows = TensorType((n, c, r1 - r0, w), base_type.elem, NHWC)
            return self.prog.epilogue.emit(self, k, src, rows, tile, dst)
        block, slices = self.view_of.get(src, (src, None))
        if block not in self.cmx_of:
            raise VpucError(f"internal: the store of block {k} of {self.p} reads {src}, "
                            "not an output block in CMX")
        block_type, tile = self.cmx_of[block]
        out = self.prog.epilogue.emit(self, k, block, block_type, tile, dst)
        return out if slices is None else self.view(f"act.r{k}", out[1:], slices)


def emit_layer(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
               tiles: int, prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    from vpuc.fusion import lower_dpu_nn
    layer_timing(prog, layer.op)
    if layer.op.kind == "QConvolution":
        from vpuc.fusion.lower_dpu_quant import emit_qconv
        emit_qconv(prog, layer, values, index, tiles, prefix, gate, finish)
    elif layer.op.kind == "MatMul":
        from vpuc.fusion.lower_dpu_matmul import emit_matmul
        emit_matmul(prog, layer, values, tiles, prefix, gate, finish)
    elif lower_dpu_nn.takes(prog, layer, values, index, tiles, gate):
        lower_dpu_nn.emit_nn(prog, layer, values, index, tiles, prefix, gate, finish)
    else:
        from vpuc.fusion.lower_dpu_window import emit_window
        emit_window(prog, layer, values, index, tiles, prefix, gate, finish)
