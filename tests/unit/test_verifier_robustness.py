"""Exit codes and error collection at the CLI, and no traceback on any input.

Mutated examples (tokens dropped, duplicated, swapped, numbers replaced, text
cut short) must give exit code 0 or 1 with located diagnostics, never an
internal error (exit 3) or a Python traceback.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from vpuc.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.vir"))
TOKEN = re.compile(r"\s+|[(),{}\[\]:=]|->|[^\s(),{}\[\]:=]+")
NUMBERS = ["0", "-1", "1", "2", "3", "7", "64", "255", "256", "65536", "99999999", "0x10", "1.5"]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def mutate(text: str, rng: random.Random) -> str:
    tokens = [t for t in TOKEN.findall(text)]
    words = [i for i, t in enumerate(tokens) if not t.isspace()]
    kind = rng.randrange(5)
    i = rng.choice(words)
    if kind == 0:
        del tokens[i]
    elif kind == 1:
        tokens.insert(i, tokens[i] + " ")
    elif kind == 2:
        j = rng.choice(words)
        tokens[i], tokens[j] = tokens[j], tokens[i]
    elif kind == 3:
        numeric = [k for k in words if re.fullmatch(r"[-+]?\d+(\.\d*)?", tokens[k])]
        tokens[rng.choice(numeric or [i])] = rng.choice(NUMBERS)
    else:
        return "".join(tokens)[: rng.randrange(len(text))]
    return "".join(tokens)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_mutants_never_crash(example: Path, tmp_path, capsys) -> None:
    rng = random.Random(example.stem)
    text = example.read_text(encoding="utf-8")
    target = tmp_path / "mutant.vir"
    for round_ in range(40):
        mutant = mutate(text, rng)
        target.write_text(mutant, encoding="utf-8")
        code, out, err = run(["opt", str(target)], capsys)
        assert code in (0, 1), f"round {round_}: exit {code}\n{err}\n--- input ---\n{mutant}"
        assert "Traceback" not in err and "internal error" not in err, err
        if code == 1:
            assert out == "" and "error:" in err, err


def test_examples_exit_zero(capsys) -> None:
    for example in EXAMPLES:
        code, out, err = run(["opt", str(example)], capsys)
        assert code == 0, err
        assert out.startswith("module @") and err == ""


def test_all_errors_collected(tmp_path, capsys) -> None:
    """Three independent mistakes give three errors, in source order."""
    source = tmp_path / "three.vir"
    source.write_text("module @m\n"
                      "input %in : 16xf16\n"
                      "cmx %a : 16xf16 tile 5 at 0\n"          # tile out of range
                      "const %c : 4xf16 = [1.0, 2.0]\n"        # value count
                      "tasks DMA {\n  dma %in -> %a channel 7\n}\n",  # channel out of range
                      encoding="utf-8")
    code, out, err = run(["opt", str(source)], capsys)
    assert code == 1 and out == ""
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert [line.split(":")[1] for line in lines] == ["3", "4", "6"]


def test_user_error_exit_1(tmp_path, capsys) -> None:
    code, _, err = run(["opt", str(tmp_path / "missing.vir")], capsys)
    assert code == 1 and "no such file" in err


@pytest.mark.parametrize("args", [
    [], ["opt"], ["opt", "x.vir", "--bogus"], ["opt", "x.vir", "-p", "nope"], ["opt", "x.vir", "-p", ","],
    ["compile"], ["compile", "x.vir", "--format", "zip"], ["inspect"], ["run"], ["frobnicate"],
])
def test_usage_error_exit_2(args, capsys) -> None:
    code, out, err = run(args, capsys)
    assert code == 2, err
    assert out == "" and err and "Traceback" not in err


def test_binary_garbage_is_a_user_error(tmp_path, capsys) -> None:
    source = tmp_path / "garbage.vir"
    source.write_bytes(bytes(range(256)) * 4)
    code, _, err = run(["opt", str(source)], capsys)
    assert code == 1 and "Traceback" not in err and "internal error" not in err


def test_unknown_pass_lists_the_registry(capsys) -> None:
    # Not a golden: the list grows with every registered pass.
    from vpuc.passes.registry import PASSES

    code, out, err = run(["opt", "x.vir", "-p", "verify,frobnicate"], capsys)
    assert code == 2 and out == ""
    assert err == ("error: unknown pass 'frobnicate'; expected one of: "
                   + ", ".join(sorted(PASSES)) + "\n")
