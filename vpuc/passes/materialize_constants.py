"""materialize-constants: turn every const buffer into the bytes the blob carries.

Expects: a verified module (const buffers are static and have a value).
Guarantees: ``program.constants[name]`` holds each const buffer's contents in
memory order (its dims order applied), in its element type; a ``.npy`` file is
read relative to the .vir file and must have the declared shape; values that do
not fit the element type are errors naming the buffer.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from vpuc import const_files
from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.ir.module import Buffer, BufferKind, Module
from vpuc.passes.assign_windows import program_of
from vpuc.passes.base import ModulePass, PassContext

NUMPY_TYPES = {
    "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
    "u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "u32": np.uint32,
    "i32": np.int32, "i64": np.int64,
}


def _fail(buffer: Buffer, message: str) -> VpucError:
    return VpucError([Diagnostic(Severity.ERROR, buffer.loc, f"const %{buffer.name}: {message}")])


def logical_values(buffer: Buffer) -> np.ndarray:
    """The constant as a float64/int64 array in logical (row-major) order."""
    shape = buffer.type.bound_shape
    init = buffer.init
    if init.path is not None:
        path = const_files.resolve(init.path, Path(buffer.loc.file).parent)
        try:
            array = const_files.load(path)
        except (OSError, ValueError) as exc:
            raise _fail(buffer, f"cannot read {path}: {exc}") from None
        if tuple(array.shape) != shape:
            raise _fail(buffer, f"{path} has shape {tuple(array.shape)}; expected {shape}")
        return array
    if init.splat is not None:     # a read-only broadcast: only the stored bytes are allocated
        return np.broadcast_to(np.asarray(init.splat), shape)
    return np.array(init.values, dtype=np.float64).reshape(shape)


def constant_bytes(buffer: Buffer) -> bytes:
    """Memory-order bytes of a const buffer."""
    values = logical_values(buffer)
    dtype = NUMPY_TYPES[buffer.type.elem.value]
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        if values.size and (values.min() < info.min or values.max() > info.max):
            raise _fail(buffer, f"values outside the range of {buffer.type.elem}")
    with np.errstate(over="ignore", invalid="ignore"):
        stored = values.astype(dtype)
    memory_order = np.ascontiguousarray(np.transpose(stored, buffer.type.order.perm))
    return memory_order.tobytes()


class MaterializeConstantsPass(ModulePass):
    name = "materialize-constants"

    def run(self, module: Module, ctx: PassContext) -> None:
        program = program_of(module, ctx)
        for buffer in module.buffers:
            if buffer.kind is BufferKind.CONST and buffer.init is not None:
                program.constants[buffer.name] = constant_bytes(buffer)
