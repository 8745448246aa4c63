"""The barrier indices flattened once (vpuc/blob/sync_columns.py) give what the row-wise
checks give: each barrier's producer and consumer units, whether any row waits on and
updates one barrier, whether every index is in range."""

import pickle
import sys

import numpy as np
import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled, with_task

from vpuc.blob.flatten import flatten
from vpuc.blob.rebuild import rebuild
from vpuc.blob.record_table import RecordTable
from vpuc.blob.sync_columns import (list_sync, rows_disjoint, sync_columns,
                                     unit_counts)
from vpuc.blob.verify_columns import _sync_disjoint, barrier_counts
from vpuc.diagnostics import VpucError

sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402

DPU = 1


def agree(content) -> None:
    sync = sync_columns(content)
    assert sync is not None
    assert unit_counts(sync, len(content.barriers)) == barrier_counts(content)
    assert rows_disjoint(sync) == _sync_disjoint(content)


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_every_example_agrees_with_the_row_wise_checks(path):
    agree(flatten(compiled(path)))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "gen.vir"
    path.write_text(generate(48))
    return flatten(compiled(path))


def test_a_generated_program_agrees(generated):
    agree(generated)


def dpu_task(content):
    tl = next(tl for tl in content.task_lists if tl.executor == DPU)
    return tl.tasks[0]


def test_a_dpu_tasks_own_barriers_count_once_per_variant(generated):
    """Task-level barriers of a DPU task of several variants: one unit per variant, a barrier
    the variant lists again counted once for it."""
    task = dpu_task(generated)
    b = task.updates[0] if task.updates else task.waits[0]
    variants = (task.variants[0]._replace(updates=(b,)),) * 3
    changed = with_task(generated, DPU, 0, variants=variants, updates=(b,), waits=())
    agree(changed)
    producers, _ = unit_counts(sync_columns(changed), len(changed.barriers))
    assert producers[b] == barrier_counts(generated)[0][b] - len(task.variants) * \
        (b in task.updates) + 3


@pytest.mark.parametrize("level", ["task", "variant"])
def test_a_row_that_waits_on_what_it_updates_is_found(generated, level):
    task = dpu_task(generated)
    b = 0
    if level == "task":
        changed = with_task(generated, DPU, 0, waits=(b,), updates=(b,))
    else:
        variants = (task.variants[0]._replace(waits=(b,), updates=(b,)),) + task.variants[1:]
        changed = with_task(generated, DPU, 0, variants=variants)
    assert not rows_disjoint(sync_columns(changed))
    assert not _sync_disjoint(changed)
    # Across rows it is no conflict: one task waits on what another updates.
    assert rows_disjoint(sync_columns(generated))


def test_indices_out_of_range_are_found_and_named_by_the_row_check(generated):
    task = dpu_task(generated)
    n = len(generated.barriers)
    for bad in (n, -1):
        variants = task.variants[:-1] + (task.variants[-1]._replace(waits=(bad,)),)
        changed = with_task(generated, DPU, 0, variants=variants)
        tl = next(tl for tl in changed.task_lists if tl.executor == DPU)
        assert not list_sync(tl.tasks).in_range(n)
        with pytest.raises(VpucError) as info:
            rebuild(changed, "x.blob", verify=False)
        assert info.value.diagnostics[0].message == \
            f"x.blob: blob DPU task #0: barrier index {bad} is out of range ({n} barriers)"
    assert all(s.in_range(n) for s in sync_columns(generated))


def test_a_list_of_other_records_is_left_to_the_row_checks(generated):
    tl = generated.task_lists[0]
    assert list_sync(tl.tasks + (generated.barriers[0],)) is None
    mixed = tl.tasks[:1] + (dpu_task(generated),)
    assert list_sync(mixed) is None
    assert list_sync(()).in_range(0)


def same_sync(a, b) -> bool:
    """Two ListSyncs with equal counts and equal index columns."""
    def sides(s):
        return [s.waits.rows, s.waits.barriers, s.updates.rows, s.updates.barriers] + (
            [] if s.variant_task is None else
            [s.variant_waits.rows, s.variant_waits.barriers, s.variant_updates.rows,
             s.variant_updates.barriers, s.variant_task, s.variant_count])
    return a.tasks == b.tasks and (a.variant_task is None) == (b.variant_task is None) and \
        all(x.dtype == np.int64 and y.dtype == np.int64 and np.array_equal(x, y)
            for x, y in zip(sides(a), sides(b), strict=True))


def elf_content(program):
    from vpuc.blob import decode_blob, write_blob
    return decode_blob(write_blob(program, "elf"), "x.elf", sizes=False).content


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_elf_columns_sync_is_the_records_flattened(path):
    """The ELF reader hands each task list's barrier indices straight from its numpy columns
    (a RecordTable's sync): equal to flattening its records, which pickle as an equal plain
    tuple."""
    content = elf_content(compiled(path))
    for tl in content.task_lists:
        if tl.tasks == ():      # an empty list is a plain tuple
            continue
        assert isinstance(tl.tasks, RecordTable)
        assert same_sync(tl.tasks.sync, list_sync(tuple(tl.tasks)))
        assert tl.tasks == tuple(tl.tasks)
        copy = pickle.loads(pickle.dumps(tl.tasks))
        assert type(copy) is tuple and copy == tl.tasks
    agree(content)


