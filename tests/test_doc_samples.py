"""Command samples in the user docs are the commands' real output, so they cannot go stale.

A fenced block right after a marker line

    <!-- sample: run examples/conv_2tiles.vir -->
    <!-- sample: run examples/fused_chain.vir --kernel-profile | from ACT SHAVE cycles -->

holds exactly what ``vpuc ARGS`` prints on stdout, run in-process from the
repository root; ``| from PREFIX`` keeps the output from the first line that
starts with PREFIX on.  Regenerate every sample with
``VPUC_UPDATE_DOCS=1 pytest tests/test_doc_samples.py`` and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from vpuc.cli import main

ROOT = Path(__file__).resolve().parent.parent
UPDATE = os.environ.get("VPUC_UPDATE_DOCS") == "1"
SAMPLE = re.compile(r"^<!-- sample: (?P<args>[^|]*?)(?: \| from (?P<start>.*?))? -->\n"
                    r"(?P<fence>```[^\n]*\n)(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def samples() -> list[tuple[Path, str]]:
    return [(path, match["args"]) for path in sorted((ROOT / "docs").glob("*.md"))
            for match in SAMPLE.finditer(path.read_text(encoding="utf-8"))]


def output_of(args: str, start: str | None, capsys) -> str:
    capsys.readouterr()
    code = main(args.split())
    out, err = capsys.readouterr()
    assert code == 0, f"vpuc {args} exited {code}:\n{err}"
    if start is not None:
        lines = out.splitlines(keepends=True)
        first = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
        assert first is not None, f"vpuc {args} printed no line starting with {start!r}"
        out = "".join(lines[first:])
    return out


def test_simulator_doc_has_samples():
    """The run summary and the kernel profile in docs/simulator.md are checked samples."""
    assert [args for path, args in samples() if path.name == "simulator.md"] == [
        "run examples/conv_2tiles.vir", "run examples/conv_2tiles.vir --json",
        "run examples/fused_chain.vir --kernel-profile"]


@pytest.mark.parametrize("path, args", samples(),
                         ids=[f"{p.name}:{a}" for p, a in samples()])
def test_sample_is_current(path: Path, args: str, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = path.read_text(encoding="utf-8")
    match = next(m for m in SAMPLE.finditer(text) if m["args"] == args)
    actual = output_of(args, match["start"], capsys)
    if UPDATE:
        text = text[:match.start("body")] + actual + text[match.end("body"):]
        path.write_text(text, encoding="utf-8")
    else:
        assert match["body"] == actual, (f"{path.name}: the sample of `vpuc {args}` is stale; "
                                         "regenerate with VPUC_UPDATE_DOCS=1")
