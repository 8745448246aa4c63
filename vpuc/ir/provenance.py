"""Provenance: the ONNX node(s) each graph op and each lowered task came from.

Two records, both printed in VIR and parsed back (docs/vir.md, "Provenance"):

- a graph op names the ONNX node(s) the importer built it from::

      %conv1 = Convolution{...}(%x, %w) : 1x64x112x112xf16 NCHW from "conv1" Conv

  (several when the importer merged nodes: a BatchNormalization folded into its Conv,
  a decomposed layer norm recognized back into one op);
- a lowered program has one ``layer`` line per segment the lowering emitted::

      layer "conv1" from "conv1" Conv, "relu1" Relu

  Its tasks are the ones whose label is the key or starts with ``KEY.`` (the lowering
  prefixes every task of a segment with it); the empty key ``""`` (a program of one
  fused segment, whose tasks carry no prefix) covers every task no longer key matches.

ONNX names are free text; VIR strings hold no ``"`` or newline, so the importer spells
those as ``'`` and a space (``spelled``).  The layer table travels in the blob
(``Blob.layer_sources``, ELF ``.vpuc.layerSources``; docs/blob-format.md) and names the
layers of ``vpuc run --report`` / ``--layer-report`` / ``--trace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from vpuc.diagnostics import UNKNOWN_LOC, Loc


@dataclass(frozen=True)
class OnnxNode:
    name: str
    op_type: str

    def __str__(self) -> str:
        return f'"{self.name}" {self.op_type}'


@dataclass
class LayerSource:
    """The ONNX nodes the tasks labelled ``key`` / ``key.*`` were lowered from."""

    key: str
    nodes: tuple[OnnxNode, ...]
    loc: Loc = field(default=UNKNOWN_LOC, compare=False, repr=False)

    @property
    def names(self) -> str:
        """The nodes' names, ``;``-joined (a report cell)."""
        return ";".join(n.name for n in self.nodes)

    @property
    def op_types(self) -> str:
        return ";".join(n.op_type for n in self.nodes)


def spelled(name: str) -> str:
    """An ONNX name as a VIR string can hold it."""
    return name.replace('"', "'").replace("\n", " ").replace("\r", " ")


def origin_text(nodes: Iterable[OnnxNode]) -> str:
    """``from "n1" Op1, "n2" Op2`` (empty for no nodes)."""
    nodes = list(nodes)
    return "from " + ", ".join(str(n) for n in nodes) if nodes else ""


def print_layer(layer: LayerSource) -> str:
    return f'layer "{layer.key}" {origin_text(layer.nodes)}'


def merged(groups: Iterable[Iterable[OnnxNode]]) -> tuple[OnnxNode, ...]:
    """The nodes of several ops, each once, in first-seen order."""
    return tuple(dict.fromkeys(n for group in groups for n in group))


class LayerIndex:
    """Which layer a task (or a DPU variant, ``task.variant``) belongs to, by its label."""

    def __init__(self, layers: Iterable[LayerSource]) -> None:
        self.by_key = {layer.key: layer for layer in layers}

    def __bool__(self) -> bool:
        return bool(self.by_key)

    def layer(self, label: str) -> LayerSource | None:
        """The layer whose key is the longest dotted prefix of ``label`` (else ``""``'s)."""
        return by_dotted_prefix(self.by_key, label)


def by_dotted_prefix(table: dict, label: str):
    """The value of ``table`` under the longest dotted prefix of ``label`` (``a.b.c``,
    ``a.b``, ``a``), else under ``""``; ``None`` when neither is there."""
    head = label
    while True:
        found = table.get(head)
        if found is not None:
            return found
        cut = head.rfind(".")
        if cut < 0:
            return table.get("")
        head = head[:cut]
