"""Shared helpers for the blob tests: compile the examples once, find the outside tools."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import pytest

from vpuc.arch import load_arch
from vpuc.blob.fb_decode import Decoder
from vpuc.blob.fb_schema import load_schema
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.ir.module import Barrier, Module
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import compile_pipeline, parse_pipeline
from vpuc.program import Program
from vpuc.vir.parser import parse_file

from tests.tools import tool  # noqa: F401  (the blob tests import it from here)

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted(REPO.glob("examples/*.vir")) + [REPO / "tests/unit/data/clamp_asm.vir",
                                                 REPO / "tests/unit/data/dynamic_asm.vir"]
IDS = [p.stem for p in SOURCES]


@lru_cache(maxsize=None)
def _compiled(path: Path) -> Program | str:
    try:
        module = parse_file(str(path))
        ctx = PassContext(load_arch(module.arch))
        # What `vpuc compile` runs: lower-graph first for graph modules.
        PassManager(parse_pipeline(",".join(compile_pipeline(module)))).run(module, ctx)
    except VpucError as exc:
        return exc.diagnostics[0].message
    program = ctx.artifacts.get("program") or Program(module, ctx.arch)
    program.provenance = {"source": path.name}
    return program


def compiled(path: Path) -> Program:
    """A fresh copy of the compiled example; skips those that do not compile yet
    (a library kernel or a .npy file not written yet)."""
    result = _compiled(path)
    if isinstance(result, str):
        pytest.skip(f"{path.name} does not compile yet: {result}")
    return copy.deepcopy(result)


def normalized(read: Module, source: Module) -> Module:
    """``read`` with what compiling decided undone: CMX offsets and physical barrier
    ids the source left open, the barrier order, and the pass attributes."""
    module = copy.deepcopy(read)
    module.attributes = {}
    offsets = {b.name: b.offset for b in source.buffers}
    for buffer in module.buffers:
        if offsets.get(buffer.name, 0) is None:
            buffer.offset = None
    physical = {b.name: b.physical for b in source.barriers}
    by_name = {b.name: b for b in module.barriers}
    module.barriers = [Barrier(b.name, by_name[b.name].physical if physical[b.name] is not None
                               else None) for b in source.barriers if b.name in by_name]
    return module


def with_task(content, executor: int, index: int, **fields):
    """``content`` (a flattened blob) with task ``index`` of the ``executor``'s list given
    ``fields``."""
    lists = list(content.task_lists)
    at = next(i for i, tl in enumerate(lists) if tl.executor == executor)
    tasks = list(lists[at].tasks)
    tasks[index] = tasks[index]._replace(**fields)
    lists[at] = lists[at]._replace(tasks=tuple(tasks))
    return content._replace(task_lists=tuple(lists))


def decoded(data: bytes, columns: bool):
    """The root records, or the refusal ('refused', where, offset, message)."""
    try:
        return Decoder(load_schema(), data, "x.blob", columns=columns).root()
    except VpucError as exc:
        diag = exc.diagnostics[0]
        assert isinstance(diag.loc, BinLoc), diag
        return ("refused", diag.loc.section, diag.loc.offset, diag.message)
