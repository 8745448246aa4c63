"""Window-mapped memory as a SHAVE sees it: WIN_D, WIN_E and WIN_F.

Each window is mapped by one flat ``uint8`` numpy array starting at the
window's base address (from the architecture file).  The arrays are used in
place, never copied: WIN_F is the caller's CMX slice, so kernel stores land
directly in it.  WIN_D (code + read-only data) rejects stores.

Every access is bounds-checked.  A faulting access raises ``AccessFault``
(a ``VpucError``) naming the address, the size and the window -- or "no
window"; the interpreter adds the pc and the instruction text.

Three access paths, with identical results:

* ``read``/``write``: one access at a Python int address (the interpreter);
* ``read_rows``/``write_rows``: one row of bytes per address, for an array of
  addresses (the batched fast path); evenly spaced rows are one checked span;
* ``gather``/``scatter``: byte addresses as an int64 array of any shape, with
  an optional mask of active bytes (strided and masked accesses).  Inactive
  bytes are neither checked nor touched.

With ``bounds`` set (``runtime_sim.isa.sanitizer.Bounds``, the memory sanitizer),
every access must also lie inside the ranges the invocation may load or store;
a refused one raises ``SanitizerFault`` naming what it hits.  ``stack`` is the
task's stack [lo, hi), which ``sp`` must not leave (checked by the interpreter).
"""

from __future__ import annotations

import numpy as np

from vpuc.arch import WINDOW_NAMES, Arch, load_arch
from vpuc.diagnostics import VpucError

READ_ONLY_WINDOWS = frozenset({"WIN_D"})


class AccessFault(VpucError):
    """An access outside the mapped windows, or a store to a read-only window."""

    def __init__(self, address: int, size: int, is_write: bool, window: str | None,
                 reason: str) -> None:
        self.address = address
        self.size = size
        self.is_write = is_write
        self.window = window
        self.reason = reason
        verb = "store" if is_write else "load"
        super().__init__(f"{verb} of {size} byte{'s' if size != 1 else ''} at {address:#010x}: "
                         f"{reason}")


class SanitizerFault(AccessFault):
    """An access inside the windows but outside what the invocation's task binds."""


