"""Bad sweep specs: each ``golden/X.toml`` gives exactly ``golden/X.expected`` on stderr
(a located error, exit code 1, no traceback, nothing run).

Regenerate with ``VPUC_UPDATE_GOLDEN=1 pytest tests/sweep/test_spec_golden.py`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vpuc.cli import main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
CASES = sorted(GOLDEN.glob("*.toml"))


@pytest.mark.parametrize("spec", CASES, ids=[c.stem for c in CASES])
def test_bad_spec_is_a_located_error(spec, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    relative = spec.relative_to(ROOT)
    code = main(["sweep", str(relative), "--in-process", "-o", str(tmp_path / "out")])
    captured = capsys.readouterr()
    expected = spec.with_suffix(".expected")
    if UPDATE:
        expected.write_text(captured.err)
    assert code == 1 and captured.out == ""
    assert captured.err == expected.read_text()
    assert f"{relative}:" in captured.err and "Traceback" not in captured.err
    assert not (tmp_path / "out").exists()


def test_every_golden_spec_has_its_expected_file():
    assert CASES and all(c.with_suffix(".expected").is_file() for c in CASES)


def exit_code(args: list[str]) -> int:
    """``vpuc ARGS``'s exit code, argparse's own exits included."""
    try:
        return main(args)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("flags", [["--workers", "0"], ["--workers", "2", "--in-process"],
                                   ["--scheduler", "tcp://127.0.0.1:1", "--in-process"]])
def test_bad_flags_are_usage_errors(flags, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = exit_code(["sweep", "examples/sweep_tiles.toml", "-o", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
