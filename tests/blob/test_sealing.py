"""The content hash of format 1.3: SHA-256 of the blob's bytes with the hash's own 32
bytes as zeros; blobs of 1.2 keep the hash of their records."""

import hashlib
import random

import pytest
from blob_testlib import REPO, compiled

from vpuc.blob import decode_blob, read_blob, write_blob
from vpuc.blob import writer_elf, writer_fb
from vpuc.blob.content import content_hash
from vpuc.blob.fb_builder import FastBuilder
from vpuc.blob.flatten import flatten
from vpuc.blob.sealing import elf_hash_offset, fb_hash_span
from vpuc.diagnostics import VpucError
from vpuc.shave import elf_layout as elf

DWCONV = REPO / "examples" / "dwconv_pool.vir"
FORMATS = ("fb", "elf")


def hash_at(data: bytes, fmt: str) -> int:
    if fmt == "fb":
        at, length = fb_hash_span(data)
        assert length == 32
        return at
    names = [s.name for s in elf.read_elf32(data, "x").sections]
    return elf_hash_offset(data, names.index(".vpuc.header"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_hash_is_sha256_of_the_bytes_with_its_own_bytes_zero(fmt):
    program = compiled(DWCONV)
    data = write_blob(program, fmt)
    at = hash_at(data, fmt)
    expected = hashlib.sha256(data[:at] + bytes(32) + data[at + 32:]).digest()
    assert data[at:at + 32] == expected == decode_blob(data, "x.blob").digest
    assert write_blob(program, fmt) == data            # stable: equal programs, equal bytes


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_byte_is_covered(fmt):
    """Padding and unused fields included: any flipped byte is refused."""
    data = write_blob(compiled(DWCONV), fmt)
    rng = random.Random(13)
    for position in rng.sample(range(len(data)), 300):
        flipped = bytearray(data)
        flipped[position] ^= 1 << rng.randrange(8)
        with pytest.raises(VpucError):
            read_blob(bytes(flipped), "flipped.blob")


@pytest.mark.parametrize("fmt,module", [("fb", writer_fb), ("elf", writer_elf)])
def test_a_1_2_blob_keeps_the_hash_of_its_records(fmt, module, monkeypatch):
    program = compiled(DWCONV)
    monkeypatch.setattr(module, "FORMAT_VERSION", (1, 2))
    data = write_blob(program, fmt)
    decoded = decode_blob(data, "old.blob")
    assert decoded.version == (1, 2)
    assert decoded.digest == content_hash(flatten(program))
    assert read_blob(data, "old.blob") == program
    # The records' hash does not cover padding, but it does cover what the records hold.
    renamed = flatten(program)._replace(header=flatten(program).header._replace(
        module_name="renamed"))
    forged = module.write_fb(renamed) if fmt == "fb" else module.write_elf(renamed)
    at = hash_at(forged, fmt)
    mixed = forged[:at] + decoded.digest + forged[at + 32:]
    with pytest.raises(VpucError, match="content hash mismatch"):
        read_blob(mixed, "old.blob")


def test_a_hash_of_another_length_is_refused():
    content = flatten(compiled(DWCONV))
    data = writer_fb._Writer(FastBuilder).blob(content, bytes(31))
    with pytest.raises(VpucError) as info:
        read_blob(data, "short.blob")
    diag = info.value.diagnostics[0]
    assert diag.message == "content hash is 31 bytes, expected 32; the blob is corrupted"
    assert str(diag.loc).startswith("short.blob")
