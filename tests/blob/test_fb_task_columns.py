"""A FlatBuffer task list's extra columns (vpuc/blob/fb_task_columns.py): the classes its
keys make are the records' classes, its columns equal what the records hold, and a blob
with one bad task among many repeats is still refused with the module verifier's message
when read (the class check now runs on the keys)."""

import sys

import numpy as np
import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled, with_task
from test_verify_columns import EDITS, _last, read_message, recounted, tensor

from vpuc.blob import read_blob
from vpuc.blob.content import BindingRec
from vpuc.blob.flatten import flatten
from vpuc.blob.reader import decode_blob
from vpuc.blob.rebuild import rebuild
from vpuc.blob.record_table import RecordTable
from vpuc.blob.verify_columns import _representatives
from vpuc.blob.view_columns import tensor_columns
from vpuc.blob.writer_elf import write_elf
from vpuc.blob.writer_fb import write_fb
from vpuc.diagnostics import VpucError

sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402

BLOCKS = 12


@pytest.fixture(scope="module")
def bench_content(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "bench.vir"
    path.write_text(generate(4 * BLOCKS))
    return flatten(compiled(path))


def _read_back(content):
    """The FlatBuffer blob of ``content`` decoded by the column decoder."""
    return decode_blob(write_fb(content), "x.blob", sizes=False).content


def _check_columns(content) -> int:
    """Every list's extra columns against its records; the number of keyed lists."""
    program = rebuild(content, "x.blob", verify=False)
    tensors = tensor_columns(program.module, content.tensors)
    keyed = 0
    for tl in content.task_lists:
        recs = tl.tasks
        if not isinstance(recs, RecordTable):
            continue
        rows = tuple(recs)
        # a row taken on its own (the lazy columns' row builders) is the row of the whole
        assert [recs[i] for i in range(len(recs))] == list(rows)
        assert tuple(recs[1:3]) == rows[1:3]
        if recs.has("class_key"):
            keyed += 1
            assert tensors is not None
            assert _representatives(recs, tensors, None) == \
                _representatives(rows, tensors, None)
        fields = recs.sync.fields if recs.sync is not None else None
        if fields and "tile" in fields:
            assert fields["tile"].tolist() == [r.tile for r in rows]
        if recs.has("variants.mode"):
            variants = [v for r in rows for v in r.variants]
            assert recs.column("variants.label") == [v.label for v in variants]
            assert recs.array("variants.mode").tolist() == [v.mode for v in variants]
            assert fields["corners"].tolist() == [[*v.start, *v.end, v.mode] for v in variants]
            assert recs.array("inputs.flat").tolist() == [i for r in rows for i in r.inputs]
            assert recs.array("first_input").tolist() == [r.inputs[0] if r.inputs else -1
                                                          for r in rows]
        if recs.has("bindings.tensor"):
            bindings = [b for r in rows for b in r.inputs + r.outputs]
            assert sorted(recs.array("bindings.tensor").tolist()) == \
                sorted(b.tensor for b in bindings)
            assert set(recs.column("names")) == {b.alias for b in bindings} | \
                {a for r in rows for a in r.run_args}
        if fields and "src" in fields:
            assert [fields[k].tolist() for k in ("src", "dst", "channel", "mode")] == \
                [[getattr(r, k) for r in rows] for k in ("src", "dst", "channel", "mode")]
    return keyed


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_keys_make_the_records_classes(path):
    _check_columns(_read_back(flatten(compiled(path))))


def test_the_bench_program_is_keyed(bench_content):
    assert _check_columns(_read_back(bench_content)) == 2     # its DPU and ACT lists


def test_keys_tell_apart_what_the_rules_read(bench_content):
    """Tasks that differ only in a vector's length, a missing vector, a binding's alias or
    a run() argument fall in other classes than their twins."""
    last_dpu, last_act = _last(bench_content, 1), _last(bench_content, 2)
    dpu = bench_content.task_lists[1].tasks[last_dpu]
    act = bench_content.task_lists[2].tasks[last_act]
    for executor, row, fields in (
            (1, last_dpu, dict(kernel=None)), (1, last_dpu, dict(kernel=(3, 3, 1))),
            (1, last_dpu, dict(stride=(1, 1))), (1, last_dpu, dict(inputs=dpu.inputs * 2)),
            (2, last_act, dict(inputs=(BindingRec(act.inputs[0].tensor, "x"),))),
            (2, last_act, dict(run_args=("o", "i"))),
            (2, last_act, dict(outputs=act.outputs + act.outputs))):
        content = _read_back(with_task(bench_content, executor, row, **fields))
        program = rebuild(content, "x.blob", verify=False)
        tensors = tensor_columns(program.module, content.tensors)
        recs = content.task_lists[executor].tasks
        assert recs.has("class_key")
        picks = _representatives(recs, tensors, None)
        assert row in picks, fields
        assert picks == _representatives(tuple(recs), tensors, None)


FB_EDITS = {
    **EDITS,
    "dpu kernel of another size": lambda c: with_task(c, 1, _last(c, 1), kernel=(5, 5)),
    "dpu without its pad": lambda c: with_task(c, 1, _last(c, 1), pad=None),
    "sw task binds another shape": lambda c: with_task(
        c, 2, _last(c, 2), inputs=(BindingRec(tensor(c, "w1"), "i"),)),
    "sw task runs an unknown argument": lambda c: with_task(c, 2, _last(c, 2),
                                                            run_args=("i", "q")),
}


@pytest.mark.parametrize("writer", [write_fb, write_elf], ids=["fb", "elf"])
@pytest.mark.parametrize("edit", FB_EDITS)
def test_a_bad_task_in_a_blob_is_refused(bench_content, edit, writer, monkeypatch):
    """Written and read back (keys, barrier columns), the blob is refused with the message
    the module verifier gives over the whole program."""
    content = recounted(FB_EDITS[edit](bench_content))
    eager = read_message(content, monkeypatch, columns=False)
    assert eager is not None
    with pytest.raises(VpucError) as info:
        read_blob(writer(content), "x.blob")
    assert info.value.diagnostics[0].message == eager


def test_padded_rows_equal_iff_vectors_equal():
    from vpuc.blob.fb_rows import Vectors
    from vpuc.blob.fb_task_columns import padded

    rows = [(1, 2), None, (), (1, 2), (2,), (1, 2, -1), None]
    present = [r for r in rows if r is not None]
    values = np.array([v for r in present for v in r], np.int32)
    counts = np.array([len(r) if r is not None else 0 for r in rows], np.int64)
    column = Vectors(rows, values, counts)
    keys = [tuple(k) for k in padded(column, none_ok=True).tolist()]
    for a, ka in zip(rows, keys):
        for b, kb in zip(rows, keys):
            assert (ka == kb) == (a == b)
    # without none_ok a missing vector reads as an empty one
    keys = [tuple(k) for k in padded(column).tolist()]
    assert keys[1] == keys[2]
