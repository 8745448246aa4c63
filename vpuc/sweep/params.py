"""The parameters a sweep can vary, and one point's architecture built from them.

Three kinds, each applied through the loader of what it changes:

- *structure* (``vpuc/archs/*.toml``, what the compiler sees): a field of
  ``vpuc.arch.Arch`` replaced on the base architecture, so a point with another
  structure is a new compile;
- *timing* (the cost model's timing file): a key of the timing file's data
  replaced before ``vpuc.cost.timing`` checks and converts it, so clocks keep
  converting every number the way they do for the shipped file;
- *compile* options of ``vpuc.compile`` (``precision``, ``format``, the tiling limit
  ``cmx_budget``, and ``schedule`` where the compile API takes it).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from dataclasses import dataclass
from functools import lru_cache

from vpuc.arch import Arch, load_arch


@dataclass(frozen=True)
class Param:
    name: str
    kind: str                  # "structure", "timing" or "compile"
    key: str                   # Arch field, dotted timing-file key, or compile keyword
    type: type                 # int, float or str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""


PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("tiles", "structure", "tiles", int, 1, doc="NCE tiles"),
    Param("act_shaves_per_tile", "structure", "act_shaves_per_tile", int, 1,
          doc="ACT SHAVEs per tile"),
    Param("dma_channels", "structure", "dma_channels", int, 1, doc="DMA channels"),
    Param("cmx_bytes", "structure", "cmx_bytes", int, 1, doc="CMX bytes per tile"),
    Param("barriers", "structure", "barriers", int, 1, doc="physical barriers"),
    Param("ddr_bandwidth_mbps", "timing", "ddr.bandwidth_mbps", float, 1,
          doc="DDR bandwidth, MB/s"),
    Param("ddr_read_latency_cycles", "timing", "dma.ddr_read_latency_cycles", float, 0,
          doc="DDR read latency, DMA cycles"),
    Param("ddr_write_latency_cycles", "timing", "dma.ddr_write_latency_cycles", float, 0,
          doc="DDR write latency, DMA cycles"),
    Param("nce_mhz", "timing", "clocks.nce_mhz", float, 1, doc="NCE (DPU) clock, MHz"),
    Param("shave_mhz", "timing", "clocks.shave_mhz", float, 1, doc="ACT SHAVE clock, MHz"),
    Param("dma_mhz", "timing", "clocks.dma_mhz", float, 1, doc="DMA clock, MHz"),
    Param("cmx_mhz", "timing", "clocks.cmx_mhz", float, 1, doc="CMX clock, MHz"),
    Param("dpu_macs_per_cycle", "timing", "dpu.dense_macs_per_cycle", float, 1,
          doc="dense f16 MACs per cycle of a DPU (the other element types scale with it)"),
    Param("precision", "compile", "precision", str, choices=("f16", "f32"),
          doc="ONNX import precision"),
    Param("format", "compile", "format", str, choices=("fb", "elf"), doc="blob format"),
    Param("cmx_budget", "compile", "cmx_budget", int, 1,
          doc="bytes of a tile's CMX one layer's blocks may use (the lowering's tiling limit)"),
    Param("schedule", "compile", "schedule", str,
          doc="the compile API's schedule option (where vpuc.compile takes one)"),
)}


def compile_api_takes(keyword: str) -> bool:
    """Whether this vpuc's ``vpuc.compile`` has the keyword argument ``keyword``."""
    from vpuc import api
    return keyword in inspect.signature(api.compile).parameters


def base_values(arch_name: str) -> dict[str, float | int | str]:
    """Every numeric parameter's value on the unmodified architecture (for cost proxies
    over parameters a sweep does not vary)."""
    structure = load_arch(arch_name)
    data = timing_data(arch_name)
    values: dict[str, float | int | str] = {}
    for p in PARAMS.values():
        if p.kind == "structure":
            values[p.name] = getattr(structure, p.key)
        elif p.kind == "timing":
            node = data
            for key in p.key.split("."):
                node = node[key]
            values[p.name] = float(node["f16"] if isinstance(node, dict) else node)
    return values


@lru_cache(maxsize=None)
def _timing_source(arch_name: str):
    from vpuc.cost.timing import read_timing_file, resolve_timing_path
    path = resolve_timing_path(arch_name)
    return path, read_timing_file(path)


def timing_data(arch_name: str) -> dict:
    """A fresh copy of the timing file's data of ``arch_name`` (through the cost model's loader)."""
    return copy.deepcopy(_timing_source(arch_name)[1])


def structure_of(arch_name: str, values: dict) -> Arch:
    """The base structure with the point's structure parameters replaced."""
    changes = {PARAMS[n].key: int(v) for n, v in values.items()
               if n in PARAMS and PARAMS[n].kind == "structure"}
    return dataclasses.replace(load_arch(arch_name), **changes)


def timing_values(values: dict) -> dict:
    """The point's timing parameters."""
    return {n: v for n, v in values.items() if n in PARAMS and PARAMS[n].kind == "timing"}


def timing_of(arch_name: str, values: dict):
    """The timing model (``vpuc.cost.timing.Timing``) of a point: the timing file's data
    with the point's timing parameters, checked and converted by the cost model."""
    from vpuc.cost.timing import checked_timing
    path, _ = _timing_source(arch_name)
    data = timing_data(arch_name)
    for name, value in values.items():
        p = PARAMS.get(name)
        if p is None or p.kind != "timing":
            continue
        *parents, last = p.key.split(".")
        node = data
        for key in parents:
            node = node[key]
        if isinstance(node[last], dict):     # a per-element-type table: keep its ratios
            scale = float(value) / float(node[last]["f16"])
            node[last] = {k: float(v) * scale for k, v in node[last].items()}
        else:
            node[last] = float(value)
    return checked_timing(data, path)


def sim_arch_of(arch_name: str, structure: Arch, values: dict):
    """The simulator's architecture of a point: its timing model over ``structure``."""
    from runtime_sim.simarch import SimArch
    timing = timing_of(arch_name, values)
    fields = {f.name: getattr(timing, f.name) for f in dataclasses.fields(SimArch)
              if f.name != "structure"}
    return SimArch(structure=structure, **fields)


def compile_options(values: dict) -> dict:
    """The point's keyword arguments for ``vpuc.compile``."""
    return {PARAMS[n].key: v for n, v in values.items()
            if n in PARAMS and PARAMS[n].kind == "compile"}
