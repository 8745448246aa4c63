"""The columnar FlatBuffer decoder (vpuc/blob/fb_columns.py) against the generic one:
the same records on every example blob, the same refusals on corrupted ones, and
located errors (section and byte offset) for offsets that point astray."""

import random
import struct
import sys

import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled, decoded

from vpuc.blob import write_blob
from vpuc.blob.fb_decode import Decoder
from vpuc.blob.fb_schema import load_schema

sys.path.insert(0, str(REPO / "bench"))


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_every_example_decodes_to_the_generic_records(path):
    data = write_blob(compiled(path), "fb")
    generic = decoded(data, columns=False)
    assert generic[0] != "refused"
    assert decoded(data, columns=True) == generic


def test_a_generated_program_of_many_tasks_decodes_to_the_generic_records():
    from gen_program import generate

    from vpuc.api import compile_text
    from vpuc.diagnostics import VpucError as Error
    try:
        program = compile_text(generate(64), "gen.vir")
    except Error as exc:
        pytest.skip(f"the generated program does not compile here: {exc}")
    data = write_blob(program, "fb")
    root = decoded(data, columns=True)
    assert root == decoded(data, columns=False)
    assert sum(len(tl.dma_tasks or tl.dpu_tasks or tl.act_kernel_tasks)
               for tl in root.task_lists) == 64


def test_scalar_columns_keep_numbers_equal_to_their_values():
    """Every scalar column of the column decoder (``Scalars``), written or never written
    (the default everywhere), and a slice of one (a task list's rows of its TaskList
    vector), keeps a numpy array equal to its values; ``ints`` reads it as the values."""
    import numpy as np
    from gen_program import generate

    from vpuc.api import compile_text
    from vpuc.blob.fb_columns import Columns
    from vpuc.blob.fb_rows import Scalars
    from vpuc.blob.fb_task_columns import ints

    data = write_blob(compile_text(generate(64), "gen.vir"), "fb")
    root = decoded(data, columns=True)
    tables = [root.barriers, root.tensors] + [
        t for tl in root.task_lists for t in (tl.dma_tasks, tl.dpu_tasks, tl.act_kernel_tasks)
        if t]
    seen = set()
    while tables:
        table = tables.pop()
        if not isinstance(table, Columns):
            continue
        for name, column in table.columns.items():
            if isinstance(column, Columns):
                tables.append(column)
            if isinstance(column, Scalars):
                seen.add(name)
                assert column.array.tolist() == list(column), name
                assert ints(column).tolist() == np.fromiter(column, np.int64).tolist()
                part = column[1:-1]
                assert isinstance(part, Scalars) and part.array.tolist() == list(part)
    # (the program has columns written everywhere, partly (a default omitted) and never)
    assert {"src", "dst", "channel", "id", "physical_id", "tile", "op"} <= seen, seen


def _mutate(data: bytes, rng: random.Random) -> bytes:
    blob = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(8, len(blob) - 4)
        if rng.random() < 0.5:
            blob[at] = rng.randrange(256)
        else:        # an offset-sized write: the corruption that sends a decoder astray
            blob[at:at + 4] = struct.pack("<I", rng.choice(
                [0, 1, 2, 3, 0xFFFFFFFF, 0x7FFFFFFF, len(data), rng.randrange(1 << 16)]))
    return bytes(blob)


@pytest.mark.parametrize("example", ["dwconv_pool", "clamp", "conv_2tiles"])
def test_corrupted_blobs_are_refused_exactly_when_the_generic_decoder_refuses(example):
    data = write_blob(compiled(REPO / "examples" / f"{example}.vir"), "fb")
    rng = random.Random(example)
    refused = 0
    for _ in range(1500):
        blob = _mutate(data, rng)
        generic, columns = decoded(blob, False), decoded(blob, True)
        if generic[0] == "refused":
            refused += 1
            assert columns[0] == "refused", (generic, columns)
            assert "bug" not in columns[3]
        else:   # repr: a corrupted float may be a NaN, which equals nothing
            assert columns == generic or repr(columns) == repr(generic)
    assert refused > 100


