"""A plan built from a read program's task columns (``runtime_sim.plan_columns``) is the plan
built from its IR tasks (``plan_build``), unit for unit, on every fixture and example, both
blob formats, the views' transfer classes found on the view columns (``plan_shapes``) or
on the IR views; and reading and a timing-only simulation never build the task lists nor
the views."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runtime_sim.plan import build_plan
from runtime_sim.plan_shapes import OperandShapes
from runtime_sim.simarch import sim_arch_for
from runtime_sim.simulator import simulate
from tests.sim.test_sim_plan import FIXTURES, _program
from tests.blob.blob_testlib import compiled as _compiled
from vpuc.blob import read_blob, write_blob
from vpuc.diagnostics import VpucError

FIELDS = ("queue_of", "queue_keys", "queue_kind", "queue_units", "queue_engines", "waits",
          "updates", "work", "barrier_names", "barrier_phys", "phys_labels", "phys_lists",
          "producer_count", "consumer_count")


def _read(program, fmt):
    # every fixture serializes and reads back: a failure here is a bug (a skip once hid
    # the reader failing on a blob without tensors)
    return read_blob(write_blob(program, fmt), "x.blob", verify=False)


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("name", FIXTURES)
def test_the_plan_from_columns_is_the_plan_from_tasks(name, fmt, tmp_path):
    program = _program(name, tmp_path)
    back = _read(program, fmt)
    assert back.tables is not None and not back.module.task_lists_built
    arch = sim_arch_for(back.arch)
    try:
        from_columns = build_plan(back, arch)
    except VpucError as exc:        # then the object path fails alike
        back.module.task_lists
        with pytest.raises(VpucError) as info:
            build_plan(back, arch)
        assert info.value.diagnostics[0].message == exc.diagnostics[0].message
        return
    assert not back.module.task_lists_built and not back.module.views_built
    assert not back.module.barriers_built
    back.module.task_lists          # built: the plan now comes from the tasks and views
    from_tasks = build_plan(back, arch)
    assert back.module.views_built
    for name_ in FIELDS:
        assert getattr(from_columns, name_) == getattr(from_tasks, name_), name_
    assert from_columns.names == from_tasks.names


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("name", [*FIXTURES, "bench"])
def test_view_classes_from_columns_are_the_classes_from_views(name, fmt, tmp_path):
    """Every tensor's transfer class (its bytes, element bytes, DDR, run) from the view
    columns is the one the IR views give, name by name."""
    if name == "bench":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
        from gen_program import generate
        path = tmp_path / "bench.vir"
        path.write_text(generate(200))
        program = _compiled(path)
    else:
        program = _program(name, tmp_path)
    back = _read(program, fmt)
    table = back.tables.views if back.tables is not None else None
    if table is None:
        pytest.skip("read without view columns")
    by_columns = OperandShapes(back.module, table, back)
    assert by_columns.class_column is not None and not back.module.views_built
    column = by_columns.class_column
    by_views = OperandShapes(back.module)
    assert back.module.views_built and not table.current(back.module)
    for i, name_ in enumerate(table.names):
        got = int(column[i]) if column[i] >= 0 else by_columns.shape_class(name_)
        assert by_columns.class_info[got][3:] == \
            by_views.class_info[by_views.shape_class(name_)][3:], name_
    assert (column >= 0).sum() >= len(back.module.buffers)


def test_changed_views_are_simulated_as_changed(tmp_path):
    """Once the views are built (and so may have changed), the plan's classes read them."""
    program = _program("examples/double_buffer", tmp_path)
    back = read_blob(write_blob(program, "elf"), "x.blob")
    views = back.module.views
    assert views and not back.tables.views.current(back.module)
    shapes = OperandShapes(back.module, back.tables.views, back)
    assert shapes.class_column is None          # the object path: IR views


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("name", ["examples/conv_2tiles", "examples/double_buffer",
                                  "examples/dwconv_pool", "examples/matmul_softmax"])
def test_a_timing_only_run_of_a_read_program_makes_no_task_list(name, fmt, tmp_path):
    program = _program(name, tmp_path)
    expected = simulate(program, timing_only=True, races=False).cycles
    back = read_blob(write_blob(program, fmt), "x.blob")
    assert not back.module.task_lists_built          # reading verified without them
    assert simulate(back, timing_only=True, races=False).cycles == expected
    assert not back.module.task_lists_built and not back.module.views_built
    assert not back.module.barriers_built
    assert back.module == program.module             # built on request, equal
    assert simulate(back, timing_only=True, races=False).cycles == expected


def test_changed_task_lists_are_simulated_as_changed(tmp_path):
    """Once the task lists are built (and so may have changed), the plan reads them."""
    program = _program("examples/conv_2tiles", tmp_path)
    back = read_blob(write_blob(program, "elf"), "x.blob")
    dma = next(tl for tl in back.module.task_lists if tl.tasks and hasattr(tl.tasks[0], "src"))
    dma.tasks[0].channel = 1 - dma.tasks[0].channel
    plan = build_plan(back, sim_arch_for(back.arch))
    assert plan.queue_keys[plan.queue_of[0]] == ("DMA", dma.tasks[0].channel)


def test_changed_barriers_are_simulated_as_changed(tmp_path):
    """Once the barriers are built, the plan reads them: the list made from the columns
    keeps the columns current; another list does not."""
    program = _program("examples/conv_2tiles", tmp_path)
    back = read_blob(write_blob(program, "fb"), "x.blob")
    arch = sim_arch_for(back.arch)
    from_columns = build_plan(back, arch)
    assert back.module.barriers == program.module.barriers and back.tables.current(back.module)
    assert build_plan(back, arch).phys_labels == from_columns.phys_labels
    first = back.module.barriers[0]
    back.module.barriers = [type(first)(first.name, None), *back.module.barriers[1:]]
    assert not back.tables.current(back.module)
    plan = build_plan(back, arch)
    assert plan.phys_labels[plan.barrier_phys[0]] == f"%{first.name}"
    assert from_columns.phys_labels[from_columns.barrier_phys[0]] != f"%{first.name}"


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_virtual_barriers_from_columns_plan_as_from_objects(fmt, tmp_path):
    """A barrier without a physical id (-1 in the blob) is its own physical barrier in the
    plan built from the columns, as in the one built from Barrier objects."""
    program = _program("examples/conv_2tiles", tmp_path)
    for b in program.module.barriers[::2]:
        b.physical = None
    back = _read(program, fmt)
    arch = sim_arch_for(back.arch)
    assert -1 in back.tables.barrier_physical
    from_columns = build_plan(back, arch)
    assert not back.module.barriers_built
    back.module.barriers            # built: the plan now comes from the objects
    back.tables.barriers = None     # (and not from the columns)
    assert not back.tables.current(back.module)
    from_objects = build_plan(back, arch)
    for name_ in ("barrier_names", "barrier_phys", "phys_labels", "phys_lists"):
        assert getattr(from_columns, name_) == getattr(from_objects, name_), name_
    assert any(label.startswith("%") for label in from_columns.phys_labels)