class WindowMemory:
    bounds = None           # runtime_sim.isa.sanitizer.Bounds, or None: every window is open
    stack: tuple[int, int] | None = None

    def __init__(self, windows: dict[str, np.ndarray], arch: Arch | None = None) -> None:
        arch = arch or load_arch()
        self.window_size = arch.window_size
        self._maps: list[tuple[str, int, np.ndarray]] = []
        for name, array in windows.items():
            if name not in WINDOW_NAMES:
                raise VpucError(f"unknown window '{name}'; expected one of "
                                + ", ".join(WINDOW_NAMES))
            if not (isinstance(array, np.ndarray) and array.dtype == np.uint8 and array.ndim == 1
                    and array.flags.c_contiguous):
                raise VpucError(f"{name} must be a contiguous 1-D uint8 numpy array")
            if len(array) > arch.window_size:
                raise VpucError(f"{name} mapping of {len(array)} bytes exceeds the "
                                f"{arch.window_size}-byte window")
            self._maps.append((name, arch.window_base(name), array))

    def map_ddr(self, address: int, array: np.ndarray, name: str = "DDR") -> None:
        """Map ``array`` (a contiguous uint8 view of a DDR buffer's bytes, used in place) at
        ``address`` of the SHAVE's DDR aperture: an input a library kernel reads from DDR."""
        self._maps.append((name, address, array))

    def array(self, name: str) -> np.ndarray:
        for window, _, array in self._maps:
            if window == name:
                return array
        raise VpucError(f"window {name} is not mapped")

    def base(self, name: str) -> int:
        for window, base, _ in self._maps:
            if window == name:
                return base
        raise VpucError(f"window {name} is not mapped")

    # --- faults ----------------------------------------------------------------

    def _fault(self, address: int, size: int, is_write: bool) -> AccessFault:
        bounds = self.bounds
        for name, base, array in self._maps:
            if base <= address < base + (self.window_size if name in WINDOW_NAMES
                                         else len(array)):
                if is_write and name in READ_ONLY_WINDOWS and address + size <= base + len(array):
                    return AccessFault(address, size, True, name, f"{name} is read-only")
                if bounds is not None and address + size <= base + len(array):
                    return SanitizerFault(address, size, is_write, name,
                                          bounds.reason(address, size, is_write))
                return AccessFault(address, size, is_write, name,
                                   f"outside the mapped part of {name} "
                                   f"({base:#010x}..{base + len(array) - 1:#010x})")
        return AccessFault(address, size, is_write, None, "no window maps this address")

    def _locate(self, address: int, size: int, is_write: bool) -> tuple[np.ndarray, int]:
        for name, base, array in self._maps:
            offset = address - base
            if 0 <= offset and offset + size <= len(array):
                if is_write and name in READ_ONLY_WINDOWS:
                    break
                if self.bounds is not None and not self.bounds.covers(address, size, is_write):
                    break
                return array, offset
        raise self._fault(address, size, is_write)

    # --- single accesses ---------------------------------------------------------

    def read(self, address: int, size: int) -> np.ndarray:
        """A copy of ``size`` bytes at ``address``."""
        array, offset = self._locate(address, size, False)
        return array[offset:offset + size].copy()

    def write(self, address: int, data: np.ndarray) -> None:
        data = np.asarray(data, dtype=np.uint8).reshape(-1)
        array, offset = self._locate(address, data.size, True)
        array[offset:offset + data.size] = data

    # --- rows: one access of ``size`` bytes per address ---------------------------------

    def read_rows(self, addresses: np.ndarray, size: int) -> np.ndarray:
        """(..., size) bytes, one row per address (any shape).  Evenly spaced
        addresses (a loop walking a buffer) are read through one strided view."""
        addresses = np.asarray(addresses, np.int64)
        view = self._row_view(addresses.reshape(-1), size, False)
        if view is None:
            return self.gather(addresses[..., None] + np.arange(size))
        return view.copy().reshape(addresses.shape + (size,))

    def write_rows(self, addresses: np.ndarray, data: np.ndarray) -> None:
        """Store ``data[..., :]`` at each address (rows in C order; where rows
        overlap, the later one wins, as if the stores ran one after another)."""
        addresses = np.asarray(addresses, np.int64)
        size = data.shape[-1]
        data = np.broadcast_to(data, addresses.shape + (size,))
        view = self._row_view(addresses.reshape(-1), size, True)
        if view is None:
            self.scatter(addresses[..., None] + np.arange(size), data)
        else:
            view[...] = data.reshape(-1, size)

    def progression(self, first: int, step: int, rows: int, size: int,
                    is_write: bool) -> np.ndarray | None:
        """The (rows, size) view ``read_rows`` / ``write_rows`` use for the addresses
        first + i*step (step >= size: rows apart, ascending), without the address array;
        None when the rows are not all in one accessible window (the caller then goes
        through the rows, which fault as one access would)."""
        if step < size or rows < 1:
            return None
        try:
            array, offset = self._locate(first, (rows - 1) * step + size, is_write)
        except AccessFault:
            return None
        if offset + rows * step <= len(array):
            return array[offset:offset + rows * step].reshape(rows, step)[:, :size]
        return np.lib.stride_tricks.as_strided(array[offset:], shape=(rows, size),
                                               strides=(step, 1))

    def _row_view(self, flat: np.ndarray, size: int, is_write: bool) -> np.ndarray | None:
        """A (rows, size) view of window memory when the rows are evenly spaced,
        share one window and, for a store, do not overlap; None otherwise.  Faults name the
        first faulting row, exactly as the one-row access would."""
        step = _uniform_step(flat)
        # overlapping rows (a step below the size, 0: one vector every iteration) are
        # fine to read through one view; stores need "the later row wins", done below
        if step is None or (is_write and len(flat) > 1 and abs(step) < size):
            self._check_rows(flat, size, is_write)
            return None
        low = int(flat[0]) + min(0, step * (len(flat) - 1))
        span = int(flat[0]) + max(0, step * (len(flat) - 1)) + size - low
        try:
            array, offset = self._locate(low, span, is_write)
        except AccessFault:
            self._check_rows(flat, size, is_write)
            return None
        first, rows = offset + int(flat[0]) - low, len(flat)
        if step >= size and first + rows * step <= len(array):   # plain slicing: cheaper
            return array[first:first + rows * step].reshape(rows, step)[:, :size]
        start = array[first:]
        return np.lib.stride_tricks.as_strided(start, shape=(rows, size), strides=(step, 1))

    def _check_rows(self, flat: np.ndarray, size: int, is_write: bool) -> None:
        good = np.zeros(flat.shape, bool)
        for name, base, array in self._maps:
            if not (is_write and name in READ_ONLY_WINDOWS):
                good |= (flat >= base) & (flat + size <= base + len(array))
        if self.bounds is not None:
            good &= self.bounds.covers_rows(flat, size, is_write)
        if not good.all():
            raise self._fault(int(flat[~good][0]), size, is_write)

    # --- byte-address arrays -------------------------------------------------------

    def _resolve(self, addresses: np.ndarray, active: np.ndarray | None,
                 is_write: bool) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Split active byte addresses by window: [(array, selector, offsets)]."""
        addresses = np.asarray(addresses, dtype=np.int64)
        live = (np.ones(addresses.shape, bool) if active is None
                else np.broadcast_to(np.asarray(active, bool), addresses.shape))
        if not live.any():
            return []
        parts, covered = [], np.zeros(addresses.shape, bool)
        for name, base, array in self._maps:
            if is_write and name in READ_ONLY_WINDOWS:
                continue
            inside = live & (addresses >= base) & (addresses < base + len(array))
            if inside.any():
                covered |= inside
                parts.append((array, inside, addresses[inside] - base))
        missing = live & ~covered
        if self.bounds is not None:
            missing |= live & ~self.bounds.covers_rows(addresses, 1, is_write)
        if missing.any():
            first = int(addresses[missing].reshape(-1)[0])
            raise self._fault(first, 1, is_write)
        return parts

    def gather(self, addresses: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
        """Bytes at the given addresses (any shape); inactive bytes read as 0."""
        result = np.zeros(np.shape(addresses), np.uint8)
        for array, inside, offsets in self._resolve(addresses, active, False):
            result[inside] = array[offsets]
        return result

    def scatter(self, addresses: np.ndarray, values: np.ndarray,
                active: np.ndarray | None = None) -> None:
        """Store bytes at the given addresses.  With repeated addresses the last one
        in C order wins: numpy assigns a 1-D fancy index in order (a test pins this)."""
        values = np.broadcast_to(np.asarray(values, np.uint8), np.shape(addresses))
        for array, inside, offsets in self._resolve(addresses, active, True):
            array[offsets] = values[inside]


def _uniform_step(flat: np.ndarray) -> int | None:
    """The common difference of evenly spaced addresses, or None."""
    if len(flat) < 2:
        return 0
    steps = flat[1:] - flat[:-1]        # np.diff's checks cost more than this on short rows
    first = steps[0]
    return int(first) if (steps == first).all() else None


def accessible_ranges(memory: "WindowMemory") -> dict[bool, list[tuple[int, int]]]:
    """Accessible address ranges: {is_store: [(begin, end)]}: the sanitizer's when it
    is on (they lie inside the mapped windows), else the mapped windows."""
    bounds = memory.bounds
    if bounds is not None:
        return {False: bounds.ranges(False), True: bounds.ranges(True)}
    loads, stores = [], []
    for name in WINDOW_NAMES:
        try:
            base, size = memory.base(name), len(memory.array(name))
        except VpucError:
            continue
        loads.append((base, base + size))
        if name not in READ_ONLY_WINDOWS:
            stores.append((base, base + size))
    return {False: loads, True: stores}
