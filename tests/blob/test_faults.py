"""Bad blobs: truncated, corrupted, of another version, identifier or architecture.
Each is refused with a VpucError or read consistently; nothing else escapes."""

import dataclasses
import random
import pytest
from blob_testlib import REPO, compiled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vpuc.blob.reader as reader_module
from vpuc.blob import read_blob, write_blob
from vpuc.blob import writer_elf, writer_fb
from vpuc.blob.flatten import flatten
from vpuc.diagnostics import VpucError
from vpuc.program import Program
from vpuc.shave import elf_layout as elf

CLAMP = REPO / "examples" / "clamp.vir"
DWCONV = REPO / "examples" / "dwconv_pool.vir"
FORMATS = ("fb", "elf")


def refused_or_consistent(data: bytes, original: Program | None = None) -> str:
    """Read ``data``: a VpucError is fine, so is a Program (equal to ``original``
    when given); anything else fails the test."""
    try:
        program = read_blob(bytes(data), "bad.blob")
    except VpucError as exc:
        assert "\n" not in exc.diagnostics[0].message
        return "refused"
    assert isinstance(program, Program)
    if original is not None:
        assert program == original
    return "read"


@pytest.fixture
def no_hash_check(monkeypatch):
    """Let corrupted content through the hash, to reach the checks behind it."""
    monkeypatch.setattr(reader_module, "CHECK_CONTENT_HASH", False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncation_at_every_boundary_is_refused(fmt):
    program = compiled(CLAMP)
    data = write_blob(program, fmt)
    cuts = set(range(0, 80)) | set(range(0, len(data), 97)) | {len(data) - 1}
    if fmt == "elf":
        image = elf.read_elf32(data, "x")
        for sec in image.sections:
            cuts |= {sec.header.sh_offset, sec.header.sh_offset + sec.header.sh_size - 1,
                     sec.header.sh_offset + sec.header.sh_size}
        cuts |= {image.header.e_shoff + i * 40 for i in range(image.header.e_shnum)}
    else:
        from vpuc.blob.fb_decode import Decoder
        from vpuc.blob.fb_schema import load_schema
        decoder = Decoder(load_schema(), data, "x")
        decoder.root()
        cuts |= {key[-1] for key in decoder._cache} | {key[-1] + 4 for key in decoder._cache}
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        assert refused_or_consistent(data[:cut], program) == "refused", cut


@pytest.mark.parametrize("fmt", FORMATS)
def test_byte_flips_are_caught_by_the_content_hash(fmt):
    program = compiled(DWCONV)
    data = write_blob(program, fmt)
    rng = random.Random(4)
    # A flip the hash does not see (padding, unused header fields) must read the same program.
    outcomes = [refused_or_consistent(_flip(data, rng), program) for _ in range(1000)]
    assert outcomes.count("refused") > 500


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("path", [CLAMP, DWCONV], ids=["clamp", "dwconv_pool"])
def test_seeded_mutations_behind_the_hash_never_crash(fmt, path, no_hash_check):
    data = write_blob(compiled(path), fmt)
    rng = random.Random(fmt + path.stem)
    outcomes = [refused_or_consistent(_mutate(data, rng)) for _ in range(5000)]
    assert "refused" in outcomes


@pytest.mark.parametrize("fmt", FORMATS)
def test_hypothesis_mutations_never_crash(fmt, no_hash_check):
    data = write_blob(compiled(CLAMP), fmt)

    @settings(max_examples=500, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)),
                    min_size=1, max_size=6))
    def check(edits):
        blob = bytearray(data)
        for position, value in edits:
            blob[position] = value
        refused_or_consistent(bytes(blob))

    check()


def test_content_mutations_are_refused_or_consistent():
    """Out-of-range indices, codes and counts with a valid hash: the rebuild checks."""
    content = flatten(compiled(DWCONV))
    rng = random.Random(7)
    leaves = list(_int_leaves(content, ()))
    tried = 0
    for _ in range(600):
        path = rng.choice(leaves)
        value = rng.choice([-2, -1, 0, 1, 2, 3, 7, 63, 64, 255, 256, 1 << 31, 1 << 40])
        mutated = _replace(content, path, value)
        try:
            data = writer_fb.write_fb(mutated) if rng.random() < 0.5 \
                else writer_elf.write_elf(mutated)
        except Exception:                 # noqa: BLE001 - the writer takes valid content only;
            continue                      # here the value did not even fit its field
        tried += 1
        refused_or_consistent(data)
    assert tried > 300


