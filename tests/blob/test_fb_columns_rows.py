"""The columnar FlatBuffer decoder (vpuc/blob/fb_columns.py) checks each distinct vtable
once and spreads the result over the rows: one bad table in the middle of a vector of
1000 tables is still refused at its own offset, with the generic decoder's message, and
a row with a vtable of its own still reads as the generic decoder reads it."""

import struct
import sys

import pytest
from blob_testlib import REPO, decoded

from vpuc.blob import write_blob
from vpuc.blob.fb_decode import Decoder
from vpuc.blob.fb_schema import load_schema
from vpuc.diagnostics import VpucError

sys.path.insert(0, str(REPO / "bench"))

ROW = 500


@pytest.fixture(scope="module")
def blob() -> bytes:
    from gen_program import generate

    from vpuc.api import compile_text
    try:
        program = compile_text(generate(2000), "gen.vir")
    except VpucError as exc:
        pytest.skip(f"the generated program does not compile here: {exc}")
    return write_blob(program, "fb")


def dma_table(data: bytes, row: int) -> int:
    """Where DMATask ``row`` of the DMA task list starts (the list has more than 1000)."""
    dec = Decoder(load_schema(), data, "x.blob")
    tables = dec.schema.tables
    lists = dec.locate(tables["Blob"], dec.root_position(), "task_lists")
    for i in range(struct.unpack_from("<I", data, lists)[0]):
        slot = lists + 4 + 4 * i
        tasks = dec.locate(tables["TaskList"], slot + struct.unpack_from("<I", data, slot)[0],
                           "dma_tasks")
        if tasks is not None:
            assert struct.unpack_from("<I", data, tasks)[0] >= 1000
            slot = tasks + 4 + 4 * row
            return slot + struct.unpack_from("<I", data, slot)[0]
    raise AssertionError("no DMA task list in the blob")


def with_vtable(data: bytes, vtable: bytes) -> tuple[bytes, int, int]:
    """``data`` with ``vtable`` appended and DMATask ROW pointing at it: the blob, the
    table's offset and the new vtable's."""
    out = bytearray(data)
    out += bytes(-len(out) % 4)
    vt = len(out)
    out += vtable
    pos = dma_table(data, ROW)
    out[pos:pos + 4] = struct.pack("<i", pos - vt)
    return bytes(out), pos, vt


def own_vtable(data: bytes, pos: int) -> bytes:
    """The bytes of the vtable of the table at ``pos``."""
    vt = pos - struct.unpack_from("<i", data, pos)[0]
    return data[vt:vt + struct.unpack_from("<H", data, vt)[0]]


def refused_alike(data: bytes) -> tuple:
    refusal = decoded(data, columns=True)
    assert refusal[0] == "refused", "the bad row was not refused"
    assert refusal == decoded(data, columns=False)
    return refusal[1:]


@pytest.mark.parametrize("vt_of", [lambda pos, n: pos + n, lambda pos, n: 1],
                         ids=["past the end", "misaligned"])
def test_a_vtable_astray_in_the_middle_is_located(blob, vt_of):
    pos = dma_table(blob, ROW)
    bad = bytearray(blob)
    vt = vt_of(pos, len(blob))
    bad[pos:pos + 4] = struct.pack("<i", pos - vt)
    where, offset, message = refused_alike(bytes(bad))
    assert (where, offset) == ("TaskList.dma_tasks", pos)
    assert message == f"DMATask vtable at {vt:#x} is outside the buffer or misaligned"


@pytest.mark.parametrize("vsize, tsize", [(7, 8), (2, 8), (64, 8), (6, 2)],
                         ids=["odd size", "too small", "past the end", "table too small"])
def test_a_vtable_that_does_not_fit_in_the_middle_is_located(blob, vsize, tsize):
    bad, pos, vt = with_vtable(blob, struct.pack("<HHH", vsize, tsize, 0) + bytes(2))
    where, offset, message = refused_alike(bad)
    assert (where, offset) == ("TaskList.dma_tasks", pos)
    assert message == (f"DMATask vtable at {vt:#x} (size {vsize}, table size {tsize}) does "
                       "not fit the buffer")


def test_a_field_past_its_table_in_the_middle_is_located(blob):
    pos = dma_table(blob, ROW)
    vtable = own_vtable(blob, pos)
    slots = struct.unpack_from(f"<{(len(vtable) - 4) // 2}H", vtable, 4)
    fields = load_schema().tables["DMATask"].fields
    first = next(f for f in fields if f.index < len(slots) and slots[f.index])
    bad, pos, _ = with_vtable(blob, vtable[:2] + struct.pack("<H", 4) + vtable[4:])
    where, offset, message = refused_alike(bad)
    assert (where, offset) == (f"DMATask.{first.name}", pos + slots[first.index])
    assert message == "field runs past its table (4 bytes)"


def test_a_row_with_a_shorter_vtable_of_its_own_reads_its_missing_fields_as_defaults(blob):
    """Row ROW keeps only its first two slots (label, src): the other fields read as their
    defaults in that row alone, in both decoders."""
    pos = dma_table(blob, ROW)
    vtable = own_vtable(blob, pos)
    short = struct.pack("<HH", 8, struct.unpack_from("<H", vtable, 2)[0]) + vtable[4:8]
    good, bad = decoded(blob, columns=True), decoded(with_vtable(blob, short)[0], columns=True)
    assert bad == decoded(with_vtable(blob, short)[0], columns=False)
    tasks = next(tl.dma_tasks for tl in good.task_lists if tl.dma_tasks)
    changed = next(tl.dma_tasks for tl in bad.task_lists if tl.dma_tasks)
    assert changed[ROW] == tasks[ROW]._replace(dst=0, channel=0, mode=0, barriers=None)
    assert changed[:ROW] == tasks[:ROW] and changed[ROW + 1:] == tasks[ROW + 1:]


@pytest.mark.parametrize("distinct", [1, 2, 8, 9, 40])
def test_distinct_vtables_index_every_row(distinct):
    """fb_columns._distinct (a few values found by comparing, more by sorting): every row's
    index names its own value, and each value is found once."""
    import numpy as np

    from vpuc.blob.fb_columns import _distinct
    rng = np.random.default_rng(distinct)
    pool = rng.choice(1 << 20, distinct, replace=False) * 2       # vtables are 2-aligned
    values = rng.choice(pool, 1000)
    values[rng.choice(1000, distinct, replace=False)] = pool        # each one occurs
    found, inverse = _distinct(values)
    inverse = np.zeros(len(values), np.intp) if inverse is None else inverse
    assert (found[inverse] == values).all()
    assert sorted(found.tolist()) == sorted(pool.tolist())


def test_a_partly_present_column_is_filled_with_its_exact_default():
    """fb_columns._filled: integer and bool defaults fill an array of the field's dtype; a
    float (a float32 holds 0.1 inexactly) or an out-of-range default keeps the object path."""
    import numpy as np

    from vpuc.blob.fb_columns import _filled
    assert _filled(3, -1, np.dtype("<i2")).tolist() == [-1, -1, -1]
    assert _filled(2, False, np.dtype(bool)).tolist() == [False, False]
    assert _filled(2, 300, np.dtype("u1")) is None
    assert _filled(2, 0.1, np.dtype("<f4")) is None and _filled(2, 0.0, np.dtype("<f8")) is None
