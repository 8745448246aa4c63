"""The FlatBuffer reader's records built a column at a time (vpuc/blob/reader_fb.py): the
invocation images checked on columns are the row-wise ones, and a reference the columns
doubt goes row by row, whose message names the task."""

import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled

from vpuc.blob import write_blob
from vpuc.blob.content import SliceRec
from vpuc.blob.reader_fb import FbReader
from vpuc.blob.fb_task_records import columns_of as _columns
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import SwKernelTask

CLAMP = REPO / "examples" / "clamp.vir"


def act_invocations(reader: FbReader):
    root = reader.decoder.root()
    data = [d.data or b"" for d in root.kernel_data or ()]
    kernels = tuple(reader.kernel(k, data) for k in root.act_kernels or ())
    tasks = next((tl.act_kernel_tasks for tl in root.task_lists if tl.act_kernel_tasks), ())
    return tasks, data, kernels


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_column_images_are_the_row_wise_images(path):
    program = compiled(path)
    reader = FbReader(write_blob(program, "fb"), "x.blob", columns=True)
    tasks, data, kernels = act_invocations(reader)
    if not tasks:           # a DPU-only example (dwconv_pool): none in the program either
        assert not any(isinstance(t, SwKernelTask) for tl in program.module.task_lists
                       for t in tl.tasks)
        return
    assert all(t.invocation.window is not None for t in tasks)     # compiled: every one packed
    ic = _columns([t.invocation for t in tasks])
    assert reader.images(ic, data, kernels) == \
        [reader.image(t.label, t.invocation, data, kernels) for t in tasks]


@pytest.mark.parametrize("field, value, message", [
    ("args", lambda r: r._replace(offset=r.offset + 1 << 20),
     "args reference lies outside the WIN_E image"),
    ("data_section", lambda r: r._replace(size=r.size + 1),
     "data section reference is not the kernel's .data at the start of the WIN_E image"),
    ("window", lambda r: r._replace(data_index=r.data_index + 1000),
     "args reference lies outside the WIN_E image"),
])
def test_a_bad_reference_is_doubted_and_the_row_check_names_it(field, value, message):
    reader = FbReader(write_blob(compiled(CLAMP), "fb"), "x.blob", columns=True)
    tasks, data, kernels = act_invocations(reader)
    last = tasks[-1]
    bad = last.invocation._replace(**{field: value(getattr(last.invocation, field))})
    invocations = [t.invocation for t in tasks[:-1]] + [bad]
    assert reader.images(_columns(invocations), data, kernels) is None
    with pytest.raises(VpucError) as info:
        reader.image(last.label, bad, data, kernels)
    assert info.value.diagnostics[0].message == message


def test_a_window_past_its_kernel_data_is_doubted():
    reader = FbReader(write_blob(compiled(CLAMP), "fb"), "x.blob", columns=True)
    tasks, data, kernels = act_invocations(reader)
    inv = tasks[0].invocation
    size = len(data[inv.window.data_index]) - inv.window.offset + 1
    bad = inv._replace(window=inv.window._replace(size=size))
    assert reader.images(_columns([bad]), data, kernels) is None
    with pytest.raises(VpucError, match="runs past its"):
        reader.image(tasks[0].label, bad, data, kernels)


def _types(content) -> set:
    """The record types of every view's slices and every DPU variant's corners."""
    found = {type(s) for t in content.tensors for s in t.slices}
    found |= {type(c) for tl in content.task_lists for rec in tl.tasks
              for v in getattr(rec, "variants", ()) for c in (v.start, v.end)}
    return found


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_column_records_are_the_row_wise_records(path):
    """The column decoder makes slices and corners as the records' types itself
    (ColumnDecoder.struct_types); the generic decoder's are converted: equal contents, with
    equal types (SliceRec, plain tuples)."""
    data = write_blob(compiled(path), "fb")
    columns, _ = FbReader(data, "x.blob", columns=True).content()
    rows, _ = FbReader(data, "x.blob", columns=False).content()
    assert columns == rows
    assert _types(columns) == _types(rows) <= {SliceRec, tuple}


def test_a_generated_programs_column_records_are_the_row_wise_records(tmp_path):
    import sys
    sys.path.insert(0, str(REPO / "bench"))
    from gen_program import generate
    path = tmp_path / "gen.vir"
    path.write_text(generate(16))
    data = write_blob(compiled(path), "fb")
    columns, _ = FbReader(data, "x.blob", columns=True).content()
    rows, _ = FbReader(data, "x.blob", columns=False).content()
    assert columns == rows and _types(columns) == _types(rows) == {SliceRec, tuple}
