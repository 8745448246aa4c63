"""Golden text tests: run ``vpuc`` in-process on every file under tests/golden/ and examples/.

Each ``X.vir`` has an ``X.expected`` beside it, compared byte for byte:

- ``roundtrip/``: the printed IR (stdout of ``vpuc opt X.vir -p verify``).  The
  test also checks the round trip itself: the expected text parses to a module
  equal to the input's, and prints back unchanged.
- ``errors/``, ``syntax/``: the exact stderr of ``vpuc opt X.vir`` (default
  pipeline), with nothing on stdout and exit code 1.
- ``usage/``: the exact stderr of a command-line mistake; exit code 2.
- ``fusion/``: the report of ``vpuc fuse X.vir`` (tokenization, data-flow bodies).
- ``lir/``: the Linear IR of ``vpuc fuse X.vir --lir`` (``--print-around P``: before and after P).
- ``examples/``: the printed IR of ``vpuc opt examples/X.vir`` (default pipeline).

A file may override the command and the exit code with directives in comments::

    // ARGS: opt {file} -p verify,allocate-cmx
    // EXIT: 0

``{file}`` is the file's path relative to the repository root; the test runs
from the root so messages quote stable relative paths.  For ``errors/`` files
with ``EXIT: 0`` (warnings only) stdout is not compared.

Regenerate the expected files with ``VPUC_UPDATE_GOLDEN=1 pytest tests/test_golden.py``
and review the diff.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from vpuc.cli import main
from vpuc.vir.parser import parse_file, parse_text
from vpuc.vir.printer import print_module

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"

# directory -> (default arguments, default exit code, which stream is the golden)
SUITES = {
    "roundtrip": ("opt {file} -p verify", 0, "stdout"),
    "errors": ("opt {file}", 1, "stderr"),
    "syntax": ("opt {file}", 1, "stderr"),
    "usage": ("opt {file}", 2, "stderr"),
    "fusion": ("fuse {file}", 0, "stdout"),
    "lir": ("fuse {file} --lir", 0, "stdout"),
}
_DIRECTIVE = re.compile(r"^//[ \t]*(ARGS|EXIT):[ \t]*(.*?)[ \t]*$", re.MULTILINE)


@dataclass
class Case:
    suite: str
    path: Path       # the .vir file
    expected: Path   # its golden
    args: list[str]
    exit_code: int
    stream: str

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def _case(suite: str, path: Path, expected: Path) -> Case:
    default_args, exit_code, stream = SUITES.get(suite, ("opt {file}", 0, "stdout"))
    args = default_args
    text = path.read_text(encoding="utf-8")
    for key, value in _DIRECTIVE.findall(text):
        if key == "ARGS":
            args = value
        else:
            exit_code = int(value)
    rel = path.relative_to(ROOT).as_posix()
    return Case(suite, path, expected, [a.replace("{file}", rel) for a in args.split()],
                exit_code, stream)


def collect() -> list[Case]:
    cases = []
    for suite in SUITES:
        for path in sorted((GOLDEN / suite).glob("*.vir")):
            cases.append(_case(suite, path, path.with_suffix(".expected")))
    for path in sorted((ROOT / "examples").glob("*.vir")):
        cases.append(_case("examples", path, GOLDEN / "examples" / f"{path.stem}.expected"))
    return cases


CASES = collect()


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=[f"{c.suite}/{c.path.stem}" for c in CASES])
def test_golden(case: Case, capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps its usage line to the terminal
    code, out, err = run_cli(case.args, capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    actual = out if case.stream == "stdout" else err
    if UPDATE:
        case.expected.parent.mkdir(parents=True, exist_ok=True)
        case.expected.write_text(actual, encoding="utf-8")
    assert code == case.exit_code, f"exit code {code}, expected {case.exit_code}\n{err}"
    if case.stream == "stdout":
        assert err == "", f"unexpected diagnostics:\n{err}"
    elif code != 0:
        assert out == "", "nothing may be printed to stdout on an error"
    assert case.expected.exists(), f"missing {case.expected}; run with VPUC_UPDATE_GOLDEN=1"
    assert actual == case.expected.read_text(encoding="utf-8")


ROUNDTRIP = [c for c in CASES if c.suite in ("roundtrip", "examples")]


@pytest.mark.parametrize("case", ROUNDTRIP, ids=[f"{c.suite}/{c.path.stem}" for c in ROUNDTRIP])
def test_roundtrip(case: Case) -> None:
    """parse → print → parse gives an equal module, and canonical text is a fixed point."""
    module = parse_file(case.path)
    printed = print_module(module)
    again = parse_text(printed, "<printed>")
    assert again == module
    assert print_module(again) == printed


def test_every_suite_has_cases() -> None:
    for suite in SUITES:
        assert any(c.suite == suite for c in CASES), f"no golden files in tests/golden/{suite}"
    assert len([c for c in CASES if c.suite == "examples"]) >= 5


def test_no_orphan_expected_files() -> None:
    known = {c.expected for c in CASES}
    orphans = [p for p in GOLDEN.rglob("*.expected") if p not in known]
    assert not orphans, f"expected files without an input: {orphans}"


DOC_BLOCKS = re.findall(r"```vir\n(.*?)```", (ROOT / "docs" / "vir.md").read_text(encoding="utf-8"),
                        re.DOTALL)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_doc_examples_verify(index: int) -> None:
    """Every ```vir block of docs/vir.md parses, verifies without errors and round-trips."""
    from vpuc.verifier import verify_module

    module = parse_text(DOC_BLOCKS[index], f"docs/vir.md#block{index}")
    bag = verify_module(module)
    assert not bag.has_errors, [d.message for d in bag.errors]
    assert parse_text(print_module(module), "<printed>") == module
