"""Run library kernels on numpy tensors placed in a CMX array, the way the runtime does.

A ``Tensor`` is a logical numpy array plus where and how it sits in CMX: its
dims order (outermost first, as ``MemRefArg.perm``) and element strides per
logical dim (dense in that order unless given, so strided views are just
other strides).  ``run`` packs the params through ``vpuc.abi.params``, runs
the kernel with the exact interpreter and with the fast path, checks that
both leave identical CMX bytes and cycle counts, that nothing outside the
output's elements changed, and returns the output as a numpy array.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import ml_dtypes
from numpy.lib.stride_tricks import as_strided

from runtime_sim.isa.cycles_only import data_dependence, invoke_cycles_only
from runtime_sim.isa.interpreter import load_kernel
from runtime_sim.isa.invoke import invocation_memory, invoke_kernel
from vpuc.abi.params import MemRefArg, ScalarArg, layout_window_e
from vpuc.arch import load_arch
from vpuc.ir.types import ElemType
from vpuc.kernel_library import load_library_kernel

ARCH = load_arch()
WIN_E = ARCH.window_bases["WIN_E"]
WIN_F = ARCH.window_bases["WIN_F"]
CMX_BYTES = 1 << 18
SENTINEL = 0xA5
ELEM = {np.dtype(np.float16): ElemType.F16, np.dtype(np.float32): ElemType.F32,
        np.dtype(np.int16): ElemType.I16, np.dtype(np.uint16): ElemType.U16,
        np.dtype(np.int32): ElemType.I32, np.dtype(np.uint32): ElemType.U32,
        np.dtype(ml_dtypes.bfloat16): ElemType.BF16, np.dtype(np.uint8): ElemType.U8,
        np.dtype(np.int8): ElemType.I8}
NCHW, NHWC = (0, 1, 2, 3), (0, 2, 3, 1)


def dense_strides(shape, perm) -> tuple[int, ...]:
    """Element strides per logical dim of a dense tensor stored in ``perm`` order."""
    strides, step = [0] * len(shape), 1
    for dim in reversed(perm):
        strides[dim] = step
        step *= shape[dim]
    return tuple(strides)


def channels_last(rank: int) -> tuple[int, ...]:
    """NHWC-like order for any rank >= 2: dim 1 innermost."""
    return (0,) + tuple(range(2, rank)) + (1,) if rank >= 2 else tuple(range(rank))


@dataclass
class Tensor:
    values: np.ndarray                   # logical values (dtype = element type)
    perm: tuple[int, ...] | None = None  # dims order, outermost first (default: identity)
    strides: tuple[int, ...] | None = None   # element strides per logical dim
    dynamic: bool = False                # dims/strides in WIN_F (an output's: kernel-written)
    alias: "Tensor | None" = None        # share this tensor's memory (an in-place output)
    offset: int = field(default=0, init=False)
    meta: int = field(default=0, init=False)

    def __post_init__(self):
        self.values = np.asarray(self.values)
        rank = self.values.ndim
        self.perm = tuple(range(rank)) if self.perm is None else tuple(self.perm)
        if self.strides is None:
            self.strides = dense_strides(self.values.shape, self.perm)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def extent(self) -> tuple[int, int]:
        """Bytes before element 0 and from element 0 to past the last (strides may be negative)."""
        steps = [(d - 1) * s for d, s in zip(self.values.shape, self.strides)]
        low = sum(min(0, step) for step in steps)
        high = sum(max(0, step) for step in steps) + 1
        return -low * self.dtype.itemsize, high * self.dtype.itemsize

    def view(self, cmx: np.ndarray) -> np.ndarray:
        """The tensor's elements in ``cmx``, as a numpy view (bounds checked here)."""
        before, after = self.extent()
        assert 0 <= self.offset - before and self.offset + after <= len(cmx)
        item = self.dtype.itemsize
        typed = cmx[self.offset - before:self.offset + after].view(self.dtype)
        return as_strided(typed[before // item:], self.values.shape,
                          [s * item for s in self.strides])

    def byte_positions(self) -> np.ndarray:
        item = self.dtype.itemsize
        index = np.zeros(self.values.shape, np.int64)
        for axis, stride in enumerate(self.strides):
            shape = [1] * self.values.ndim
            shape[axis] = self.values.shape[axis]
            index = index + np.arange(self.values.shape[axis]).reshape(shape) * stride
        starts = self.offset + index.reshape(-1) * item
        return (starts[:, None] + np.arange(item)).reshape(-1)

    def memref(self) -> MemRefArg:
        bits = self.dtype.itemsize * 8
        return MemRefArg(WIN_F + self.offset, ELEM[self.dtype], tuple(self.values.shape),
                         self.perm, tuple(s * bits for s in self.strides),
                         meta_addr=WIN_F + self.meta if self.dynamic else None)


@dataclass
class Result:
    output: np.ndarray
    cycles: int
    instructions: int
    status: int                          # s0 at halt: 0 ok
    cmx: np.ndarray
    opcodes: dict[str, int]


def place(tensors: list[Tensor], rng: np.random.Generator | None = None) -> None:
    """Give every tensor a CMX offset (element aligned, sometimes not vector aligned)."""
    offset = 64
    for tensor in tensors:
        if tensor.alias is not None:
            tensor.offset = tensor.alias.offset
            continue
        item = tensor.dtype.itemsize
        skew = int(rng.integers(0, 8)) * item if rng is not None else 0
        before, after = tensor.extent()
        tensor.offset = offset + skew + before
        offset = tensor.offset + after + 64
        offset += -offset % 16
        if tensor.dynamic:
            tensor.meta = offset
            offset += 16 * 12 + 16
    assert offset < CMX_BYTES, "test tensors do not fit in the CMX array"


def run(name: str, inputs: list[Tensor], output: Tensor, scalars: list[ScalarArg] = (),
        rng: np.random.Generator | None = None, expect_status: int = 0,
        check_paths: bool = True, patch: dict[int, bytes] | None = None,
        reads_scalars: bool = False, first_outputs: list[Tensor] = ()) -> Result:
    """Run library kernel ``name``; ``output.values`` only gives its shape and type.
    ``patch`` overwrites bytes of the packed params struct (offset -> bytes).
    ``reads_scalars``: the kernel branches on scalars it loads from CMX (gather's
    indices), so its cycles-only run may leave it to the full run.  ``first_outputs``: outputs
    passed before ``output`` (topk's values before its indices), read back into their
    ``values``."""
    obj = load_library_kernel(name)
    place(inputs + list(first_outputs) + [output], rng)
    cmx = np.full(CMX_BYTES, SENTINEL, np.uint8)
    for tensor in inputs:
        tensor.view(cmx)[...] = tensor.values
        if tensor.dynamic:
            _write_meta(cmx, tensor)
    args = [t.memref() for t in inputs + list(first_outputs) + [output]] + list(scalars)
    image = layout_window_e(obj.data, args, WIN_E)
    window_e = bytearray(image.image)
    for offset, data in (patch or {}).items():
        window_e[image.args_offset + offset:image.args_offset + offset + len(data)] = data
    before = cmx.copy()
    results = []
    for fast in ((False, True) if check_paths else (False,)):
        memory = before.copy()
        run_result = invoke_kernel(obj, memory, bytes(window_e), image.args_offset,
                                   image.args_size, fast=fast)
        results.append((memory, run_result))
    (cmx, first), *others = results
    for memory, other in others:
        assert np.array_equal(memory, cmx), "fast path and interpreter left different CMX bytes"
        assert other.cycles == first.cycles, (other.cycles, first.cycles)
    status = first.scalar_regs[0]
    assert status == expect_status, f"kernel status {status}, expected {expect_status}"
    check_cycles_only(obj, before, bytes(window_e), image.args_offset, image.args_size, first,
                      dims_in_cmx=reads_scalars or any(t.dynamic for t in inputs + [output]))
    changed = np.flatnonzero(cmx != before)
    allowed = set()
    if status == 0:
        for written in list(first_outputs) + [output]:
            allowed |= set(written.byte_positions().tolist())
    if output.dynamic:
        allowed |= set(range(output.meta, output.meta + 16 * 12 + 16))
    stray = [int(i) for i in changed if int(i) not in allowed]
    assert not stray, f"kernel wrote outside its output: CMX offsets {stray[:8]}..."
    for written in first_outputs:
        written.values = written.view(cmx).copy()
    return Result(output.view(cmx).copy(), first.cycles, first.instructions, status, cmx,
                  first.opcode_counts)


def check_cycles_only(obj, cmx: np.ndarray, window_e: bytes, args_offset: int, args_size: int,
                      full, dims_in_cmx: bool = False) -> None:
    """The cycles-only run of a timing-only simulation gives the full run's cycles and
    status.  It may leave the kernel to the full run only when the kernel's cycles may
    depend on data, or a dynamic tensor's dims (in CMX) decide them."""
    scratch = np.zeros_like(cmx)
    fast = invoke_cycles_only(obj, scratch, window_e, args_offset, args_size)
    if fast is None:
        assert dims_in_cmx or data_dependence(
            load_kernel(obj, invocation_memory(obj, scratch, window_e)).program), \
            "the cycles-only run gave up on a kernel its analysis accepts"
        return
    assert (fast.cycles, fast.scalar_regs[0]) == (full.cycles, full.scalar_regs[0])
    CYCLES_ONLY_RUNS.append(obj.name)


CYCLES_ONLY_RUNS: list[str] = []


def _write_meta(cmx: np.ndarray, tensor: Tensor) -> None:
    meta = tensor.memref().meta_bytes()
    cmx[tensor.meta:tensor.meta + len(meta)] = np.frombuffer(meta, np.uint8)


# --- numerics ---------------------------------------------------------------------------

def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between same-typed float arrays (0 for equal NaNs)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    bits = {2: np.int16, 4: np.int32}[a.dtype.itemsize]
    ia, ib = a.view(bits).astype(np.int64), b.view(bits).astype(np.int64)
    sign = np.int64(1) << (8 * a.dtype.itemsize - 1)
    # map sign-magnitude to a monotonic integer line
    ia = np.where(ia < 0, -(ia + sign), ia)
    ib = np.where(ib < 0, -(ib + sign), ib)
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.abs(ia - ib))
