"""Fuzzing in the suite: a fixed-seed campaign of mutated examples through the CLI entry.

Mutants of every example (.vir token edits), of the assembly kernels, and
corrupted or truncated blobs of every example in both formats run in process
through ``vpuc.cli.main``; none may end in an internal error (exit 3, a
traceback, an exception escaping ``main``), run past its CPU budget (SIGPROF)
or fail to allocate under an address-space limit of 1 GiB beyond what the
process maps.  ``bench/fuzz.py`` runs the long campaigns; a failure here names
the case, which ``python bench/fuzz.py --replay KIND:INDEX --seed SEED`` remakes.
"""

from __future__ import annotations

import pytest

from tests.fuzz.harness import (FINDINGS, Workspace, address_space_limit, case_budget,
                                case_rng, max_rss_bytes, run_case)
from tests.fuzz.mutate import REPO, Mutant

SEED = 20261126
COUNTS = {"vir": 1200, "asm": 40, "blob": 1000}
BUDGET = 10.0                    # CPU seconds per case
MEMORY = 1 << 30                 # bytes of address space beyond the process's own


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("kind", list(COUNTS))
def test_mutants_end_in_clean_outcomes(workspace, kind):
    findings, outcomes = [], {}
    rss_before = max_rss_bytes()
    with address_space_limit(MEMORY):
        for index in range(COUNTS[kind]):
            mutant = workspace.mutant(kind, case_rng(SEED, kind, index))
            result = run_case(workspace, mutant, case_budget(mutant, BUDGET))
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
            if result.outcome in FINDINGS:
                findings.append(f"{kind}:{index} ({result.outcome}, {'; '.join(mutant.edits)}): "
                                f"{result.stderr.strip()[-400:]}")
    assert not findings, (f"{len(findings)} findings (replay with bench/fuzz.py --replay "
                          f"KIND:INDEX --seed {SEED}):\n" + "\n".join(findings))
    # The mutants reach past the parser: some compile (or read back) cleanly.
    assert outcomes.get("ok", 0) > 0 and outcomes.get("error", 0) > 0, outcomes
    assert max_rss_bytes() - rss_before < MEMORY


def test_the_budget_grows_with_the_largest_tensor():
    text = (REPO / "examples" / "graph_conv.vir").read_text()
    big = text.replace("Parameter() : 1x3x32x32xf16", "Parameter() : 1x3x1048576x32xf16")
    assert big != text
    # The output, 1x16x1048576x32 f16, is 1 GiB: 128 s more.
    assert case_budget(Mutant("vir", "graph_conv.vir", (), big.encode()), BUDGET) == BUDGET + 128
    assert case_budget(Mutant("vir", "graph_conv.vir", (), text.encode()), BUDGET) == BUDGET
    # A text that does not parse, and other kinds of case, keep the base budget.
    assert case_budget(Mutant("vir", "x.vir", (), b"module @"), BUDGET) == BUDGET
    assert case_budget(Mutant("blob", "x.blob", (), big.encode()), BUDGET) == BUDGET


def _bench_fuzz():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_fuzz", REPO / "bench" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_takes_reproducer_files_and_directories(workspace, tmp_path, capsys):
    bench = _bench_fuzz()
    out = tmp_path / "fuzz-out"
    out.mkdir()
    clamp = (REPO / "examples" / "clamp.vir").read_text()
    # What the verifier now reports at the runtime's line (was: an unlocated "does not fit").
    (out / "unlocated-vir-1.vir").write_text(clamp.replace("stacks(16384, 16384)",
                                                           "stacks(16384, 4294967296)"))
    (out / "unlocated-vir-1.txt").write_text("case vir:1 (seed 1)\n")
    (out / "ok-blob-2.elf").write_bytes(workspace.blobs[1][1])
    mutants = bench.replay_mutants([str(out), "vir:3"], 1, workspace)
    assert [(m.kind, m.seed_name) for m in mutants[:2]] == [("blob", "ok-blob-2.elf"),
                                                            ("vir", "unlocated-vir-1.vir")]
    assert mutants[2].kind == "vir" and len(mutants) == 3
    assert bench.replay([str(out / "unlocated-vir-1.vir")], 1, BUDGET) == 0
    text = capsys.readouterr().out
    assert "-> error (exit 1" in text and "error: the stack of tile 1 has 4,294,967,296 bytes" in text
