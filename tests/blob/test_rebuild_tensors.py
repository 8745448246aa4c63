"""rebuild's tensors made a column at a time (``_tensors_by_columns``) against the record
by record builder: the same buffers, views and kinds on every example blob, and a doubt
(a bad record) hands over to the row builder, whose message names the first bad tensor."""

import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled

from vpuc.blob import write_blob
from vpuc.blob.reader import decode_blob
from vpuc.blob.rebuild import _tensors_by_columns, _tensors_by_rows
from vpuc.blob.rebuild_checks import Checker
from vpuc.diagnostics import VpucError
from vpuc.ir.module import Ref


def _made(result):
    """(kinds, buffer rows, buffers, views): the views made, as the module asks for them."""
    kinds, buffer_at, buffers, views, _ = result
    return kinds, buffer_at, buffers, views()


def _both(tensors):
    refs = [Ref(t.name) for t in tensors]
    return (_made(_tensors_by_columns(Checker("x.blob"), tensors, refs, {})),
            _made(_tensors_by_rows(Checker("x.blob"), tensors, refs, {})))


@pytest.mark.parametrize("fmt", ["elf", "fb"])
@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_columns_make_the_rows_tensors(path, fmt):
    data = write_blob(compiled(path), fmt)
    tensors = decode_blob(data, "x.blob").content.tensors
    by_columns, by_rows = _both(tensors)
    assert by_columns == by_rows
    # each view made alone (what verify asks for) is the module's
    one_view = _tensors_by_columns(Checker("x.blob"), tensors, [Ref(t.name) for t in tensors],
                                   {})[4]
    at = [i for i, t in enumerate(tensors) if t.base != -1]
    assert [one_view(i) for i in at] == by_rows[3]
    # the records as a plain tuple (a content not read from bytes) make the same
    assert _both(tuple(tensors)) == (by_rows, by_rows)
    # read_blob's decoder (FlatBuffer: the column decoder, slices as numbers) makes the same
    fast = decode_blob(data, "x.blob", sizes=False).content.tensors
    assert fast == tensors and _both(fast) == (by_rows, by_rows)


@pytest.mark.parametrize("change, message", [
    (dict(location=99), "memory location"),
    (dict(base=-2), "tensor"),
    (dict(data_type=250), "element type"),
])
def test_a_bad_record_is_doubted_and_named_by_the_rows(change, message):
    tensors = list(decode_blob(write_blob(compiled(REPO / "examples" / "conv_2tiles.vir"), "elf"),
                               "x.blob").content.tensors)
    last = max(i for i, t in enumerate(tensors) if t.base != -1)
    tensors[last] = tensors[last]._replace(**change)
    refs = [Ref(t.name) for t in tensors]
    assert _tensors_by_columns(Checker("x.blob"), tensors, refs, {}) is None
    with pytest.raises(VpucError) as err:
        _tensors_by_rows(Checker("x.blob"), tensors, refs, {})
    assert f"tensor #{last}" in str(err.value) and message in str(err.value)
