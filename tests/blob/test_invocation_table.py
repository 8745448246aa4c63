"""A program read from a blob keeps its invocation images as columns (vpuc.program
.InvocationTable): equal to the compiled program's list, an InvocationImage made only when
one is asked for, so reading and a timing-only simulation make none; changed like a list."""

import sys

import pytest
from blob_testlib import REPO, compiled

import vpuc.program as program_module
from vpuc.blob import read_blob, write_blob
from vpuc.program import InvocationImage, InvocationTable
from runtime_sim.simulator import simulate

sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402


@pytest.fixture(scope="module")
def bench_program(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "bench.vir"
    path.write_text(generate(48))
    return compiled(path)


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_read_and_timing_only_simulation_make_no_image(bench_program, fmt, monkeypatch):
    data = write_blob(bench_program, fmt)
    made = []
    original = InvocationImage.__init__

    def counted(self, *args, **kwargs):
        made.append(args)
        original(self, *args, **kwargs)
    monkeypatch.setattr(program_module.InvocationImage, "__init__", counted)
    back = read_blob(data, "x.blob")
    assert isinstance(back.invocations, InvocationTable)
    cycles = simulate(back, timing_only=True, races=False).cycles
    assert made == []
    monkeypatch.undo()
    assert cycles == simulate(bench_program, timing_only=True, races=False).cycles
    # asked for, the images are the compiled program's
    assert back.invocations == bench_program.invocations
    assert bench_program.invocations == back.invocations
    assert list(back.invocations) == bench_program.invocations
    assert back.invocations[-1] == bench_program.invocations[-1]
    assert back.invocations[1:3] == bench_program.invocations[1:3]
    assert len(back.invocations) == len(bench_program.invocations) == 12


def test_the_table_changes_like_a_list(bench_program):
    back = read_blob(write_blob(bench_program, "fb"), "x.blob")
    table, images = back.invocations, list(bench_program.invocations)
    first = images[0]
    table[0] = images[1]
    images[0] = images[1]
    assert table == images and table != bench_program.invocations
    table.append(first)
    del table[0]
    assert table == images[1:] + [first]
    assert table.by_task(3)[0] is first      # by task index: the images once changed
    table.clear()
    assert len(table) == 0 and table == []


def test_rows_equal_their_images(bench_program):
    back = read_blob(write_blob(bench_program, "elf"), "x.blob")
    rows = back.invocations.by_task(len(bench_program.invocations) + 2)
    assert rows[-2:] == [None, None]
    assert rows[:-2] == bench_program.invocations
    assert all(type(r) is program_module.InvocationRow for r in rows[:-2])
    assert rows[0] != bench_program.invocations[1]
