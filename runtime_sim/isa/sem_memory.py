"""The semantics of the loads and stores: scalar, vector, masked, strided and
broadcast, on a ``WindowMemory`` (one address, or one per row of a batch)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from runtime_sim.isa.sem_values import (BYTES16, I64, LANE_BYTE, LANE_INDEX, U32, address,
                                        broadcast_all, repeat_mask, signed, u32)
from vpuc.shave.isa import WIDTH


# --- memory ----------------------------------------------------------------------------

def _load(mem, at, size: int) -> np.ndarray:
    """(..., size) bytes at each address."""
    if np.ndim(at) == 0:
        return mem.read(int(at), size)
    return mem.read_rows(at, size)


def _store(mem, at, data: np.ndarray) -> None:
    if np.ndim(at) == 0 and data.ndim == 1:
        mem.write(int(at), data)
    else:
        rows = data.shape[:-1]          # the usual batch: one address per row of data
        shape = rows if np.shape(at) == rows else np.broadcast_shapes(np.shape(at), rows)
        mem.write_rows(np.broadcast_to(np.asarray(at, I64), shape), data)


def _scalar_bytes(value, dtype) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(value, U32).astype(dtype)[..., None]).view(np.uint8)


MEMORY_OPS: dict[str, tuple[str, Callable]] = {
    "lb": ("load", lambda m, b, o: u32(_load(m, address(b, o), 1).view(np.int8)[..., 0])),
    "lbu": ("load", lambda m, b, o: _load(m, address(b, o), 1)[..., 0].astype(U32)),
    "lh": ("load", lambda m, b, o: u32(_load(m, address(b, o), 2).view(np.int16)[..., 0])),
    "lhu": ("load", lambda m, b, o: _load(m, address(b, o), 2).view(np.uint16)[..., 0]
            .astype(U32)),
    "lw": ("load", lambda m, b, o: _load(m, address(b, o), 4).view(U32)[..., 0]),
    "ld": ("load", lambda m, b, o: tuple(_load(m, address(b, o), 8).view(U32)[..., i]
                                         for i in (0, 1))),
    "sb": ("store", lambda m, v, b, o: _store(m, address(b, o), _scalar_bytes(v, np.uint8))),
    "sh": ("store", lambda m, v, b, o: _store(m, address(b, o), _scalar_bytes(v, np.uint16))),
    "sw": ("store", lambda m, v, b, o: _store(m, address(b, o), _scalar_bytes(v, U32))),
    "sd": ("store", lambda m, lo, hi, b, o: _store(
        m, address(b, o), np.concatenate(broadcast_all(_scalar_bytes(lo, U32),
                                                       _scalar_bytes(hi, U32)), axis=-1))),
    "vld": ("load", lambda m, b, o: _load(m, address(b, o), 16)),
    "vst": ("store", lambda m, v, b, o: _store(m, address(b, o), np.asarray(v, np.uint8))),
    "vld.m": ("load", lambda m, b, o, mask: m.gather(
        np.asarray(address(b, o), I64)[..., None] + BYTES16, mask)),
    "vst.m": ("store", lambda m, v, b, o, mask: _masked_store(m, address(b, o), v, mask)),
}


def _masked_store(mem, at, data, mask) -> None:
    """``vst.m``: one address, or one per row of a batch of data or masks (a batch storing
    at one address: the last row wins, as one store after another)."""
    addresses = np.asarray(at, I64)[..., None] + BYTES16
    shape = np.broadcast_shapes(addresses.shape, np.shape(data), np.shape(mask))
    mem.scatter(np.broadcast_to(addresses, shape), data, mask)


def _strided(base, offset, stride, w: str) -> np.ndarray:
    """Byte addresses (..., 16) of a strided access; stride is a signed byte count."""
    start = np.asarray(address(base, offset), I64)[..., None]
    step = np.asarray(signed(stride), I64)[..., None]
    return (start + LANE_INDEX[w] * step + LANE_BYTE[w]) & 0xFFFFFFFF


def _lane_mask(mask: np.ndarray, w: str) -> np.ndarray:
    """A lane is active when the mask bit of its first byte is set."""
    first = np.asarray(mask)[..., ::WIDTH[w]]
    return repeat_mask(first, WIDTH[w])


def _broadcast_load(mem, base, offset, w: str) -> np.ndarray:
    element = _load(mem, address(base, offset), WIDTH[w])
    return np.concatenate([element] * (16 // WIDTH[w]), axis=-1)


for _w in WIDTH:
    MEMORY_OPS.update({
        f"vlds.{_w}": ("load", lambda m, b, o, s, w=_w: m.gather(_strided(b, o, s, w))),
        f"vsts.{_w}": ("store", lambda m, v, b, o, s, w=_w: m.scatter(_strided(b, o, s, w), v)),
        f"vlds.m.{_w}": ("load", lambda m, b, o, s, k, w=_w: m.gather(
            _strided(b, o, s, w), _lane_mask(k, w))),
        f"vsts.m.{_w}": ("store", lambda m, v, b, o, s, k, w=_w: m.scatter(
            _strided(b, o, s, w), v, _lane_mask(k, w))),
        f"vldb.{_w}": ("load", lambda m, b, o, w=_w: _broadcast_load(m, b, o, w)),
    })
