"""`vpuc inspect --json`: the keys it emits are exactly the ones docs/blob-format.md
documents ("The JSON report"), for every example in both formats, for kernel
objects and for --section; and the version in the doc is the one emitted."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from blob_testlib import REPO, SOURCES, compiled

from vpuc.blob import write_blob
from vpuc.blob.inspect import INSPECT_VERSION, inspect_file
from vpuc.diagnostics import VpucError

DOC = REPO / "docs" / "blob-format.md"
_ROW = re.compile(r"^\| `([^`]+)` \|([^|]*)\|")


def documented(heading: str) -> tuple[set[str], set[str], set[str]]:
    """(every documented key path, those that are maps, those that are optional)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    keys, maps, optional = set(), set(), set()
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        match = _ROW.match(line)
        if not match:
            continue
        for path in _expand(match[1]):
            keys.add(path)
            if match[2].strip() == "map":
                maps.add(path)
            if "*optional*" in match[2]:
                optional.add(path)
    assert keys, f"no key table under {heading!r}"
    return keys, maps, optional


def _expand(pattern: str) -> list[str]:
    """`a.{b, c}[].{d, e}` -> a.b[].d, a.b[].e, a.c[].d, a.c[].e."""
    parts = re.split(r"\{([^}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else [c.strip() for c in p.split(",")]
               for i, p in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def emitted(value, maps: set[str], path: str = "", out: set[str] | None = None) -> set[str]:
    """Every key path of a report: objects recurse, lists of objects recurse as `[]`."""
    out = set() if out is None else out
    if isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            out.add(sub)
            if sub not in maps:
                emitted(item, maps, sub, out)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                emitted(item, maps, path + "[]", out)
    return out


def _check(heading: str, reports: list[dict]) -> None:
    keys, maps, optional = documented(heading)
    seen: set[str] = set()
    for report in reports:
        assert report["inspect_version"] == INSPECT_VERSION
        seen |= emitted(report, maps)
    assert seen - keys == set(), f"emitted but not documented under {heading!r}"
    assert keys - optional - seen == set(), f"documented under {heading!r} but never emitted"


def test_the_documented_version_is_the_emitted_one():
    text = DOC.read_text(encoding="utf-8")
    assert f'`"inspect_version"` is **{INSPECT_VERSION}**' in text


def test_blob_reports_have_exactly_the_documented_keys():
    reports = []
    for source in SOURCES:
        try:
            program = compiled(source)
        except pytest.skip.Exception:
            continue
        for fmt in ("fb", "elf"):
            data = write_blob(program, fmt, {"format": fmt})
            reports.append(json.loads(inspect_file(data, f"x.{fmt}", json=True)))
            for name in sorted(program.kernels)[:1]:      # with a kernel's disassembly
                reports.append(json.loads(inspect_file(data, "x", json=True, kernel=name)))
    assert len(reports) >= 2 * len(SOURCES)
    _check("#### `--json` of a blob", reports)


def test_kernel_object_reports_have_exactly_the_documented_keys():
    objects = [p.read_bytes() for p in sorted((REPO / "kernels" / "build").glob("*.o"))]
    program = compiled(REPO / "examples" / "fused_chain.vir")
    objects += [image.elf for image in program.kernels.values()]    # with graph and tags
    reports = [json.loads(inspect_file(o, "k.o", json=True)) for o in objects]
    reports.append(json.loads(inspect_file(objects[0], "k.o", json=True, no_disasm=True)))
    assert any(r["tags"] for r in reports) and any(r["relocations"] for r in reports)
    _check("#### `--json` of a kernel object", reports)


def test_section_reports_have_exactly_the_documented_keys():
    program = compiled(REPO / "examples" / "clamp.vir")
    reports = [json.loads(inspect_file(write_blob(program, "fb"), "x", json=True,
                                       section="tensors[0].dims")),
               json.loads(inspect_file(write_blob(program, "elf"), "x", json=True,
                                       section=".vpuc.tensors")),
               json.loads(inspect_file(program.kernels["runtime"].elf, "k.o", json=True,
                                       section=".text"))]
    _check("#### `--json` with `--section`", reports)


def test_an_undocumented_key_would_be_caught():
    keys, maps, _ = documented("#### `--json` of a blob")
    assert "header.options" in maps and "tensors[].slices" in keys
    assert "bogus" in emitted({"bogus": 1}, maps) - keys
    with pytest.raises(VpucError):
        inspect_file(b"not a blob", "x", json=True)
