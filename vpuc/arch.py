"""Architecture descriptions: data files read into one typed, frozen object.

The compiler needs the *structure* of a target (tiles, CMX, executors, barrier
limits, window bases).  Each architecture is a TOML file in ``vpuc/archs/``;
the numbers and their sources live there, not in code.  The simulator's timing
model (clocks, bandwidths, cycle tables) is a separate file in
``vpuc/cost/archs/`` that names the structure it extends.
"""

from __future__ import annotations

import difflib
import numbers
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.diagnostics import Loc, UsageError, VpucError

ARCH_DIR = Path(__file__).parent / "archs"
DEFAULT_ARCH = "NPU37XX"
WINDOW_NAMES = ("WIN_D", "WIN_E", "WIN_F")


@dataclass(frozen=True)
class Arch:
    name: str
    version: int
    tiles: int
    cmx_bytes: int
    act_shaves_per_tile: int
    dpus_per_tile: int
    dma_channels: int
    barriers: int
    max_producers: int
    max_consumers: int
    window_size: int
    window_bases: dict[str, int]
    ddr_address_bits: int = 32
    ddr_aperture: int = 0x80000000    # where an ACT SHAVE addresses DDR operands

    @property
    def max_tensor_bytes(self) -> int:
        """The largest tensor the target can address."""
        return 1 << self.ddr_address_bits

    def window_base(self, window: str) -> int:
        return self.window_bases[window]


def default_cmx_budget(arch: Arch) -> int:
    """The bytes of a tile's CMX one layer's (or segment's) blocks may use unless the compile
    option ``cmx_budget`` says otherwise: half the tile's CMX (1 MiB on NPU37XX), leaving the
    rest to what the blocks do not count (kernels' scratch, alignment)."""
    return arch.cmx_bytes // 2


def checked_cmx_budget(arch: Arch, budget) -> int:
    """``budget`` (None: ``default_cmx_budget``) if it is a whole number of bytes from 1 to
    the tile's CMX size, else a UsageError."""
    if budget is None:
        return default_cmx_budget(arch)
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) \
            or not 1 <= budget <= arch.cmx_bytes:
        raise UsageError(f"the CMX budget must be a whole number of bytes from 1 to "
                         f"{arch.name}'s {arch.cmx_bytes} bytes of CMX per tile, not {budget!r}")
    return int(budget)


def known_archs() -> list[str]:
    return sorted(p.stem.upper() for p in ARCH_DIR.glob("*.toml"))


def unknown_arch_message(name: str) -> str:
    """What to say about an architecture name vpuc does not know (with a did-you-mean)."""
    known = known_archs()
    hint = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.5)
    return (f"unknown architecture '{name}'; "
            + (f"did you mean '{hint[0]}'? " if hint else "")
            + "expected one of " + ", ".join(known))


@lru_cache(maxsize=None)
def load_arch(name_or_path: str = DEFAULT_ARCH) -> Arch:
    """Load an architecture by name (``NPU37XX``) or by the path of a TOML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = ARCH_DIR / f"{name_or_path.lower()}.toml"
        if not path.exists():
            raise VpucError(unknown_arch_message(name_or_path))
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        raise VpucError(f"cannot read architecture file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise VpucError(f"{path}: malformed architecture file: {exc}") from None
    try:
        arch = Arch(
            name=data["name"],
            version=int(data["version"]),
            tiles=int(data["tiles"]["count"]),
            cmx_bytes=int(data["tiles"]["cmx_bytes"]),
            act_shaves_per_tile=int(data["tiles"]["act_shaves_per_tile"]),
            dpus_per_tile=int(data["tiles"]["dpus_per_tile"]),
            dma_channels=int(data["dma"]["channels"]),
            barriers=int(data["barriers"]["count"]),
            max_producers=int(data["barriers"]["max_producers"]),
            max_consumers=int(data["barriers"]["max_consumers"]),
            window_size=int(data["windows"]["size"]),
            window_bases={w: int(data["windows"][w]) for w in WINDOW_NAMES},
            ddr_address_bits=int(data.get("ddr", {}).get("address_bits", 32)),
            ddr_aperture=int(data.get("ddr", {}).get("shave_aperture", 0x80000000)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise VpucError(f"{path}: architecture file lacks or mistypes {exc}") from None
    check_numbers(arch, path, text)
    return arch


UINT32_MAX = (1 << 32) - 1
# (TOML table, key, Arch attribute, smallest, largest, why the largest).  The blob's
# Architecture fields are uint32; a tile is a uint8 in DPU and ACT tasks, a DMA channel
# a uint8, a physical barrier id an int16; MemRefData.dataAddr is a uint32.
NUMBER_LIMITS = (
    ("", "version", "version", 0, UINT32_MAX, "a uint32 in the blob"),
    ("tiles", "count", "tiles", 1, 256, "tasks hold a tile as a uint8"),
    ("tiles", "cmx_bytes", "cmx_bytes", 1, UINT32_MAX, "a uint32 in the blob"),
    ("tiles", "act_shaves_per_tile", "act_shaves_per_tile", 1, UINT32_MAX, "a uint32"),
    ("tiles", "dpus_per_tile", "dpus_per_tile", 1, UINT32_MAX, "a uint32"),
    ("dma", "channels", "dma_channels", 1, 256, "a DMA task holds its channel as a uint8"),
    ("barriers", "count", "barriers", 1, 1 << 15, "a physical barrier id is an int16"),
    ("barriers", "max_producers", "max_producers", 1, UINT32_MAX, "a uint32"),
    ("barriers", "max_consumers", "max_consumers", 1, UINT32_MAX, "a uint32"),
    ("ddr", "address_bits", "ddr_address_bits", 1, 32, "MemRefData.dataAddr is a uint32"),
    ("windows", "size", "window_size", 1, UINT32_MAX, "a uint32 in the blob"),
    ("ddr", "shave_aperture", "ddr_aperture", 0, UINT32_MAX, "MemRefData.dataAddr is a uint32"),
)


def check_numbers(arch: Arch, path: Path, text: str) -> None:
    """Every number fits what reads it (NUMBER_LIMITS; a window ends within 32 bits), or a
    located error at its line in the file."""
    limits = list(NUMBER_LIMITS)
    limits += [("windows", w, None, 0, UINT32_MAX + 1 - arch.window_size,
                "a window ends within the 32-bit address space") for w in WINDOW_NAMES]
    for table, key, attr, lo, hi, why in limits:
        value = getattr(arch, attr) if attr else arch.window_bases[key]
        if not lo <= value <= hi:
            raise VpucError(f"{key} = {value} is out of range; expected {lo}..{hi} ({why})",
                            _key_loc(path, text, table, key))
    windows_end = max(arch.window_bases.values()) + arch.window_size
    if arch.ddr_aperture < windows_end:
        raise VpucError(f"shave_aperture = {arch.ddr_aperture:#x} overlaps the windows; "
                        f"expected {windows_end:#x} or above",
                        _key_loc(path, text, "ddr", "shave_aperture"))


def _key_loc(path: Path, text: str, table: str, key: str) -> Loc:
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped.strip("[] ")
        elif section == table and stripped.split("=")[0].strip() == key:
            return Loc(str(path), number, line.index(key) + 1)
    return Loc(str(path), 1, 1)