def _first_dma_task_offset(data: bytes) -> int:
    """Where the offset of the first DMATask of the first DMA task list is stored."""
    dec = Decoder(load_schema(), data, "x.blob")
    tables = dec.schema.tables
    lists = dec.locate(tables["Blob"], dec.root_position(), "task_lists")
    for i in range(struct.unpack_from("<I", data, lists)[0]):
        slot = lists + 4 + 4 * i
        pos = slot + struct.unpack_from("<I", data, slot)[0]
        tasks = dec.locate(tables["TaskList"], pos, "dma_tasks")
        if tasks is not None and struct.unpack_from("<I", data, tasks)[0]:
            return tasks + 4
    raise AssertionError("no DMA task in the blob")


@pytest.mark.parametrize("value, message", [
    (0x7FFFFFF0, "DMATask table offset"),          # far past the end
    (2, "DMATask table offset"),                   # misaligned
])
def test_a_task_offset_astray_is_located(value, message):
    data = bytearray(write_blob(compiled(REPO / "examples" / "clamp.vir"), "fb"))
    at = _first_dma_task_offset(bytes(data))
    data[at:at + 4] = struct.pack("<I", value)
    refusal = decoded(bytes(data), columns=True)
    assert refusal[0] == "refused"
    _, where, offset, text = refusal
    assert where == "TaskList.dma_tasks" and offset == (at + value) and message in text
    assert refusal == decoded(bytes(data), columns=False)


def test_a_vtable_astray_is_located():
    data = bytearray(write_blob(compiled(REPO / "examples" / "clamp.vir"), "fb"))
    at = _first_dma_task_offset(bytes(data))
    task = at + struct.unpack_from("<I", data, at)[0]
    data[task:task + 4] = struct.pack("<i", -len(data))     # vtable after the end
    refusal = decoded(bytes(data), columns=True)
    assert refusal[:3] == ("refused", "TaskList.dma_tasks", task)
    assert "DMATask vtable" in refusal[3]
    assert refusal == decoded(bytes(data), columns=False)


def test_a_string_without_its_terminator_is_located():
    program = compiled(REPO / "examples" / "clamp.vir")
    data = bytearray(write_blob(program, "fb"))
    label = next(t.label for tl in program.module.task_lists for t in tl.tasks if t.label)
    at = bytes(data).index(label.encode() + b"\0") + len(label)
    data[at] = ord("x")
    refusal = decoded(bytes(data), columns=True)
    assert refusal[0] == "refused" and refusal[3] == "string is not NUL-terminated"
    assert refusal[2] == at - len(label) - 4
    assert refusal == decoded(bytes(data), columns=False)


def test_read_blob_uses_the_columns_and_inspect_the_sizes():
    from vpuc.blob import decode_blob, read_blob
    program = compiled(REPO / "examples" / "clamp.vir")
    data = write_blob(program, "fb")
    assert read_blob(data, "x.blob") == program
    assert decode_blob(data, "x.blob").sizes and not decode_blob(data, "x", sizes=False).sizes
    assert decode_blob(data, "x").content == decode_blob(data, "x", sizes=False).content


def test_a_huge_count_is_refused_before_it_is_gathered():
    data = bytearray(write_blob(compiled(REPO / "examples" / "clamp.vir"), "fb"))
    at = _first_dma_task_offset(bytes(data)) - 4           # the vector's length
    data[at:at + 4] = struct.pack("<I", 0x3FFFFFFF)
    refusal = decoded(bytes(data), columns=True)
    assert refusal[:3] == ("refused", "TaskList.dma_tasks", at) and "runs past the end" in refusal[3]



@pytest.mark.parametrize("byte, refused", [(b"\0", False), (b"\xff", True)])
def test_a_string_with_a_nul_or_bad_utf8_decodes_as_the_generic_decoder(byte, refused):
    """Strings are decoded a column at a time, split at their NULs: a string holding a NUL
    of its own, or bad UTF-8, is decoded (or refused, at its offset) as one by one."""
    from gen_program import generate
    from vpuc.api import compile_text
    data = write_blob(compile_text(generate(48), "gen.vir"), "fb")
    at = data.index(b"store7\0")
    bad = data[:at + 2] + byte + data[at + 3:]
    columns = decoded(bad, columns=True)
    assert columns == decoded(bad, columns=False)
    assert (columns[0] == "refused") == refused


