"""Architecture descriptions: data files read into one typed, frozen object.

The compiler needs the *structure* of a target (tiles, CMX, executors, barrier
limits, window bases).  Each architecture is a TOML file in ``vpuc/archs/``;
the numbers and their sources live there, not in code.  The simulator's timing
model (clocks, bandwidths, cycle tables) is a separate file in
``vpuc/cost/archs/`` that names the structure it extends.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.diagnostics import VpucError

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

    @property
    def max_tensor_bytes(self) -> int:
        """The largest tensor the target can address."""
        return 1 << self.ddr_address_bits

    def window_base(self, window: str) -> int:
        return self.window_bases[window]


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
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise VpucError(f"cannot read architecture file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise VpucError(f"{path}: malformed architecture file: {exc}") from None
    try:
        return Arch(
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
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise VpucError(f"{path}: architecture file lacks or mistypes {exc}") from None
