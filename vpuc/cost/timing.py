"""The architecture's timing data: one TOML file per architecture, read into typed parameters.

The file (``vpuc/cost/archs/<arch>.toml``, or any path) holds clocks, DDR,
CMX, the DMA, DPU and ACT SHAVE cost parameters and the runtime's dispatch
costs, each with its source or its fit.  It is read here, without importing
the simulator, so the compiler and the simulator read the same numbers; every
number is converted once to cycles of the NCE clock.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.cost.dma import DmaParams
from vpuc.cost.dpu import CLASSES, DpuParams
from vpuc.cost.modes import MODE_NAMES, ModeGrid
from vpuc.diagnostics import VpucError

# The cost model owns the timing files: data shipped in this package.
TIMING_DIR = Path(__file__).resolve().parent / "archs"


@dataclass(frozen=True)
class Timing:
    name: str
    version: int
    path: str
    structure: str                # the compiler's architecture this file extends
    nce_mhz: float
    shave_mhz: float
    ddr_bytes_per_cycle: float    # shared by every transfer with a side in DDR
    dma: DmaParams
    dpu: DpuParams
    shave_cycle: float            # NCE cycles per ACT SHAVE interpreter cycle
    dispatch: dict[str, float]    # runtime cost to start a unit, by engine


def timing_path(structure_name: str) -> Path:
    return TIMING_DIR / f"{structure_name.lower()}.toml"


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


def _positive_table(data: dict, path: str) -> dict[str, float]:
    table = _get(data, path, dict)
    for key in table:
        if _get(data, f"{path}.{key}") <= 0:
            raise ValueError(f"{path}.{key}")
    return {k: float(v) for k, v in table.items()}


def _triple(value, path: str) -> tuple[int, int, int]:
    if (not isinstance(value, list) or len(value) != 3
            or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in value)):
        raise ValueError(path)
    return tuple(value)


def _modes(data: dict) -> dict[str, ModeGrid]:
    modes = {}
    for name, entry in _get(data, "dpu.modes", dict).items():
        if name not in MODE_NAMES or not isinstance(entry, dict):
            raise ValueError(f"dpu.modes.{name}")
        modes[name] = ModeGrid(name, _triple(entry.get("grid"), f"dpu.modes.{name}.grid"),
                               _triple(entry.get("block"), f"dpu.modes.{name}.block"))
    return modes


def _dpu(data: dict) -> DpuParams:
    modes = _modes(data)
    default = data["dpu"].get("default_mode")
    if default not in modes:
        raise ValueError("dpu.default_mode")
    overlap = _get(data, "dpu.overlap_p")
    if overlap < 1:
        raise ValueError("dpu.overlap_p")
    return DpuParams(
        modes=modes, default_mode=default,
        dense_macs_per_cycle=_positive_table(data, "dpu.dense_macs_per_cycle"),
        dense_efficiency=_get(data, "dpu.dense_efficiency"),
        rates={"depthwise": _get(data, "dpu.depthwise_macs_per_cycle"),
               "pool": _get(data, "dpu.pool_macs_per_cycle"),
               "eltwise": _get(data, "dpu.eltwise_elements_per_cycle")},
        int8_speedup=_get(data, "dpu.int8_speedup"),
        activation_bytes_per_cycle=_get(data, "dpu.activation_bytes_per_cycle"),
        weight_bytes_per_cycle=_get(data, "dpu.weight_bytes_per_cycle"),
        output_bytes_per_cycle=_get(data, "dpu.output_bytes_per_cycle"),
        setup={c: _get(data, f"dpu.setup_cycles.{c}") for c in CLASSES},
        overlap=overlap)


def timing_from_data(data: dict, path: str) -> Timing:
    """Typed timing from a parsed TOML document; KeyError/TypeError/ValueError name the key."""
    structure = data["structure"]
    if not isinstance(structure, str):
        raise TypeError("structure")
    nce = _get(data, "clocks.nce_mhz")
    cmx = _get(data, "clocks.cmx_mhz")
    dma = _get(data, "clocks.dma_mhz")
    shave = _get(data, "clocks.shave_mhz")
    if min(nce, cmx, dma, shave) <= 0:
        raise ValueError("clocks")
    dma_params = DmaParams(
        engine_bytes_per_cycle=_get(data, "dma.engine_bytes_per_cycle") * dma / nce,
        cmx_bytes_per_cycle=_get(data, "cmx.bytes_per_cycle") * cmx / nce,
        permute_elements_per_cycle=_get(data, "dma.permute_elements_per_cycle") * dma / nce,
        ddr_read_latency=_get(data, "dma.ddr_read_latency_cycles"),
        ddr_write_latency=_get(data, "dma.ddr_write_latency_cycles"),
        cmx_latency=_get(data, "cmx.latency_cycles") * nce / cmx,
        burst_bytes=_get(data, "dma.burst_bytes", int))
    if min(dma_params.engine_bytes_per_cycle, dma_params.cmx_bytes_per_cycle,
           dma_params.permute_elements_per_cycle) <= 0:
        raise ValueError("dma rates")
    timing = Timing(
        name=str(data["name"]), version=int(data["version"]), path=path, structure=structure,
        nce_mhz=nce, shave_mhz=shave,
        ddr_bytes_per_cycle=_get(data, "ddr.bandwidth_mbps") / nce,
        dma=dma_params, dpu=_dpu(data),
        shave_cycle=nce / shave * _get(data, "shave.cycle_scale"),
        dispatch={
            "DMA": _get(data, "runtime.dispatch_dma_cycles") * nce / dma,
            "DPU": _get(data, "runtime.dispatch_dpu_cycles"),
            "ACT_SHAVE": _get(data, "runtime.dispatch_act_shave_cycles") * nce / shave,
        })
    dpu = timing.dpu
    if min(timing.ddr_bytes_per_cycle, dpu.dense_efficiency, *dpu.rates.values(),
           dpu.int8_speedup, dpu.activation_bytes_per_cycle, dpu.weight_bytes_per_cycle,
           dpu.output_bytes_per_cycle) <= 0:
        raise ValueError("bandwidths and rates (must be positive)")
    return timing


def read_timing_file(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise VpucError(f"cannot read timing file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise VpucError(f"{path}: malformed timing file: {exc}") from None


def resolve_timing_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix:
        return path
    path = timing_path(name_or_path)
    if not path.exists():
        known = ", ".join(sorted(p.stem.upper() for p in TIMING_DIR.glob("*.toml")))
        raise VpucError(f"no timing model for architecture '{name_or_path}'; "
                        f"expected one of {known}, or --arch FILE")
    return path


def checked_timing(data: dict, path: Path) -> Timing:
    try:
        return timing_from_data(data, str(path))
    except KeyError as exc:
        raise VpucError(f"{path}: timing file lacks {exc}") from None
    except (TypeError, ValueError) as exc:
        raise VpucError(f"{path}: timing file has a bad value for {exc}; "
                        "expected a non-negative number") from None


@lru_cache(maxsize=None)
def load_timing(name_or_path: str = "NPU37XX") -> Timing:
    """The timing model of an architecture (``NPU37XX``) or of a TOML file."""
    path = resolve_timing_path(name_or_path)
    return checked_timing(read_timing_file(path), path)


def structure_ref(timing: Timing) -> str:
    """What ``vpuc.arch.load_arch`` takes for the structure a timing file extends: a
    name, or a ``.toml`` path resolved against the timing file's folder."""
    if timing.structure.endswith(".toml"):
        return str((Path(timing.path).parent / timing.structure).resolve())
    return timing.structure


def default_timing(structure_name: str) -> Timing | None:
    """The timing model shipped for a structure (``vpuc/cost/archs/<name>.toml``); None
    when there is none (a test architecture, say): the passes that ask the cost model
    then say so, located at the module."""
    if not timing_path(structure_name).exists():
        return None
    return load_timing(structure_name)
