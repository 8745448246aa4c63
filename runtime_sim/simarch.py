"""The simulator's architecture: the timing model (``vpuc/cost/archs/*.toml``) over a structure.

The numbers are read by the cost model (``vpuc.cost.timing``), which the
compiler reads too; the *structure* (tiles, CMX, executors, barriers) is the
compiler's ``vpuc.arch.Arch`` named by the file's ``structure`` key, so the two
never disagree.  Everything is in cycles of the NCE clock, so the event loop
never converts units.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.arch import Arch, load_arch
from vpuc.cost.dma import DmaParams
from vpuc.cost.dpu import DpuParams
from vpuc.cost.timing import TIMING_DIR, load_timing, structure_ref, timing_path
from vpuc.diagnostics import VpucError

SIM_ARCH_DIR = TIMING_DIR


@dataclass(frozen=True)
class SimArch:
    name: str
    version: int
    path: str
    structure: Arch
    nce_mhz: float
    shave_mhz: float
    ddr_bytes_per_cycle: float     # shared by every transfer with a side in DDR
    dma: DmaParams
    dpu: DpuParams
    # ACT SHAVE: NCE cycles per interpreter cycle (clock ratio times the table scale).
    shave_cycle: float
    # Runtime dispatch per unit, NCE cycles.
    dispatch: dict[str, float]

    def us(self, cycles: float) -> float:
        """Microseconds at the NCE clock."""
        return cycles / self.nce_mhz

    def gbps(self, bytes_per_cycle: float) -> float:
        return bytes_per_cycle * self.nce_mhz / 1000.0


def default_sim_arch_path(structure_name: str) -> Path:
    return timing_path(structure_name)


@lru_cache(maxsize=None)
def load_sim_arch(name_or_path: str = "NPU37XX") -> SimArch:
    """Load a timing model by structure name (``NPU37XX``) or by the path of a TOML file.
    The numbers are the cost model's own ``load_timing`` (cached for the process: the
    compiler has usually read the same file, and parsing the TOML again took ~2 ms of a
    small model's timing-only run)."""
    timing = load_timing(name_or_path)
    structure = load_arch(structure_ref(timing))
    return SimArch(name=timing.name, version=timing.version, path=timing.path,
                   structure=structure, nce_mhz=timing.nce_mhz, shave_mhz=timing.shave_mhz,
                   ddr_bytes_per_cycle=timing.ddr_bytes_per_cycle, dma=timing.dma,
                   dpu=timing.dpu, shave_cycle=timing.shave_cycle, dispatch=timing.dispatch)


def sim_arch_for(structure: Arch, override: str | None = None) -> SimArch:
    """The timing model to simulate ``structure`` with; its structure must be the same."""
    arch = load_sim_arch(override or structure.name)
    if arch.structure.name != structure.name:
        raise VpucError(f"{arch.path} models {arch.structure.name}, but the program was compiled "
                        f"for {structure.name}")
    return arch
