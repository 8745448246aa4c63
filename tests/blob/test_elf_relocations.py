"""The ELF container's relocations checked as columns (vpuc/blob/elf_relocations.py) accept
what the entry-by-entry check accepts and refuse a bad relocation with its message."""

import struct
import sys

import pytest
from blob_testlib import IDS, REPO, SOURCES, compiled

import vpuc.blob.reader as reader_module
import vpuc.blob.reader_elf as reader_elf
from vpuc.blob import elf_records as R
from vpuc.blob import read_blob, write_blob
from vpuc.blob.elf_relocations import relocation_columns, relocations_hold
from vpuc.blob.reader_elf import ElfReader
from vpuc.diagnostics import VpucError
from vpuc.shave import elf_layout as elf

sys.path.insert(0, str(REPO / "bench"))
from gen_program import generate  # noqa: E402


@pytest.fixture(scope="module")
def bench_blob(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("bench") / "bench.vir"
    path.write_text(generate(48))
    return write_blob(compiled(path), "elf")


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_the_columns_hold_for_every_example(path):
    reader = ElfReader(write_blob(compiled(path), "elf"), "x.blob")
    content, _ = reader.content()
    assert reader.relocs is not None and not reader.elf.relocations
    assert relocations_hold(reader, reader.relocs, content)
    # The entry-by-entry reading sees the same relocations.
    rows = elf.read_relocations(reader.elf, "x.blob")
    assert [(r.offset, r.type, r.symbol.index, r.addend) for r in rows] == list(zip(
        reader.relocs.offset.tolist(), reader.relocs.type.tolist(),
        reader.relocs.symbol.tolist(), reader.relocs.addend.tolist()))


def _relocation_section(data: bytes):
    image = elf.read_elf32(data, "x")
    return next(s for s in image.sections if s.header.sh_type in (elf.SHT_REL, elf.SHT_RELA))


def _entry(data: bytes, index: int, **fields) -> bytes:
    """``data`` with fields of relocation entry ``index`` (from the end when negative)
    replaced."""
    sec = _relocation_section(data)
    size = sec.header.sh_entsize
    count = sec.header.sh_size // size
    at = sec.header.sh_offset + (index % count) * size
    offset, info = struct.unpack_from("<II", data, at)
    offset = fields.get("offset", offset)
    info = (fields.get("symbol", info >> 8) << 8) | fields.get("type", info & 0xFF)
    out = bytearray(data)
    struct.pack_into("<II", out, at, offset, info)
    return bytes(out)


def _nonzero_word(data: bytes) -> bytes:
    """The word the last relocation patches made non-zero."""
    image = elf.read_elf32(data, "x")
    rel = image.relocations[-1]
    target = next(s for s in image.sections if s.name == rel.section)
    out = bytearray(data)
    out[target.header.sh_offset + rel.offset] = 1
    return bytes(out)


def _first_entry_offset(data: bytes) -> int:
    return elf.read_elf32(data, "x").relocations[0].offset


def _tensor_data_offset(data: bytes, index: int, delta: int) -> bytes:
    """``data`` with tensor record ``index``'s data offset moved by ``delta``: the address
    its relocation patches is no longer the one the records imply."""
    image = elf.read_elf32(data, "x", relocations=False)
    sec = next(s for s in image.sections if s.name == R.TENSORS)
    count = sec.header.sh_size // sec.header.sh_entsize
    at = sec.header.sh_offset + (index % count) * sec.header.sh_entsize + \
        R.TensorRecord.offsets["data_offset"]
    out = bytearray(data)
    struct.pack_into("<Q", out, at, (struct.unpack_from("<Q", data, at)[0] + delta) % (1 << 64))
    return bytes(out)


CORRUPTIONS = {
    # The records' side (the addresses they imply, read from the tensor table's columns).
    "a view's data offset moved": lambda d: _tensor_data_offset(d, -1, 64),
    "a buffer's data offset moved": lambda d: _tensor_data_offset(d, 0, 4),

    "another type": lambda d: _entry(d, -1, type=0),
    "no symbol": lambda d: _entry(d, -1, symbol=0),
    "symbol out of range": lambda d: _entry(d, -1, symbol=1 << 20),
    "outside its section": lambda d: _entry(d, -1, offset=1 << 30),
    "patches another field": lambda d: _entry(d, -1, offset=_first_entry_offset(d) + 4),
    "patches one word twice": lambda d: _entry(d, -1, offset=_first_entry_offset(d)),
    "a word that is not zero": _nonzero_word,
}


def _message(data: bytes, monkeypatch, *, columns: bool) -> str:
    monkeypatch.setattr(reader_module, "CHECK_CONTENT_HASH", False)
    if not columns:
        monkeypatch.setattr(reader_elf, "relocation_columns", lambda image: None)
    try:
        with pytest.raises(VpucError) as info:
            read_blob(data, "x.blob")
    finally:
        monkeypatch.undo()
    return info.value.diagnostics[0].message + f" @ {info.value.diagnostics[0].loc}"


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_a_bad_relocation_is_refused_with_its_message(bench_blob, corruption, monkeypatch):
    data = CORRUPTIONS[corruption](bench_blob)
    assert _message(data, monkeypatch, columns=True) == \
        _message(data, monkeypatch, columns=False)


def test_relocation_columns_refuse_a_broken_section(bench_blob):
    image = elf.read_elf32(_entry(bench_blob, 0, symbol=1 << 20), "x", relocations=False)
    assert relocation_columns(image) is None


@pytest.mark.parametrize("corruption", ["a view's data offset moved",
                                        "a buffer's data offset moved"])
def test_a_moved_data_offset_is_refused_by_the_relocation_check(bench_blob, corruption,
                                                                monkeypatch):
    message = _message(CORRUPTIONS[corruption](bench_blob), monkeypatch, columns=True)
    assert message.startswith("relocation gives ") and "section .vpuc.tensors" in message
