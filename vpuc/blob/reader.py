"""read_blob: detect the format by its magic, check the version, decode, rebuild.

Both formats go through the same steps:

1. the magic (``\\x7fELF`` or the FlatBuffer file identifier ``VPUB`` at byte 4)
   says which reader to use; anything else is refused;
2. the format version is read on its own and checked: the major must equal
   ours and the minor must be at most ours;
3. the reader decodes the content, bounds-checking every offset;
4. the content hash in the header must match: since format 1.3 the hash of the blob's
   bytes (``vpuc.blob.sealing``), before it the hash of the decoded records;
5. ``rebuild`` checks the content and builds the Program (and, by default,
   verifies it).

Any failure is a VpucError; nothing else escapes (a safety net below turns
an unexpected exception into one, naming it as a reader bug).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.arch import Arch
from vpuc.blob.content import FORMAT_VERSION, BlobContent, content_hash
from vpuc.blob.rebuild import rebuild
from vpuc.blob.sealing import DIGEST_BYTES, bytes_digest, hashes_bytes
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.program import Program

ELF_MAGIC = b"\x7fELF"
FB_IDENTIFIER = b"VPUB"
MAX_BLOB_BYTES = 1 << 31
# Tests turn this off to reach the checks behind the hash with corrupted blobs.
CHECK_CONTENT_HASH = True


@dataclass
class DecodedBlob:
    """What inspect needs beyond the Program: the format, version and raw sizes."""

    format: str                        # "fb" or "elf"
    version: tuple[int, int]
    content: BlobContent
    digest: bytes
    sizes: dict[str, int] = field(default_factory=dict)   # part -> bytes
    total: int = 0


def detect_format(data: bytes, file: str) -> str:
    if data[:4] == ELF_MAGIC:
        return "elf"
    if len(data) >= 8 and data[4:8] == FB_IDENTIFIER:
        return "fb"
    raise VpucError(f"not a vpuc blob: expected an ELF file or a FlatBuffer with file "
                    f"identifier {FB_IDENTIFIER.decode()} (first bytes: {bytes(data[:8]).hex()})",
                    BinLoc(file, "file header", 0))


def check_version(version: tuple[int, int], file: str, where: str) -> None:
    major, minor = version
    ours_major, ours_minor = FORMAT_VERSION
    if major != ours_major or minor > ours_minor:
        raise VpucError(f"blob format {major}.{minor} is not supported by this reader "
                        f"({ours_major}.x)" + ("" if major != ours_major else
                                              f"; it reads up to {ours_major}.{ours_minor}"),
                        BinLoc(file, where, 0))


def decode_blob(data: bytes, file: str, *, sizes: bool = True) -> DecodedBlob:
    """Bytes -> checked content (format, version, hash), without building the Program.

    ``sizes=False`` skips the bytes per part (``vpuc inspect``'s), so a FlatBuffer's
    vectors of tables are decoded a column at a time (``vpuc.blob.fb_columns``)."""
    data = bytes(data)
    if len(data) > MAX_BLOB_BYTES:
        raise VpucError(f"blob is {len(data)} bytes; at most {MAX_BLOB_BYTES} are supported",
                        BinLoc(file, "file", 0))
    fmt = detect_format(data, file)
    try:
        if fmt == "fb":
            from vpuc.blob.reader_fb import FbReader
            reader = FbReader(data, file, columns=not sizes)
            version = reader.version()
            check_version(version, file, "SummaryHeader.version")
            content, digest = reader.content()
            hash_at = reader.hash_offset() if hashes_bytes(version) else -1
            part_sizes = dict(reader.decoder.sizes) if sizes else {}
        else:
            from vpuc.blob.reader_elf import ElfReader
            reader = ElfReader(data, file)
            version = reader.version()
            check_version(version, file, ".note.vpuc")
            content, digest = reader.content()
            hash_at = reader.hash_offset() if hashes_bytes(version) else -1
            part_sizes = reader.sizes() if sizes else {}
    except VpucError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise VpucError(f"blob is too deeply nested or too large to decode ({type(exc).__name__})",
                        BinLoc(file, "file", 0)) from None
    except Exception as exc:  # a reader bug must still not show a traceback
        raise VpucError(f"cannot decode the blob ({type(exc).__name__}: {exc}); this is a bug "
                        "in the vpuc blob reader", BinLoc(file, "file", 0)) from None
    if not CHECK_CONTENT_HASH:
        actual = digest
    elif hashes_bytes(version):
        if len(digest) != DIGEST_BYTES:
            raise VpucError(f"content hash is {len(digest)} bytes, expected {DIGEST_BYTES}; the "
                            "blob is corrupted", BinLoc(file, "header", 0))
        actual = bytes_digest(data, hash_at)
    else:
        actual = content_hash(content)
    if actual != digest:
        raise VpucError(f"content hash mismatch: the header says {digest.hex()[:16]}..., the "
                        f"content hashes to {actual.hex()[:16]}...; the blob is corrupted",
                        BinLoc(file, "header", 0))
    return DecodedBlob(fmt, version, content, digest, part_sizes, len(data))


def read_blob(data: bytes, file: str = "<blob>", *, arch: str | Arch | None = None,
              verify: bool = True, schedule_rules: bool = False) -> Program:
    """Read a blob of either format into the Program it was written from.

    ``arch`` (a name, or an ``Arch`` to compare every structure field with) refuses a
    blob compiled for another architecture; ``verify`` runs the module verifier's rules
    over each record of the result (a blob is untrusted input), ``schedule_rules`` also
    those over the whole schedule (deadlock, physical barrier reuse, overlaps, races),
    which the simulator's runtime checks as it runs.
    """
    decoded = decode_blob(data, file, sizes=False)
    try:
        return rebuild(decoded.content, file, expected_arch=arch, verify=verify,
                       schedule_rules=schedule_rules)
    except VpucError:
        raise
    except Exception as exc:
        raise VpucError(f"cannot rebuild the blob's program ({type(exc).__name__}: {exc}); this "
                        "is a bug in the vpuc blob reader", BinLoc(file, "content", 0)) from None