def test_a_generated_programs_elf_sync_is_its_records_flattened(tmp_path):
    path = tmp_path / "gen.vir"
    path.write_text(generate(48))
    content = elf_content(compiled(path))
    assert [same_sync(tl.tasks.sync, list_sync(tuple(tl.tasks)))
            for tl in content.task_lists] == [True] * 3


def fb_content(program):
    from vpuc.blob import decode_blob, write_blob
    return decode_blob(write_blob(program, "fb"), "x.blob", sizes=False).content


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_flatbuffer_columns_sync_is_the_records_flattened(path):
    """The FlatBuffer reader hands the barrier indices its column decoder read as numbers
    (fb_columns.Vectors): equal to flattening its records."""
    content = fb_content(compiled(path))
    for tl in content.task_lists:
        # (a row without a BarrierReference table at all is flattened from its records)
        synced = getattr(tl.tasks, "sync", None) is not None
        assert synced or not tl.tasks or \
            any(not rec.waits and not rec.updates for rec in tl.tasks)
        if synced:
            assert same_sync(tl.tasks.sync, list_sync(tuple(tl.tasks)))
    agree(content)


def test_a_generated_programs_flatbuffer_sync_is_its_records_flattened(tmp_path):
    path = tmp_path / "gen.vir"
    path.write_text(generate(48))
    content = fb_content(compiled(path))
    assert [same_sync(tl.tasks.sync, list_sync(tuple(tl.tasks)))
            for tl in content.task_lists] == [True] * 3


def test_a_barrier_listed_twice_counts_once(generated):
    """A DMA task updating one barrier twice is one producer unit (only the units listing
    more than one barrier are sorted for repeats)."""
    tl = next(tl for tl in generated.task_lists if tl.executor == 0)
    b = tl.tasks[3].updates[0]
    changed = with_task(generated, 0, 3, updates=(b, b))
    agree(changed)
    assert unit_counts(sync_columns(changed), len(changed.barriers)) == \
        unit_counts(sync_columns(generated), len(generated.barriers))


def _barrier(content, index: int, **fields):
    barriers = list(content.barriers)
    barriers[index] = barriers[index]._replace(**fields)
    return content._replace(barriers=tuple(barriers))


# Each breaks one barrier record, among many good ones: the checks read the readers'
# barrier columns (sync_columns.barrier_table) now.
BARRIER_EDITS = {
    "producer count off": lambda c: _barrier(
        c, 7, producer_count=c.barriers[7].producer_count + 1),
    "consumer count off": lambda c: _barrier(
        c, len(c.barriers) - 1, consumer_count=c.barriers[-1].consumer_count + 1),
    "ids out of order": lambda c: _barrier(_barrier(c, 3, id=4), 4, id=3),
    "physical id below -1": lambda c: _barrier(c, 5, physical_id=-2),
    "physical id out of range": lambda c: _barrier(c, len(c.barriers) - 1,
                                                   physical_id=10 ** 4),
    "a malformed name": lambda c: _barrier(c, 6, name="9 lives"),
    "a name taken by a tensor": lambda c: _barrier(c, 6, name=c.tensors[-1].name),
    "two barriers of one name": lambda c: _barrier(c, 6, name=c.barriers[2].name),
}


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("edit", BARRIER_EDITS)
def test_a_bad_barrier_in_a_blob_is_refused(generated, edit, fmt, monkeypatch):
    """Read from a blob (barrier columns), refused with the message the records get with
    the module verifier over the whole program."""
    import vpuc.blob.rebuild as rebuild_module
    from vpuc.blob import read_blob
    from vpuc.blob.writer_elf import write_elf
    from vpuc.blob.writer_fb import write_fb

    content = BARRIER_EDITS[edit](generated)
    with monkeypatch.context() as patched:
        patched.setattr(rebuild_module, "verify_by_columns", lambda *args, **kw: False)
        with pytest.raises(VpucError) as eager:
            rebuild(content, "x.blob")
    with pytest.raises(VpucError) as read:
        read_blob((write_fb if fmt == "fb" else write_elf)(content), "x.blob")
    assert read.value.diagnostics[0].message == eager.value.diagnostics[0].message


@pytest.mark.parametrize("waits", [1, 2])
def test_a_dma_that_waits_on_what_it_updates_is_found(generated, waits):
    """One wait and one update on a row (compared as columns) or more (as pairs)."""
    tl = next(tl for tl in generated.task_lists if tl.executor == 0)
    task = tl.tasks[5]
    b = task.updates[0]
    changed = with_task(generated, 0, 5, waits=(b,) if waits == 1 else (b + 1, b))
    agree(changed)
    assert not rows_disjoint(sync_columns(changed))
    assert rows_disjoint(sync_columns(generated))
