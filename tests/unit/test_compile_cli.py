"""vpuc compile at the command line: atomic output, determinism, formats."""

import shutil
from pathlib import Path

import pytest

from vpuc.cli import main
from vpuc.fileio import write_atomically

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name in ("clamp_asm.vir", "many_barriers.vir", "clamp_test.s"):
        shutil.copy(DATA / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_failed_compile_leaves_nothing_behind(workdir, capsys):
    assert main(["compile", "many_barriers.vir", "-o", "out.blob"]) == 1
    assert "too many live barriers" in capsys.readouterr().err
    assert sorted(p.name for p in workdir.iterdir()) == ["clamp_asm.vir", "clamp_test.s",
                                                         "many_barriers.vir"]


def test_failed_compile_keeps_an_existing_output(workdir, capsys):
    (workdir / "out.blob").write_bytes(b"previous")
    assert main(["compile", "many_barriers.vir", "-o", "out.blob"]) == 1
    assert (workdir / "out.blob").read_bytes() == b"previous"


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_compiling_twice_gives_identical_bytes(workdir, capsys, fmt):
    assert main(["compile", "clamp_asm.vir", "-o", "a.bin", "--format", fmt]) == 0
    assert main(["compile", "clamp_asm.vir", "-o", "b.bin", "--format", fmt]) == 0
    assert (workdir / "a.bin").read_bytes() == (workdir / "b.bin").read_bytes()
    err = capsys.readouterr().err
    assert f"wrote a.bin: " in err and f"({fmt})" in err


def test_default_output_name_and_time_passes(workdir, capsys):
    assert main(["compile", "clamp_asm.vir", "--time-passes"]) == 0
    assert (workdir / "clamp_asm.blob").exists()
    err = capsys.readouterr().err
    for name in ("assign-physical-barriers", "pack-kernel-args", "serialize (fb)", "total"):
        assert name in err


def test_writing_to_a_pipe_does_not_replace_it(tmp_path):
    import os
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomically(str(fifo), b"data")
        assert os.read(reader, 16) == b"data"
        assert not fifo.is_file() and fifo.exists()
    finally:
        os.close(reader)


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_graph_example_compiles_reads_back_and_runs(tmp_path, monkeypatch, capsys, fmt):
    # Generated kernels name their block tensors like %x.t0s0; the blob reader must
    # accept every name VIR accepts.
    from runtime_sim.simulator import simulate
    from vpuc.blob import read_blob

    monkeypatch.chdir(REPO)
    out = tmp_path / f"fused.{fmt}"
    assert main(["compile", "examples/fused_chain.vir", "-o", str(out), "--format", fmt]) == 0
    program = read_blob(out.read_bytes(), str(out))
    assert any("." in b.name for b in program.module.buffers)
    assert simulate(program, timing_only=True).cycles > 0
