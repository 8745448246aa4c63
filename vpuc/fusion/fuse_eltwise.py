"""A DPU eltwise Add or Multiply fused behind a DPU layer as a per-block stage
(``EltwiseEpilogue``, one of ``fuse_epilogue``'s epilogues): ResNet-18's residual Adds
run on the convolution's output blocks in CMX, the other operand's rows loaded beside
each block, so the convolution's output never goes through DDR.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.fusion.lower_dpu_channels import SHARED_ZEROS_BYTES, zero_vector
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])
ELTWISE_OPS = {"Add": "add", "Multiply": "mul"}      # as lower_dpu_nn.ELTWISE


@dataclass
class EltwiseEpilogue:
    """An eltwise Add or Multiply DPU ``layer`` of the DPU layer's output and ``other`` (a
    program value in DDR) as a per-block stage: the block's rows of ``other`` loaded beside
    the block's input, one DPU eltwise task on the block in CMX (with the layer's folded
    activation), its output stored as the layer's output (ResNet-18's residual Adds: the
    convolution's output never goes through DDR).  ``first``: the DPU layer's output is the
    op's first operand (the task reads its operands in the op's order)."""
    layer: object
    other: object
    first: bool
    timing: object
    calls: int = 0
    outputs: set = field(default_factory=set)
    zeros: dict = field(default_factory=dict)     # (prefix, tile) -> its zero vector, size

    def emit(self, e, k: int, block: str, block_type: TensorType, tile: int, dst: str) -> str:
        from vpuc.cost import DpuWorkload
        from vpuc.fusion.lower_dpu import split_rows
        from vpuc.fusion.lower_dpu_channels import variant_boxes
        self.calls += 1
        n, c, rows, w = block_type.dims
        _, slices = e.view_of[dst]           # the block's part of the output value
        c0, c1 = (int(v) for v in slices[1].split(":")[:2])     # a channel chunk's
        real = c1 - c0
        e.prog.barriers += [f"barrier %{e.p}sidein{k}", f"barrier %{e.p}acted{k}"]
        side = e.cmx(f"side.c{k}", TensorType(block_type.dims, block_type.elem, NHWC), tile)
        into = side if real == c else e.view(f"side.r{k}", side[1:], [
            f"0:{n}", f"0:{real}", f"0:{rows}", f"0:{w}"])
        e.dma(f"side{k}", e.view(f"side.v{k}", self.other.name, slices), into, 0,
              e.load_waits(k), [f"%{e.p}sidein{k}"], permute=self.other.type.order != NHWC)
        if real < c:        # its pad channels: zeros, not what an earlier buffer left there
            self._zero_pad(e, k, side, (n, c, rows, w), real, block_type.elem, tile)
        out = e.cmx(f"sum.c{k}", TensorType(block_type.dims, block_type.elem, NHWC), tile)
        op = ELTWISE_OPS[self.layer.op.kind]
        elem = block_type.elem

        def workload_of(r: int) -> DpuWorkload:
            return DpuWorkload(op=op, elem=elem.value, width=w, height=r, channels=c,
                               in_channels=c, batch=n, in_bytes=elem.nbytes,
                               out_bytes=elem.nbytes, weight_bytes=0)
        ins = f"{block}, {side}" if self.first else f"{side}, {block}"
        e.prog.dpu.append(f"  {e.lp}{op}{k}: dpu {op} on tile {tile} in({ins}) out({out})"
                          f"{self.layer.post} waits(%{e.p}done{k}, %{e.p}sidein{k}) "
                          f"updates(%{e.p}acted{k}) {{")
        for a, b, z0, z1, mode in variant_boxes(op, split_rows(rows, workload_of, self.timing),
                                                (0, c - 1)):
            e.prog.dpu.append(f"    variant start(0, {a}, {z0}) end({w - 1}, {b - 1}, {z1}) "
                              f"mode({mode})")
        e.prog.dpu.append("  }")
        self.outputs.add(out)
        return out

    def _zero_pad(self, e, k: int, side: str, dims, real: int, elem, tile: int) -> None:
        """Zeros into the pad channels of block ``k``'s ``side`` buffer, copied CMX -> CMX on
        channel 0 after its load (the DPU computes the pad channels, so they must not hold
        what an earlier buffer left there): from the program's zero vector of the tile
        (``lower_dpu_channels.zero_vector``) when it is one and large enough, else from one
        the tile loads with its first such block (blocks are largest first: the tile's
        later blocks take a prefix of it)."""
        n, c, rows, w = dims
        count = n * (c - real) * rows * w
        if e.prog.prefetch_bytes and count * elem.nbytes <= SHARED_ZEROS_BYTES:
            # the program's zero vector of the tile (``zero_vector``), loaded once for all
            zv = zero_vector(e, tile, count, elem, e.load_waits(k), [f"%{e.p}sidein{k}"])
            e.dma(f"side.zero{k}", e.view(f"side.zv.v{k}", zv[1:], [f"0:{count}"]),
                  e.view(f"side.z{k}", side[1:], [f"0:{n}", f"{real}:{c}", f"0:{rows}",
                                                  f"0:{w}"]), 0, e.load_waits(k),
                  [f"%{e.p}sidein{k}"])
            return
        key = (e.p, tile)
        vector = self.zeros.get(key)
        if vector is None or vector[1] < count:
            name = f"{e.p}side{count}.chzeros"     # a zero source, as zero_vector's
            if name not in e.declared:
                e.declared.add(name)
                e.prog.buffers.append(f"const %{name} : {count}x{elem} = splat 0")
            vector = (e.cmx(f"side.zv{count}.t{tile}", TensorType((count,), elem,
                                                                  DimsOrder.identity(1)), tile),
                      count)
            self.zeros[key] = vector
            e.dma(f"side.load_zeros{count}.t{tile}", f"%{name}", vector[0], 0, e.load_waits(k),
                  [f"%{e.p}sidein{k}"])
        src = vector[0] if vector[1] == count else e.view(f"side.zv.v{k}", vector[0][1:],
                                                          [f"0:{count}"])
        e.dma(f"side.zero{k}", src, e.view(f"side.z{k}", side[1:], [
            f"0:{n}", f"{real}:{c}", f"0:{rows}", f"0:{w}"]), 0, e.load_waits(k),
              [f"%{e.p}sidein{k}"])
