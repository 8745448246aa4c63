"""The layer table in blobs: ``Module.layers`` <-> ``LayerSourceRec`` records <-> both formats.

FlatBuffer: ``Blob.layer_sources: [LayerSource]`` (schema 1.2), each ``{key, nodes:
[OnnxNode {name, op_type}]}``, absent when the program has none.  ELF: the section
``.vpuc.layerSources`` (type ``SHT_VPUC_LAYER_SOURCES``), a u32 count of layers, then per
layer the key's string offset, its node count and per node the name's and op type's
string offsets (in ``.vpuc.strtab``), all little-endian u32; docs/blob-format.md.
Reading checks what the VIR parser would (no duplicate key, names a VIR string can hold,
op types that are names), with errors naming the layer.
"""

from __future__ import annotations

import re
import struct

from vpuc.blob.content import LayerSourceRec, OnnxNodeRec
from vpuc.ir.module import Module
from vpuc.ir.provenance import LayerSource, OnnxNode

_OP_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_U32 = struct.Struct("<I")


def records(module: Module) -> tuple[LayerSourceRec, ...]:
    return tuple(LayerSourceRec(layer.key, tuple(OnnxNodeRec(n.name, n.op_type)
                                                for n in layer.nodes))
                 for layer in module.layers)


def restore(recs: tuple[LayerSourceRec, ...], fail) -> list[LayerSource]:
    """The module's layers; ``fail(where, message)`` makes the located error."""
    layers: list[LayerSource] = []
    seen: set[str] = set()
    for i, rec in enumerate(recs):
        where = f"layer source #{i}"
        if not _text(rec.key) or rec.key in seen:
            raise fail(where, f"key {rec.key!r} is not a string VIR can hold, or repeats")
        seen.add(rec.key)
        if not rec.nodes:
            raise fail(where, f"layer {rec.key!r} names no ONNX node")
        for j, node in enumerate(rec.nodes):
            if not _text(node.name) or not _OP_TYPE.match(node.op_type or ""):
                raise fail(f"{where} node #{j}", f"name {node.name!r} / op type "
                           f"{node.op_type!r} is not valid")
        layers.append(LayerSource(rec.key, tuple(OnnxNode(n.name, n.op_type)
                                                for n in rec.nodes)))
    return layers


def _text(value) -> bool:
    return isinstance(value, str) and not any(c in value for c in '"\n\r')


# ---------------------------------------------------------------- FlatBuffer

def write_fb(writer, recs: tuple[LayerSourceRec, ...]) -> int | None:
    """``Blob.layer_sources`` through the generated builders (None: no table)."""
    if not recs:
        return None
    from schema.vpu_blob import LayerSource as FbLayer, OnnxNode as FbNode
    layers = []
    for rec in recs:
        nodes = writer.offsets([writer.table(FbNode, name=writer.string(n.name),
                                             op_type=writer.string(n.op_type))
                                for n in rec.nodes])
        layers.append(writer.table(FbLayer, key=writer.string(rec.key), nodes=nodes))
    return writer.offsets(layers)


def read_fb(root) -> tuple[LayerSourceRec, ...]:
    return tuple(LayerSourceRec(layer.key or "", tuple(OnnxNodeRec(n.name or "", n.op_type or "")
                                                       for n in layer.nodes or ()))
                 for layer in getattr(root, "layer_sources", None) or ())


# ---------------------------------------------------------------- ELF

def encode_elf(recs: tuple[LayerSourceRec, ...], string) -> bytes:
    """The section's bytes; ``string(text)`` is a string's ``.vpuc.strtab`` offset."""
    out = [_U32.pack(len(recs))]
    for rec in recs:
        out += [_U32.pack(string(rec.key)), _U32.pack(len(rec.nodes))]
        for n in rec.nodes:
            out += [_U32.pack(string(n.name)), _U32.pack(string(n.op_type))]
    return b"".join(out)


def decode_elf(data: bytes, string, fail) -> tuple[LayerSourceRec, ...]:
    """``string(strtab_offset, at)`` reads ``.vpuc.strtab`` for the field at section offset
    ``at``; ``fail(at, message)`` makes the error at a section offset."""
    pos = 0

    def u32(where: str) -> int:
        nonlocal pos
        if pos + 4 > len(data):
            raise fail(pos, f"{where} runs past the section's {len(data)} bytes")
        value = _U32.unpack_from(data, pos)[0]
        pos += 4
        return value

    recs = []
    for i in range(u32("the layer count")):
        where = f"layer source #{i}"
        at = pos
        key = string(u32(where), at)
        nodes = []
        for j in range(u32(f"{where}'s node count")):
            at = pos
            name = string(u32(f"{where} node #{j}"), at)
            op_type = string(u32(f"{where} node #{j}"), at + 4)
            nodes.append(OnnxNodeRec(name, op_type))
        recs.append(LayerSourceRec(key, tuple(nodes)))
    if pos != len(data):
        raise fail(pos, f"{len(data) - pos} bytes after the last layer")
    return tuple(recs)
