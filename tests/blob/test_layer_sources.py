"""The layer table in blobs (format 1.2): both formats carry it, the readers restore it,
a blob without one reads as before, and a damaged one is a located error."""

from __future__ import annotations

import pytest

from tests.sim.test_node_report import small_cnn
from vpuc import api
from vpuc.blob import read_blob, write_blob
from vpuc.blob.content import LayerSourceRec, OnnxNodeRec, content_hash
from vpuc.blob.flatten import flatten
from vpuc.blob.layer_sources import decode_elf, encode_elf
from vpuc.blob.writer_elf import write_elf
from vpuc.blob.writer_fb import write_fb
from vpuc.diagnostics import VpucError


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return api.compile(small_cnn(tmp_path_factory.mktemp("m") / "m.onnx"))


@pytest.mark.parametrize("fmt", ["fb", "elf"])
def test_both_formats_restore_the_layer_table(program, fmt):
    assert program.module.layers
    back = read_blob(write_blob(program, fmt))
    assert back.module.layers == program.module.layers
    assert [(l.key, l.nodes) for l in back.module.layers] == \
           [(l.key, l.nodes) for l in program.module.layers]


def test_both_formats_hold_the_same_content(program):
    fb, elf = write_blob(program, "fb"), write_blob(program, "elf")
    from vpuc.blob.reader import decode_blob
    assert decode_blob(fb, "a").content == decode_blob(elf, "b").content
    assert decode_blob(fb, "a").content.layer_sources


def test_a_program_without_a_table_hashes_as_before(program):
    content = flatten(program)
    assert content_hash(content) != content_hash(content._replace(layer_sources=()))
    bare = content._replace(layer_sources=())
    # 1.1's records: the same tuple without the table
    import hashlib
    import json
    from vpuc.blob.content import _digest_bytes
    old = hashlib.sha256(json.dumps(tuple(bare)[:-1], default=_digest_bytes,
                                    separators=(",", ":")).encode()).digest()
    assert content_hash(bare) == old


def _fail(at, message):
    return VpucError(f"+{at:#x}: {message}")


def test_elf_section_round_trip_and_truncation():
    strings = ["", "conv1", "Conv", "bn1", "BatchNormalization"]
    recs = (LayerSourceRec("conv1", (OnnxNodeRec("conv1", "Conv"),
                                     OnnxNodeRec("bn1", "BatchNormalization"))),)
    data = encode_elf(recs, strings.index)
    assert decode_elf(data, lambda off, at: strings[off], _fail) == recs
    with pytest.raises(VpucError, match=r"\+0x14: layer source #0 node #1 runs past"):
        decode_elf(data[:-6], lambda off, at: strings[off], _fail)
    with pytest.raises(VpucError, match="4 bytes after the last layer"):
        decode_elf(data + bytes(4), lambda off, at: strings[off], _fail)


@pytest.mark.parametrize("writer", [write_fb, write_elf])
def test_a_repeated_key_is_refused_with_its_place(program, writer):
    content = flatten(program)
    twice = content.layer_sources[:1] * 2
    bad = content._replace(layer_sources=twice)
    with pytest.raises(VpucError) as info:
        read_blob(writer(bad), "bad.blob")
    assert "layer source #1" in str(info.value.diagnostics[0].loc) + \
        info.value.diagnostics[0].message
