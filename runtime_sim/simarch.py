"""The simulator's architecture: a timing model (``runtime_sim/archs/*.toml``) over a structure.

The structure (tiles, CMX, executors, barriers) is the compiler's ``vpuc.arch.Arch``
named by the file's ``structure`` key, so the two never disagree.  Everything
here is converted once to the simulator's time base, cycles of the NCE clock,
so the event loop never converts units.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.arch import Arch, load_arch
from vpuc.diagnostics import VpucError

SIM_ARCH_DIR = Path(__file__).parent / "archs"
FLOAT_ELEMS = ("f16", "bf16", "f32", "f64")


@dataclass(frozen=True)
class SimArch:
    name: str
    version: int
    path: str
    structure: Arch
    nce_mhz: float
    shave_mhz: float
    # DMA, in bytes per NCE cycle and NCE cycles.
    ddr_bytes_per_cycle: float
    ddr_latency: float
    cmx_bytes_per_cycle: float
    cmx_latency: float
    dma_engine_bytes_per_cycle: float
    dma_permute_elements_per_cycle: float
    # DPU.
    dense_macs_per_cycle: dict[str, int]
    window_macs_per_cycle: dict[str, int]
    eltwise_elements_per_cycle: int
    grid: tuple[int, int, int]
    variant_overhead: float
    # ACT SHAVE: NCE cycles per interpreter cycle (clock ratio times the table scale).
    shave_cycle: float
    # Runtime dispatch per unit, NCE cycles.
    dispatch: dict[str, float]

    def us(self, cycles: float) -> float:
        """Microseconds at the NCE clock."""
        return cycles / self.nce_mhz

    def gbps(self, bytes_per_cycle: float) -> float:
        return bytes_per_cycle * self.nce_mhz / 1000.0

    def dma_latency(self, in_ddr: bool) -> float:
        return self.ddr_latency if in_ddr else self.cmx_latency


def default_sim_arch_path(structure_name: str) -> Path:
    return SIM_ARCH_DIR / f"{structure_name.lower()}.toml"


def _get(data: dict, path: str, kind=float):
    node = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(path)
        node = node[key]
    if kind is dict:
        if not isinstance(node, dict):
            raise TypeError(path)
        return node
    if isinstance(node, bool) or not isinstance(node, (int, float)) or node < 0:
        raise ValueError(path)
    return kind(node)


@lru_cache(maxsize=None)
def load_sim_arch(name_or_path: str = "NPU37XX") -> SimArch:
    """Load a timing model by structure name (``NPU37XX``) or by the path of a TOML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = default_sim_arch_path(name_or_path)
        if not path.exists():
            known = ", ".join(sorted(p.stem.upper() for p in SIM_ARCH_DIR.glob("*.toml")))
            raise VpucError(f"no simulator timing model for architecture '{name_or_path}'; "
                            f"expected one of {known}, or --arch FILE")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise VpucError(f"cannot read simulator architecture file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise VpucError(f"{path}: malformed simulator architecture file: {exc}") from None
    try:
        structure_ref = data["structure"]
        if not isinstance(structure_ref, str):
            raise TypeError("structure")
        if structure_ref.endswith(".toml"):
            structure_ref = str((path.parent / structure_ref).resolve())
        structure = load_arch(structure_ref)
        nce = _get(data, "clocks.nce_mhz")
        cmx = _get(data, "clocks.cmx_mhz")
        dma = _get(data, "clocks.dma_mhz")
        shave = _get(data, "clocks.shave_mhz")
        if min(nce, cmx, dma, shave) <= 0:
            raise ValueError("clocks")
        dense = {k: int(v) for k, v in _get(data, "dpu.dense_macs_per_cycle", dict).items()}
        window = {k: int(v) for k, v in _get(data, "dpu.window_macs_per_cycle", dict).items()}
        grid = data["dpu"]["grid"]
        if len(grid) != 3 or any(not isinstance(g, int) or g < 1 for g in grid):
            raise ValueError("dpu.grid")
        arch = SimArch(
            name=str(data["name"]), version=int(data["version"]), path=str(path),
            structure=structure, nce_mhz=nce, shave_mhz=shave,
            ddr_bytes_per_cycle=_get(data, "ddr.bandwidth_mbps") / nce,
            ddr_latency=_get(data, "ddr.latency_ns") * nce / 1000.0,
            cmx_bytes_per_cycle=_get(data, "cmx.bytes_per_cycle") * cmx / nce,
            cmx_latency=_get(data, "cmx.latency_cycles") * nce / cmx,
            dma_engine_bytes_per_cycle=_get(data, "dma.engine_bytes_per_cycle") * dma / nce,
            dma_permute_elements_per_cycle=_get(data, "dma.permute_elements_per_cycle") * dma / nce,
            dense_macs_per_cycle=dense, window_macs_per_cycle=window,
            eltwise_elements_per_cycle=_get(data, "dpu.eltwise_elements_per_cycle", int),
            grid=tuple(grid), variant_overhead=_get(data, "dpu.variant_overhead_cycles"),
            shave_cycle=nce / shave * _get(data, "shave.cycle_scale"),
            dispatch={
                "DMA": _get(data, "runtime.dispatch_dma_cycles") * nce / dma,
                "DPU": _get(data, "runtime.dispatch_dpu_cycles"),
                "ACT_SHAVE": _get(data, "runtime.dispatch_act_shave_cycles") * nce / shave,
            },
        )
    except KeyError as exc:
        raise VpucError(f"{path}: simulator architecture file lacks {exc}") from None
    except (TypeError, ValueError) as exc:
        raise VpucError(f"{path}: simulator architecture file has a bad value for {exc}; "
                        "expected a non-negative number") from None
    if min(arch.ddr_bytes_per_cycle, arch.cmx_bytes_per_cycle, arch.dma_engine_bytes_per_cycle,
           arch.dma_permute_elements_per_cycle, arch.eltwise_elements_per_cycle) <= 0:
        raise VpucError(f"{path}: bandwidths and rates must be positive")
    return arch


def sim_arch_for(structure: Arch, override: str | None = None) -> SimArch:
    """The timing model to simulate ``structure`` with; its structure must be the same."""
    arch = load_sim_arch(override or structure.name)
    if arch.structure.name != structure.name:
        raise VpucError(f"{arch.path} models {arch.structure.name}, but the program was compiled "
                        f"for {structure.name}")
    return arch
