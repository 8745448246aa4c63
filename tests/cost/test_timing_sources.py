"""Every number in the timing TOML names its source or its fit (issue 12): on its own
line's comment, or in the comment block heading its group of lines (the key lines
after a comment block, up to a blank line or the next comment block).  A fitted number names the fit
that produced it: the script, the date, the rows and the fit's residual."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from vpuc.cost.timing import TIMING_DIR, timing_path

SOURCES = ("vpunn", "vpux", "assumption", "fitted", "calibration data")
FIT = re.compile(r"fitted: bench/fit_cost_model\.py \d{4}-\d{2}-\d{2}, \d+ (DPU|DMA) rows, "
                 r"mean \|log residual\| \d+\.\d+")
IDENTITY = {"name", "version", "structure"}      # the file's identity, not timing numbers
NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w.])")
KEY_LINE = re.compile(r"^([A-Za-z0-9_.]+)\s*=\s*(.*)$")


def split_comment(line: str) -> tuple[str, str]:
    """(value text, comment) of a TOML line whose strings hold no '#'."""
    code, _, comment = line.partition("#")
    return code, comment


def unsourced(text: str) -> list[str]:
    """``key (line N)`` of every number with neither a source nor, if fitted, its fit."""
    bad, heading, table, in_comment = [], [], "", False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            heading = (heading if in_comment else []) + [stripped[1:]]
            in_comment = True
            continue
        in_comment = False
        if not stripped or stripped.startswith("["):
            table = stripped.strip("[]") if stripped else table
            heading = []
            continue
        code, comment = split_comment(stripped)
        match = KEY_LINE.match(code.strip())
        note = " ".join(heading + [comment])
        if match is None or (not table and match.group(1) in IDENTITY):
            continue
        value = match.group(2)
        if value.startswith('"') or not NUMBER.search(value):
            continue        # a string names a file or a mode, not a number
        key = f"{table}.{match.group(1)}" if table else match.group(1)
        if not any(source in note.lower() for source in SOURCES):
            bad.append(f"{key} (line {number}): no source")
        elif "fitted" in note.lower() and not FIT.search(note):
            bad.append(f"{key} (line {number}): fitted, but names no fit")
    return bad


@pytest.mark.parametrize("path", sorted(TIMING_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_every_number_names_its_source_or_fit(path):
    text = path.read_text(encoding="utf-8")
    tomllib.loads(text)                       # it is the file the cost model reads
    assert unsourced(text) == []


def test_the_shipped_timing_lives_with_the_cost_model():
    assert timing_path("NPU37XX") == TIMING_DIR / "npu37xx.toml"
    assert TIMING_DIR.parent.name == "cost" and timing_path("NPU37XX").is_file()


def test_the_check_finds_what_it_should():
    """The check itself: an own-line source, a source in the comment block above, a
    number without one, a fit without its residual, and identity keys left alone."""
    text = "\n".join([
        'name = "X"', "version = 3",
        "[dma]",
        "a = 1   # vpunn DMA_engine_B",
        "# Dense ops: vpux lit tests", "b = { u8 = 2 }", "b2 = 2",
        "",
        "c = 3   # because",
        "d = 4.5  # fitted: by hand",
        "e = 5.5  # fitted: bench/fit_cost_model.py 2026-11-26, 24 DMA rows, "
        "mean |log residual| 0.040",
        'f = "CUBOID_16x16"',
        "",
        "# a comment for nothing", "[dpu]", "g = 7",
    ])
    assert unsourced(text) == ["dma.c (line 9): no source",
                               "dma.d (line 10): fitted, but names no fit",
                               "dpu.g (line 16): no source"]
