"""The content hash of format 1.3: SHA-256 of the blob's own bytes.

Since 1.3 a blob's content hash is the SHA-256 of the whole file with the 32
bytes of the hash itself read as zeros (docs/blob-format.md, "Content hash").
Those bytes are what the readers decode the content from, and the writers give
equal programs identical bytes, so the hash is stable across runs; hashing them
costs one pass of hashlib instead of re-encoding every record.  The hash sits
where each format's layout puts it: ``SummaryHeader.content_hash`` of a
FlatBuffer, found through the flatc-generated accessors, and the
``content_hash`` field of the ELF container's ``.vpuc.header`` record, found
through the section headers.  Blobs of 1.0 to 1.2 keep the hash of their
records (``vpuc.blob.content.content_hash``).
"""

from __future__ import annotations

import hashlib

import numpy as np

BYTES_HASH_SINCE = (1, 3)
DIGEST_BYTES = 32
_ZEROS = bytes(DIGEST_BYTES)


def hashes_bytes(version: tuple[int, int]) -> bool:
    """Whether a blob of ``version`` carries the hash of its bytes (else of its records)."""
    return tuple(version) >= BYTES_HASH_SINCE


def bytes_digest(data: bytes | bytearray, at: int) -> bytes:
    """SHA-256 of ``data`` with the 32 bytes at ``at`` read as zeros."""
    view = memoryview(data)
    digest = hashlib.sha256(view[:at])
    digest.update(_ZEROS)
    digest.update(view[at + DIGEST_BYTES:])
    return digest.digest()


def seal(data: bytearray, at: int) -> bytes:
    """Write the hash of ``data`` into its 32 bytes at ``at`` (zero until then)."""
    data[at:at + DIGEST_BYTES] = bytes_digest(data, at)
    return bytes(data)


def _position_in(buffer, view: np.ndarray) -> int:
    """Where the numpy view ``view`` of ``buffer`` starts, in bytes."""
    return view.ctypes.data - np.frombuffer(buffer, dtype=np.uint8).ctypes.data


def fb_hash_span(data: bytes | bytearray) -> tuple[int, int]:
    """(offset, length) of ``SummaryHeader.content_hash`` in a FlatBuffer blob, read with
    the flatc-generated accessors; (-1, 0) without one.  The caller has checked the
    buffer's structure (the generated code does not bounds-check)."""
    from schema.vpu_blob.Blob import Blob

    header = Blob.GetRootAs(data, 0).Header()
    if header is None or header.ContentHashIsNone():
        return -1, 0
    return _position_in(data, header.ContentHashAsNumpy()), header.ContentHashLength()


def elf_hash_offset(data: bytes | bytearray, header_index: int) -> int:
    """File offset of the ``content_hash`` field of the ``.vpuc.header`` record, the section
    at ``header_index`` of the section header table (the ELF header says where it is)."""
    # Imported here: the ELF layout imports the SHAVE toolchain package, which a process
    # reading only FlatBuffer blobs need not load (vpuc.blob imports this module).
    from vpuc.blob import elf_records as R
    from vpuc.shave import elf_layout as elf

    ehdr = elf.Elf32_Ehdr.unpack_from(data, 0, "<blob>", "ELF header")
    shdr = elf.Elf32_Shdr.unpack_from(data, ehdr.e_shoff + header_index * ehdr.e_shentsize,
                                      "<blob>", "section headers")
    return shdr.sh_offset + R.HeaderRecord.offsets["content_hash"]