@pytest.mark.parametrize("fmt,module", [("fb", writer_fb), ("elf", writer_elf)])
@pytest.mark.parametrize("version,message", [
    ((2, 0), "blob format 2.0 is not supported by this reader (1.x)"),
    ((1, 7), "blob format 1.7 is not supported by this reader (1.x)"),
    ((0, 9), "blob format 0.9 is not supported by this reader (1.x)"),
])
def test_other_versions_are_refused(fmt, module, version, message, monkeypatch):
    monkeypatch.setattr(module, "FORMAT_VERSION", version)
    data = write_blob(compiled(CLAMP), fmt)
    with pytest.raises(VpucError) as info:
        read_blob(data, "new.blob")
    assert info.value.diagnostics[0].message.startswith(message)


def test_wrong_identifier_and_machine_are_refused():
    program = compiled(CLAMP)
    data = bytearray(write_blob(program, "fb"))
    data[4:8] = b"VPUX"
    with pytest.raises(VpucError, match="not a vpuc blob"):
        read_blob(bytes(data), "x")
    data = bytearray(write_blob(program, "elf"))
    data[18:20] = (0x7ACC).to_bytes(2, "little")        # a kernel object, not a blob
    with pytest.raises(VpucError, match="e_machine is 0x7acc, expected 0x7acd"):
        read_blob(bytes(data), "x")
    for junk in (b"", b"\x7fEL", b"hello world, not a blob", bytes(64)):
        with pytest.raises(VpucError):
            read_blob(junk, "junk")


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_architecture_is_refused(fmt):
    program = compiled(CLAMP)
    unknown = dataclasses.replace(program, arch=dataclasses.replace(program.arch, name="NPU99XX"))
    with pytest.raises(VpucError, match="compiled for architecture 'NPU99XX', which this vpuc "
                                        "does not know"):
        read_blob(write_blob(unknown, fmt), "x")
    bases = dict(program.arch.window_bases, WIN_F=0x2F000000)
    moved = dataclasses.replace(program, arch=dataclasses.replace(program.arch,
                                                                  window_bases=bases))
    with pytest.raises(VpucError, match="win_f_base = 0x2f000000; this vpuc's NPU37XX has "
                                        "0x1f000000"):
        read_blob(write_blob(moved, fmt), "x")
    with pytest.raises(VpucError, match="blob is compiled for NPU37XX; expected NPU40XX"):
        read_blob(write_blob(program, fmt), "x", arch="NPU40XX")


def _flip(data: bytes, rng: random.Random) -> bytes:
    blob = bytearray(data)
    position = rng.randrange(len(blob))
    blob[position] ^= 1 << rng.randrange(8)
    return bytes(blob)


_WORDS = (0, 1, 2, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 8, 64)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """A byte flip, a random byte, an interesting 32-bit word, a cut or a splice."""
    blob = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        kind = rng.random()
        position = rng.randrange(len(blob))
        if kind < 0.35:
            blob[position] ^= 1 << rng.randrange(8)
        elif kind < 0.55:
            blob[position] = rng.randrange(256)
        elif kind < 0.85:
            position -= position % 4
            blob[position:position + 4] = rng.choice(_WORDS).to_bytes(4, "little")
        elif kind < 0.93:
            del blob[position:position + rng.randrange(1, 16)]
        else:
            blob[position:position] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        if not blob:
            break
    return bytes(blob)


def _int_leaves(node, path):
    if isinstance(node, bool):
        return
    if isinstance(node, int):
        yield path
    elif isinstance(node, tuple):
        for i, child in enumerate(node):
            yield from _int_leaves(child, path + (i,))


def _replace(node, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    items = list(node)
    items[head] = _replace(items[head], rest, value)
    return type(node)(*items) if hasattr(node, "_fields") else tuple(items)


def test_elf_records_of_an_older_minor_read_with_zero_for_new_fields():
    """A record that grew at its end (a minor bump) still reads from an older blob."""
    from vpuc.blob import elf_records as R
    from vpuc.blob.reader_elf import ElfReader
    reader = ElfReader(write_blob(compiled(CLAMP), "elf"), "x.elf")
    full = R.BarrierRecord.pack_values(7, 3, 2, 0, 5, 6)
    short = full[:16]                              # as if consumer_count were new
    header = elf.Elf32_Shdr.record._make([0] * 9 + [16])
    section = elf.ElfSection(9, R.BARRIERS, header, short * 2)
    records = reader.unpack(section, R.BarrierRecord)
    assert [(r.id, r.producer_count, r.consumer_count) for r in records] == [(3, 5, 0)] * 2
    with pytest.raises(VpucError, match="record size 24"):
        reader.unpack(elf.ElfSection(9, R.BARRIERS, header._replace(sh_entsize=24), full),
                      R.BarrierRecord)
