"""Task lists read as ``RecordTable``s (both readers) stand for the records they hold: equal,
indexed, sliced and taken as the tuple of records, each lazily made column equal to the
records' field; and a corrupt field a record is never made of is still refused on reading,
with its section and offset."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled

from vpuc.blob import decode_blob, read_blob, write_blob
from vpuc.blob import elf_records as R
from vpuc.blob.flatten import flatten
from vpuc.blob.record_table import RecordTable, columns
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave import elf_layout as elf


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_a_table_reads_as_its_records(path, fmt):
    program = compiled(path)
    expected = flatten(program).task_lists
    content = decode_blob(write_blob(program, fmt), "x.blob", sizes=False).content
    for tl, want in zip(content.task_lists, expected):
        tasks = tl.tasks
        assert tasks == want.tasks and tuple(tasks) == want.tasks and len(tasks) == len(want.tasks)
        if not isinstance(tasks, RecordTable):
            assert tasks == ()
            continue
        for name in tasks.record._fields:        # every column, made on its own
            assert columns(tasks, name) == [[getattr(rec, name) for rec in want.tasks]]
        for row in range(len(want.tasks)):
            assert tasks[row] == want.tasks[row]
        assert tasks[1:] == want.tasks[1:] and tasks[::-1] == want.tasks[::-1]
        rows = np.arange(len(tasks))[::2]
        assert tuple(tasks.take(rows)) == tuple(want.tasks[i] for i in rows.tolist())


def test_a_corrupt_field_no_check_reads_is_still_refused():
    """A DMA task's update list running past the pool: reading makes no record of it (the
    lists stay lazy) but refuses the blob at the list, as the row-wise reader did."""
    program = compiled(next(p for p in SOURCES if p.stem == "conv_2tiles"))
    data = bytearray(write_blob(program, "elf"))
    sec = next(s for s in elf.read_elf32(bytes(data), "x.elf", machine=R.EM_VPUC_NPU,
                                         relocations=False).sections
               if s.header.sh_type == R.VpucShType.SHT_VPUC_DMA_TASKS)
    at = sec.header.sh_offset + R.DmaRecord.offsets["updates_start"]
    data[at:at + 4] = (10 ** 8).to_bytes(4, "little")
    import vpuc.blob.reader as reader
    saved, reader.CHECK_CONTENT_HASH = reader.CHECK_CONTENT_HASH, False
    try:
        with pytest.raises(VpucError) as info:
            read_blob(bytes(data), "x.elf")
    finally:
        reader.CHECK_CONTENT_HASH = saved
    diag = info.value.diagnostics[0]
    assert "runs past the pool" in diag.message
    assert isinstance(diag.loc, BinLoc) and diag.loc.section == R.POOL32
    # with the hash checked too: the bounds are checked as the content is decoded, first
    with pytest.raises(VpucError, match="runs past the pool"):
        read_blob(bytes(data), "x.elf")


@pytest.mark.parametrize("path", SOURCES + [REPO / "bench" / "gen_program.py"],
                         ids=IDS + ["gen_program"])
def test_the_decoders_class_keys_pick_the_records_representatives(path, tmp_path):
    """verify_columns' classes from the ELF decoder's numpy keys are the records' classes."""
    from vpuc.blob.verify_columns import _representatives
    from vpuc.blob.view_columns import tensor_columns

    if path.suffix == ".py":        # a generated program: thousands of alike tasks
        sys.path.insert(0, str(REPO / "bench"))
        from gen_program import generate
        path = tmp_path / "gen.vir"
        path.write_text(generate(64))
    program = compiled(path)
    content = decode_blob(write_blob(program, "elf"), "x.blob", sizes=False).content
    tensors = tensor_columns(program.module, content.tensors)
    for tl in content.task_lists:
        if path.name == "gen.vir" and tl.executor in (1, 2):
            assert tl.tasks.has("class_key")        # the numpy path is the one compared
        assert _representatives(tl.tasks, tensors, None) == \
            _representatives(tuple(tl.tasks), tensors, None)
