"""assign-physical-barriers: reuse, the too-many-barriers error, and the replay."""

from pathlib import Path

import pytest

from vpuc.analysis.barrier_sim import replay
from vpuc.analysis.schedule import Schedule
from vpuc.arch import load_arch
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.verifier import verify_module
from vpuc.vir.parser import parse_file, parse_text

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]


TWO = str(DATA / "two_barriers.toml")


def assign(module, arch=None):
    arch = load_arch(arch or module.arch)
    PassManager(parse_pipeline("verify,assign-physical-barriers")).run(module, PassContext(arch))
    return module


def test_golden_chain_on_two_physical_barriers(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["opt", "tests/unit/data/reuse_barriers.vir", "--arch", TWO, "-p",
                 "verify,assign-physical-barriers,verify"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("barrier")]
    assert lines == ["barrier %s0 = physical 0", "barrier %s1 = physical 1",
                     "barrier %s2 = physical 0", "barrier %s3 = physical 1",
                     "barrier %s4 = physical 0"]


def test_ids_are_reused_and_the_result_verifies():
    module = assign(parse_file(DATA / "reuse_barriers.vir"), TWO)
    ids = [b.physical for b in module.barriers]
    assert all(i is not None and 0 <= i < 64 for i in ids)
    assert len(set(ids)) < len(ids), "a chain must reuse physical ids"
    assert not verify_module(module).has_errors


def test_big_program_fits_64_ids():
    import sys
    sys.path.insert(0, str(REPO / "bench"))
    from gen_program import generate
    module = assign(parse_text(generate(2000), "gen.vir"))
    assert len(module.barriers) == 2000
    assert {b.physical for b in module.barriers} <= set(range(64))
    assert not verify_module(module).has_errors


def test_too_many_live_barriers(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["opt", "tests/unit/data/many_barriers.vir", "-p",
                 "verify,assign-physical-barriers"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tests/unit/data/many_barriers.vir:72:1: error: too many live barriers: "
                          "%b64 (first used by dma#64) needs a physical barrier while all 64 "
                          "available ones are in use (NPU37XX has 64); live: %b0, %b1, %b10,")
    assert err.splitlines()[0].endswith("expected at most 64 barriers live at once: add ordering "
                                        "between tasks or split the schedule")


def test_replay_reports_a_wrong_reuse_order():
    module = parse_file(DATA / "reuse_barriers.vir")
    for barrier, pid in zip(module.barriers, (0, 1, 0, 1, 0)):
        barrier.physical = pid
    schedule = Schedule(module, load_arch())
    assert replay(module, schedule) == []
    # Listing %s2 before %s0 on id 0 makes d0 wait for an id that serves %s2 first.
    module.barriers[0], module.barriers[2] = module.barriers[2], module.barriers[0]
    blocked = replay(module, schedule)
    assert blocked == ["d0 (DMA channel 0): updates %s0, but physical barrier 0 still serves %s2"]
