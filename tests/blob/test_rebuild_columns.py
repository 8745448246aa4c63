"""Rebuild's column checks (names, labels, barrier indices of a whole list at once) give
the row-by-row check's message for the first bad record."""

import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled, with_task

import vpuc.blob.rebuild_tasks as rebuild_module
from vpuc.blob.flatten import flatten
from vpuc.blob.rebuild import rebuild
from vpuc.diagnostics import VpucError

CONV = REPO / "examples" / "conv_2tiles.vir"


def message(content) -> str:
    with pytest.raises(VpucError) as info:
        rebuild(content, "x.blob", verify=False)
    return info.value.diagnostics[0].message


def test_the_records_rebuild_to_the_program():
    program = compiled(CONV)
    assert rebuild(flatten(program), "x.blob", verify=False).module == program.module


def test_a_name_with_a_newline_is_not_two_names():
    content = flatten(compiled(CONV))
    tensors = list(content.tensors)
    tensors[1] = tensors[1]._replace(name="a\nb")
    assert message(content._replace(tensors=tuple(tensors))) == \
        "x.blob: blob tensor #1: name 'a\\nb' is not an identifier"
    barriers = list(content.barriers)
    barriers[0] = barriers[0]._replace(name="9 lives")
    assert message(content._replace(barriers=tuple(barriers))) == \
        "x.blob: blob barrier #0: name '9 lives' is not an identifier"


def test_the_first_bad_task_of_a_list_is_named():
    content = flatten(compiled(CONV))
    bad = with_task(with_task(content, 0, 1, label="1st"), 0, 0, waits=(10 ** 6,))
    assert message(bad) == ("x.blob: blob DMA task #0: barrier index 1000000 is out of range "
                            f"({len(content.barriers)} barriers)")
    assert message(with_task(content, 0, 1, label="1st")) == \
        "x.blob: blob DMA task #1: name '1st' is not an identifier"
    dpu = next(tl for tl in content.task_lists if tl.executor == 1).tasks[0]
    variants = (dpu.variants[0]._replace(updates=(-1,)),) + dpu.variants[1:]
    assert message(with_task(content, 1, 0, variants=variants)) == \
        f"x.blob: blob DPU task #0: barrier index -1 is out of range ({len(content.barriers)} barriers)"


def test_the_first_bad_act_shave_task_is_named():
    """An ACT SHAVE list is built a column at a time; a bad binding, run() argument or
    invocation image sends it row by row, whose message names the task."""
    content = flatten(compiled(CONV))
    act = next(tl for tl in content.task_lists if tl.executor == 2).tasks
    if not act:
        pytest.skip("no ACT SHAVE task in the example")
    last = len(act) - 1
    binding = act[last].inputs[0]
    bad = with_task(content, 2, last, inputs=(binding._replace(tensor=10 ** 6),)
                    + act[last].inputs[1:])
    assert message(bad) == (f"x.blob: blob ACT_SHAVE task #{last}: tensor index 1000000 is out "
                            f"of range ({len(content.tensors)} tensors)")
    bad = with_task(content, 2, last, run_args=("a b",) + act[last].run_args[1:])
    assert message(bad) == \
        f"x.blob: blob ACT_SHAVE task #{last}: name 'a b' is not an identifier"
    inv = act[last].invocation
    if inv is not None:
        bad = with_task(content, 2, last, invocation=inv._replace(args_size=len(inv.window) + 1))
        assert f"ACT_SHAVE task #{last}: args" in message(bad)
    assert rebuild(content, "x.blob", verify=False).invocations == \
        compiled(CONV).invocations


def test_the_first_bad_dpu_task_is_named():
    """A DPU list is built without per-row checks; a bad code or tensor index sends it row
    by row, whose message names the task."""
    content = flatten(compiled(CONV))
    dpu = next(tl for tl in content.task_lists if tl.executor == 1).tasks
    last = len(dpu) - 1
    assert message(with_task(content, 1, last, op=99)) == \
        f"x.blob: blob DPU task #{last}: unknown DPU op code 99"
    assert message(with_task(content, 1, last, output=10 ** 6)) == \
        f"x.blob: blob DPU task #{last}: tensor index 1000000 is out of range " \
        f"({len(content.tensors)} tensors)"
    variants = (dpu[last].variants[0]._replace(mode=99),) + dpu[last].variants[1:]
    assert message(with_task(content, 1, last, variants=variants)) == \
        f"x.blob: blob DPU task #{last}: unknown execution mode code 99"


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_lists_built_by_columns_equal_those_built_row_by_row(path, monkeypatch):
    content = flatten(compiled(path))
    built = []
    for name in ("dma_list", "dpu_list", "act_list"):     # record what the columns build
        monkeypatch.setattr(rebuild_module, name, lambda *args, _f=getattr(rebuild_module, name):
                            built.append(_f(*args)) or built[-1])
    by_columns = rebuild(content, "x.blob", verify=False)
    assert not by_columns.module.task_lists_built     # deferred: made on first use
    for name in ("dma_ok", "dpu_ok", "act_ok"):       # a doubt on every list: row by row
        monkeypatch.setattr(rebuild_module, name, lambda *args: False)
    row_by_row = rebuild(content, "x.blob", verify=False)
    assert by_columns.module == row_by_row.module
    assert any(built), "no list was built by columns"
    assert by_columns.invocations == row_by_row.invocations
    assert [type(t) for tl in by_columns.module.task_lists for t in tl.tasks] == \
        [type(t) for tl in row_by_row.module.task_lists for t in tl.tasks]


def test_act_ok_doubts_a_kernel_without_an_image_or_args_past_the_window():
    """``act_ok`` on whole columns (each distinct kernel once, args ends against window
    lengths) doubts what the row-by-row check refuses: a kernel whose image the program
    lacks, an args block one byte past its WIN_E image, on any row."""
    from vpuc.blob.rebuild_checks import Checker
    from vpuc.blob.rebuild_lists import act_ok

    content = flatten(compiled(CONV))
    at = next(i for i, tl in enumerate(content.task_lists) if tl.executor == 2)
    act = content.task_lists[at].tasks
    if not act or act[-1].invocation is None:
        pytest.skip("no invoked ACT SHAVE task in the example")
    program = rebuild(content, "x.blob", verify=False)
    names = [k.name for k in content.kernels]

    def ok(recs, kernels=None) -> bool:
        if kernels is not None:
            program.kernels, saved = kernels, program.kernels
        try:
            return act_ok(Checker("x.blob"), recs, len(content.tensors), names, program)
        finally:
            if kernels is not None:
                program.kernels = saved
    assert ok(act)
    assert not ok(act, kernels={})
    for row in (0, len(act) - 1):
        inv = act[row].invocation
        bad = with_task(content, 2, row, invocation=inv._replace(
            args_size=len(inv.window) - inv.args_offset + 1)).task_lists[at].tasks
        assert not ok(bad)
        fits = with_task(content, 2, row, invocation=inv._replace(
            args_size=len(inv.window) - inv.args_offset)).task_lists[at].tasks
        assert ok(fits)
