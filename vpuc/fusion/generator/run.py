"""Run a generated kernel on numpy arrays, the way the runtime invokes an ACT SHAVE kernel.

Each operand is placed dense in CMX in its type's dims order, described by a
``MemRefData`` (``vpuc.abi.params``; a dynamic operand's dims and strides sit
in CMX beside it, where the kernel writes an output's), and the kernel runs
through ``runtime_sim.isa.invoke.invoke_kernel`` -- the exact interpreter
(``fast=False``) or the fast path.  ``run_kernel`` returns the outputs in
their logical shapes, the status, cycles and the raw ``RunResult``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_sim.isa.interpreter import RunResult
from runtime_sim.isa.invoke import invoke_kernel
from vpuc.abi.params import MemRefArg, layout_window_e
from vpuc.arch import load_arch
from vpuc.reference.graph import round_to, storage_dtype
from vpuc.ir.types import Dynamic, TensorType

ARCH = load_arch()
WIN_E = ARCH.window_bases["WIN_E"]
WIN_F = ARCH.window_bases["WIN_F"]
META_BYTES = 16 * 12 + 16


@dataclass
class Placed:
    type: TensorType
    shape: tuple[int, ...]
    offset: int
    meta: int | None               # dynamic: CMX offset of its dims and strides

    def memref(self) -> MemRefArg:
        perm = self.type.order.perm
        itemsize = self.type.elem.nbytes
        strides, step = [0] * len(self.shape), 1
        for d in reversed(perm):
            strides[d] = step
            step *= self.shape[d]
        return MemRefArg(WIN_F + self.offset, self.type.elem, tuple(self.shape), perm,
                         tuple(s * itemsize * 8 for s in strides),
                         meta_addr=None if self.meta is None else WIN_F + self.meta)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.type.elem.nbytes


@dataclass
class KernelRun:
    outputs: list[np.ndarray]
    status: int
    cycles: int
    result: RunResult
    cmx: np.ndarray
    placed: list[Placed]


def _place(types: list[TensorType], shapes: list[tuple[int, ...]], dynamic_meta: bool,
           skew: int = 0) -> tuple[list[Placed], int]:
    placed, offset = [], 64
    for t, shape in zip(types, shapes):
        offset += skew * t.elem.nbytes
        meta = None
        if dynamic_meta and not t.is_static:
            meta = offset
            offset += META_BYTES
        p = Placed(t, tuple(shape), offset, meta)
        placed.append(p)
        offset += p.nbytes + 64
        offset += -offset % 16
    return placed, offset


def prepare(kernel, inputs: list[np.ndarray], output_shapes, *, dynamic_meta: bool = True,
            skew: int = 0):
    """The CMX array with the inputs (and dynamic operands' dims) in place, the operands'
    placements, and the invocation's WIN_E image."""
    params, results = kernel.source.parameters, kernel.source.results
    types = [op.type for op in params] + [op.type for op in results]
    shapes = [tuple(np.shape(x)) for x in inputs] + [tuple(s) for s in output_shapes]
    for t, shape in zip(types, shapes):
        if len(shape) != t.rank or any(not isinstance(d, Dynamic) and d != s
                                       for d, s in zip(t.dims, shape)):
            raise ValueError(f"shape {shape} does not fit {t}")
    placed, end = _place(types, shapes, dynamic_meta, skew)
    cmx = np.full(end + 4096, 0xA5, np.uint8)
    for p, x in zip(placed, inputs):
        with np.errstate(invalid="ignore"):  # a signalling NaN input widens to a quiet one
            wide = np.asarray(x, np.float64)
        data = np.ascontiguousarray(np.transpose(round_to(wide, p.type.elem), p.type.order.perm))
        cmx[p.offset:p.offset + p.nbytes] = np.frombuffer(data.tobytes(), np.uint8)
    for p in placed:
        if p.meta is not None:
            meta = p.memref().meta_bytes()
            cmx[p.meta:p.meta + len(meta)] = np.frombuffer(meta, np.uint8)
    image = layout_window_e(kernel.obj.data, [p.memref() for p in placed], WIN_E)
    return placed, cmx, image


def run_kernel(kernel, inputs: list[np.ndarray], output_shapes: list[tuple[int, ...]], *,
               fast: bool = True, dynamic_meta: bool = True, skew: int = 0,
               max_steps: int = 50_000_000) -> KernelRun:
    """Run ``kernel`` (a ``GeneratedKernel``) on ``inputs`` (arrays in logical shapes, in
    Parameter order).  ``dynamic_meta``: dynamic operands get isStatic = 0 and their dims
    in CMX (outputs' written by the kernel); otherwise every MemRefData is static."""
    placed, cmx, image = prepare(kernel, inputs, output_shapes, dynamic_meta=dynamic_meta,
                                 skew=skew)
    result = invoke_kernel(kernel.obj, cmx, image.image, image.args_offset, image.args_size,
                           fast=fast, max_steps=max_steps)
    outputs = []
    for p in placed[len(inputs):]:
        perm = p.type.order.perm
        mem_shape = tuple(p.shape[d] for d in perm)
        raw = cmx[p.offset:p.offset + p.nbytes].view(storage_dtype(p.type.elem)).reshape(mem_shape)
        outputs.append(np.transpose(raw, np.argsort(perm)).copy())
    return KernelRun(outputs, result.scalar_regs[0], result.cycles, result, cmx, placed)


def written_meta(run: KernelRun, index: int) -> tuple[list[int], list[int]]:
    """The dims and strides (bits, memory order) in CMX for operand ``index`` (dynamic ones)."""
    from vpuc.abi.memref import unpack_dims, unpack_strides
    p = run.placed[index]
    rank = len(p.shape)
    raw = bytes(run.cmx[p.meta:p.meta + META_BYTES])
    dims = unpack_dims(raw, rank)
    strides = unpack_strides(raw, rank, 4 * rank + (-4 * rank) % 8)
    return dims, strides
