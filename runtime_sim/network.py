"""A network: one program instantiated with memory (the program -> network step of OpenVINO's
"Basic Data Structures of GPU Graph and Overall Flow").

It allocates DDR and CMX (``runtime_sim.memory``), copies the constants in,
takes the inputs and hands back the outputs, all as numpy arrays of the
tensors' *logical* shapes (N, C, H, W order whatever the dims order in
memory).  Constants come from ``program.constants`` (bytes in memory order,
made by materialize-constants) or, for a program without them, from each
const buffer's initializer.  A timing-only run reads no DDR byte (no DMA moves
data, no DPU computes), so it checks the constants' bytes without copying them
(``load_constants=False``: the copy of a model's weights was a third of its
run).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from runtime_sim.engines.dma import convert
from runtime_sim.memory import UNWRITTEN, Memory, numpy_dtype
from vpuc import const_files
from vpuc.diagnostics import VpucError
from vpuc.ir.module import Buffer, BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.program import Program


class Network:
    def __init__(self, program: Program, *, load_constants: bool = True,
                 unwritten: int = UNWRITTEN) -> None:
        """``load_constants``: False for a timing-only run, which reads no data; it also
        passes ``unwritten=0`` (nothing is read, so nothing need be filled)."""
        self.program = program
        self.load_constants = load_constants
        module = program.module
        if module.graphs:       # its tasks would run without the graphs': a silent wrong answer
            graph = module.graphs[0]
            raise VpucError(f"graph block @{graph.name} was not lowered to tasks; a program "
                            "with graph blocks is simulated after the lower-graph pass (the "
                            "pipeline that `vpuc compile` and vpuc.api.compile run)", graph.loc)
        self.memory = Memory(module, program.arch.tiles, unwritten)
        self.inputs = [b for b in module.buffers if b.kind is BufferKind.INPUT]
        self.outputs = [b for b in module.buffers if b.kind is BufferKind.OUTPUT]
        for buffer in module.buffers:
            if buffer.kind is BufferKind.CONST:
                self._load_constant(buffer)
        # CMX buffers DMA both writes and reads (a value kept in CMX between segments, a
        # staged load): their contents after each DMA write, as later buffers allocated over
        # the same bytes may not leave them (the per-layer reference check reads them)
        self.kept: dict[str, np.ndarray] = {}

    @cached_property
    def symbols(self) -> SymbolTable:
        return SymbolTable(self.program.module)

    # ------------------------------------------------------------ constants
    def _load_constant(self, buffer: Buffer) -> None:
        data = self.program.constants.get(buffer.name)
        if data is not None:
            key, offset = self.memory.placement[buffer.name]
            if len(data) != buffer.type.nbytes:
                raise VpucError(f"constant %{buffer.name} holds {len(data)} bytes; its type "
                                f"{buffer.type} needs {buffer.type.nbytes}", buffer.loc)
            if not self.load_constants:
                return
            self.memory.arrays[key][offset:offset + len(data)] = np.frombuffer(data, np.uint8)
            return
        self.memory.view(self.symbols.region(buffer.name))[...] = materialize(buffer)

    # ------------------------------------------------------------ inputs and outputs
    def set_input(self, name: str, value: np.ndarray) -> None:
        buffer = self.memory.buffers.get(name)
        if buffer is None or buffer.kind is not BufferKind.INPUT:
            names = ", ".join(f"%{b.name}" for b in self.inputs) or "none"
            raise VpucError(f"the program has no input %{name}; its inputs are {names}")
        value = np.asarray(value)
        check_shape(buffer, value.shape, "input")
        if not buffer.type.is_static:
            self.memory.set_dynamic_dims(buffer, tuple(value.shape))
        self.memory.view(self.symbols.region(name), tuple(value.shape))[...] = \
            cast_to(value, numpy_dtype(buffer.type.elem), f"input %{name}")

    def output(self, name: str) -> np.ndarray:
        return np.array(self.memory.view(self.symbols.region(name)))

    def keep(self, name: str) -> None:
        """Record CMX buffer ``name``'s contents now (``kept``)."""
        self.kept[name] = self.output(name)


def check_shape(buffer: Buffer, shape: tuple[int, ...], role: str) -> None:
    bounds = buffer.type.bound_shape
    ok = len(shape) == len(bounds) and all(
        (s == b) if isinstance(d, int) else (0 <= s <= b)
        for s, b, d in zip(shape, bounds, buffer.type.dims))
    if not ok:
        raise VpucError(f"{role} %{buffer.name} has shape {'x'.join(map(str, shape)) or 'scalar'}; "
                        f"expected {buffer.type.shape_str().rsplit('x', 1)[0]} "
                        "(logical dims, whatever the dims order)")


def cast_to(value: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    if value.dtype == dtype:
        return value
    if value.dtype.kind in "OSUMm":
        raise VpucError(f"{what}: numpy dtype {value.dtype} is not numeric")
    if dtype.kind in "iu" and value.dtype.kind == "f" and not np.all(np.mod(value, 1) == 0):
        raise VpucError(f"{what}: holds non-integer values; expected {dtype}")
    return convert(value, dtype)


def constant_value(program: Program, buffer: Buffer) -> np.ndarray:
    """A constant's logical values: from the program's bytes (memory order), or its initializer."""
    data = program.constants.get(buffer.name)
    if data is None:
        return materialize(buffer)
    perm = buffer.type.order.perm
    memory_shape = [buffer.type.bound_shape[d] for d in perm]
    flat = np.frombuffer(data, numpy_dtype(buffer.type.elem))
    return flat.reshape(memory_shape).transpose(np.argsort(perm))


def materialize(buffer: Buffer) -> np.ndarray:
    """A constant's logical values from its initializer (values, splat or .npy file)."""
    init = buffer.init
    shape = buffer.type.bound_shape
    dtype = numpy_dtype(buffer.type.elem)
    if init is None:
        raise VpucError(f"constant %{buffer.name} has no value", buffer.loc)
    if init.splat is not None:
        return cast_to(np.full(shape, init.splat), dtype, f"constant %{buffer.name}")
    if init.values is not None:
        return cast_to(np.array(init.values).reshape(shape), dtype, f"constant %{buffer.name}")
    base = Path(buffer.loc.file).parent if buffer.loc.line else Path(".")
    path = const_files.resolve(init.path, base)
    try:
        array = const_files.load(path)
    except (OSError, ValueError) as exc:
        raise VpucError(f"constant %{buffer.name}: cannot read {path}: {exc}", buffer.loc) from None
    if tuple(array.shape) != shape:
        raise VpucError(f"constant %{buffer.name}: {path} holds shape {array.shape}; expected "
                        f"{shape}", buffer.loc)
    return cast_to(array, dtype, f"constant %{buffer.name}")