def test_columns_and_groups_read_as_the_rows_they_hold():
    """Columns and Grouped (the columnar decoder's vectors of tables) index, slice,
    iterate, compare and print as the generic decoder's tuples of records."""
    from collections import namedtuple

    from vpuc.blob.fb_columns import Columns, Grouped

    Rec = namedtuple("Rec", ["a", "b"])
    rows = (Rec(1, "x"), Rec(2, "y"), Rec(3, "z"))
    cols = Columns(Rec, {"a": [1, 2, 3], "b": ["x", "y", "z"]}, 3)
    assert cols == rows and rows == cols and tuple(cols) == rows and repr(cols) == repr(rows)
    assert cols[1] == Rec(2, "y") and cols[-1] == Rec(3, "z")
    assert cols[1:] == rows[1:] and len(cols[1:]) == 2 and cols[3:] == () and not cols[3:]
    assert cols != rows[:2] and cols != (Rec(1, "x"), Rec(2, "y"), Rec(3, "w"))
    groups = Grouped(cols, [2, 0, 1])
    assert [tuple(g) for g in groups] == [rows[:2], (), rows[2:]]
    assert groups[2] == rows[2:] and groups[-3] == rows[:2] and groups[1] == ()
    part = groups[1:]
    assert part.counts == [0, 1] and part.flat == rows[2:]
    assert [tuple(g) for g in groups[::2]] == [rows[:2], rows[2:]]


def test_a_vectors_column_slices_with_its_numbers():
    """fb_columns.Vectors (a column of scalar vectors with its numbers): a slice of rows keeps
    exactly those rows' numbers and counts, as the rows it lists."""
    import numpy as np
    from vpuc.blob.fb_columns import Vectors

    rows = [(1,), (), (2, 3), None, (4,)]
    counts = np.array([len(r or ()) for r in rows], np.int64)
    column = Vectors(rows, np.array([1, 2, 3, 4], np.uint32), counts)
    for start in range(-6, 7):
        for stop in (*range(-6, 7), None):
            part = column[start:stop]
            assert part == rows[start:stop] and isinstance(part, Vectors)
            assert part.values.tolist() == [v for r in rows[start:stop] for v in r or ()]
            assert part.counts.tolist() == [len(r or ()) for r in rows[start:stop]]
    assert column[::2] == rows[::2] and column[2] == (2, 3)


def test_a_vectors_column_made_from_its_numbers_reads_as_its_rows():
    """Vectors without rows (the column decoder's): each row cut from the numbers only when
    asked, a missing vector read as None, equal to the rows in every index and slice; an
    indexed row is cut alone."""
    import pickle

    import numpy as np
    from vpuc.blob.fb_columns import Vectors

    rows = [(1,), (), (2, 3), None, (4,), (5, 6, 7)]
    counts = np.array([len(r or ()) for r in rows], np.int64)
    values = np.array([1, 2, 3, 4, 5, 6, 7], np.uint32)
    missing = np.array([r is None for r in rows])

    def lazy():
        return Vectors(None, values, counts, missing)
    for i in range(-len(rows), len(rows)):
        column = lazy()
        assert column[i] == rows[i] and column._rows is None
    for start in range(-7, 8):
        for stop in (*range(-7, 8), None):
            part = lazy()[start:stop]
            assert part == rows[start:stop] and list(part) == rows[start:stop]
            assert part.values.tolist() == [v for r in rows[start:stop] for v in r or ()]
    column = lazy()
    assert column == rows and column.missing_rows().tolist() == missing.tolist()
    assert column[::2] == rows[::2] and len(column) == len(rows)
    assert pickle.loads(pickle.dumps(lazy())) == rows
    assert Vectors(None, values[:0], counts[:0]) == [] and lazy() != rows[:-1]
    with pytest.raises(IndexError):
        lazy()[len(rows)]
