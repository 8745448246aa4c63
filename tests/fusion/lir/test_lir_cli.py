"""``vpuc fuse --lir`` options beyond what the goldens show: timings and usage errors."""

from pathlib import Path

import pytest

from vpuc.cli import main

ROOT = Path(__file__).parents[3]
CHAIN = "tests/golden/lir/pipeline_chain.vir"


def run(args, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    return code, *capsys.readouterr()


def test_timings_list_every_pass(capsys, monkeypatch):
    code, out, err = run(["fuse", CHAIN, "--lir-timings"], capsys, monkeypatch)
    assert code == 0 and err == ""
    assert "// timings of @chain.sg0:" in out
    for name in ("build", "mark-loops", "insert-specific-iterations", "assign-registers"):
        assert f"//   {name} " in out


def test_unknown_pass_is_a_usage_error(capsys, monkeypatch):
    code, out, err = run(["fuse", CHAIN, "--lir-passes", "mark-loops,nope"], capsys, monkeypatch)
    assert code == 2 and out == "" and "unknown LIR pass 'nope'" in err


def test_print_around_needs_a_pass_that_runs(capsys, monkeypatch):
    code, out, err = run(["fuse", CHAIN, "--lir-passes", "mark-loops",
                          "--print-around", "fuse-loops"], capsys, monkeypatch)
    assert code == 2 and "fuse-loops" in err


@pytest.mark.parametrize("kind", ["control", "data"])
def test_json_is_printed_per_subgraph(kind, capsys, monkeypatch):
    import json
    code, out, _ = run(["fuse", CHAIN, "--lir-json", kind], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["name"] == "chain.sg0"
