"""A tensor record's numbers out of range are refused with a located error, never an
OverflowError past the checks ("cannot rebuild ... this is a bug in the vpuc blob reader"):
the unsigned 64-bit fields (a data offset, a FlatBuffer stride) at the reader, located at
the bytes that hold them (ELF: .vpuc.tensors at the record's field; FlatBuffer: the field's
own bytes), and negative, huge or overflowing dims, strides and slices by rebuild's checks
and the verifier, in both formats (``vpuc/blob/tensor_table.py``, ``view_columns``)."""

import struct

import pytest
from blob_testlib import REPO, compiled

import vpuc.blob.reader as reader_module
from vpuc.blob import elf_records as R
from vpuc.blob import read_blob
from vpuc.blob.content import SliceRec
from vpuc.blob.flatten import flatten
from vpuc.blob.writer_elf import write_elf
from vpuc.blob.writer_fb import write_fb
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave import elf_layout as elf

import sys
sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402

WRITERS = {"fb": write_fb, "elf": write_elf}


@pytest.fixture(scope="module")
def content(tmp_path_factory):
    path = tmp_path_factory.mktemp("ranges") / "bench.vir"
    path.write_text(generate(48))
    return flatten(compiled(path))


def _tensor(content, view: bool) -> int:
    return next(i for i, t in enumerate(content.tensors) if (t.base != -1) == view)


def _with(content, index: int, **fields):
    tensors = list(content.tensors)
    tensors[index] = tensors[index]._replace(**fields)
    return content._replace(tensors=tuple(tensors))


def _refusal(data: bytes, verify: bool = True):
    with pytest.raises(VpucError) as info:
        read_blob(data, "x.blob", verify=verify)
    return info.value.diagnostics[0]


def _elf_data_offset(data: bytes, index: int, value: int) -> tuple[bytes, int]:
    """``data`` with tensor record ``index``'s data offset set to ``value``, and where."""
    image = elf.read_elf32(data, "x", relocations=False)
    sec = next(s for s in image.sections if s.name == R.TENSORS)
    at = index * sec.header.sh_entsize + R.TensorRecord.offsets["data_offset"]
    out = bytearray(data)
    struct.pack_into("<Q", out, sec.header.sh_offset + at, value)
    return bytes(out), at


@pytest.mark.parametrize("value", [1 << 63, (1 << 64) - 1])
@pytest.mark.parametrize("view", [True, False], ids=["view", "buffer"])
def test_an_elf_data_offset_past_int64_is_refused_at_its_field(content, view, value,
                                                                monkeypatch):
    monkeypatch.setattr(reader_module, "CHECK_CONTENT_HASH", False)     # bytes patched
    index = _tensor(content, view)
    data, at = _elf_data_offset(write_elf(content), index, value)
    for verify in (True, False):
        diag = _refusal(data, verify)
        assert diag.loc == BinLoc("x.blob", R.TENSORS, at)
        assert diag.message == (f"tensor #{index}: data offset {value} is out of range "
                                f"(0 to {(1 << 63) - 1} bytes)")


@pytest.mark.parametrize("field", ["data_offset", "strides"])
@pytest.mark.parametrize("view", [True, False], ids=["view", "buffer"])
def test_a_flatbuffer_number_past_int64_is_refused_at_its_bytes(content, view, field):
    index = _tensor(content, view)
    t = content.tensors[index]
    value = (1 << 64) - 1
    bad = value if field == "data_offset" else t.strides[:-1] + (value,)
    data = write_fb(_with(content, index, **{field: bad}))      # sealed: the hash holds
    for verify in (True, False):
        diag = _refusal(data, verify)
        assert diag.loc.section == f"TensorReference.{field}"
        assert struct.unpack_from("<Q", data, diag.loc.offset)[0] == value
        what = "data offset" if field == "data_offset" else "stride"
        assert diag.message.startswith(f"tensor #{index}: {what} {value} is out of range")


def _slice(t, k: int, value: int):
    first = list(t.slices[0])
    first[k] = value
    return (SliceRec(*first),) + t.slices[1:]


# Numbers int64 holds but no program has: each refused by a check (rebuild's, the
# verifier's), whether the columns or the symbol table resolve the views.
CASES = {
    "view data offset 2**62": lambda t: dict(data_offset=1 << 62),
    "view dim 2**32-1": lambda t: dict(dims=((1 << 32) - 1,) + t.dims[1:]),
    "view stride 2**62": lambda t: dict(strides=(1 << 62,) + t.strides[1:]),
    "view slice start -1": lambda t: dict(slices=_slice(t, 0, -1)),
    "view slice start 2**62": lambda t: dict(slices=_slice(t, 0, 1 << 62)),
    "view slice stop 2**62": lambda t: dict(slices=_slice(t, 1, 1 << 62)),
    "view slice stop -2": lambda t: dict(slices=_slice(t, 1, -2)),
    "view slice step 0": lambda t: dict(slices=_slice(t, 2, 0)),
    "view slice step -1": lambda t: dict(slices=_slice(t, 2, -1)),
    "view slice step 2**62": lambda t: dict(slices=_slice(t, 2, 1 << 62)),
    "view slice start -2**63": lambda t: dict(slices=_slice(t, 0, -(1 << 63))),
    "view slice step 2**63-1": lambda t: dict(slices=_slice(t, 2, (1 << 63) - 1)),
}
BUFFER_CASES = {
    "buffer dim 2**32-1": lambda t: dict(dims=((1 << 32) - 1,) + t.dims[1:]),
    "buffer stride 2**62": lambda t: dict(strides=(1 << 62,) + t.strides[1:]),
    "buffer strides 2**62 each": lambda t: dict(strides=(1 << 62,) * len(t.strides)),
}


@pytest.mark.parametrize("fmt, case", [
    (fmt, case) for case in [*CASES, *BUFFER_CASES] for fmt in WRITERS
    # an ELF blob cannot hold a buffer that large: its symbol's size is 32 bits
    if not (fmt == "elf" and case == "buffer dim 2**32-1")])
def test_a_number_out_of_range_is_refused_by_a_check(content, fmt, case, monkeypatch):
    view = case in CASES
    index = _tensor(content, view)
    t = content.tensors[index]
    change = (CASES if view else BUFFER_CASES)[case](t)
    if fmt == "elf" and "data_offset" in change:    # its relocation's addend cannot hold it
        monkeypatch.setattr(reader_module, "CHECK_CONTENT_HASH", False)     # bytes patched
        data = _elf_data_offset(write_elf(content), index, change["data_offset"])[0]
    else:
        data = WRITERS[fmt](_with(content, index, **change))
    diag = _refusal(data)
    assert "bug in the vpuc blob reader" not in diag.message
    assert f"tensor #{index}" in diag.message or f"'{t.name}'" in diag.message or \
        f"%{t.name}" in diag.message, diag.message


def test_a_negative_elf_stride_is_refused(content):
    index = _tensor(content, True)
    t = content.tensors[index]
    diag = _refusal(write_elf(_with(content, index, strides=(-8,) + t.strides[1:])))
    assert "bug in the vpuc blob reader" not in diag.message and f"#{index}" in diag.message
