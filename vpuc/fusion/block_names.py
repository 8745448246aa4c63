"""Names of one graph block's lowered program inside a module of several blocks.

``lower-graph`` names a block's buffers, views, barriers and task labels after
its values and segments (``%x.t0s0``, ``%conv.finished``, ``load0.x``), so two
blocks, or a block and hand-written tasks, would collide.  A ``Namespace``
puts every name of the block's program under ``GRAPH.`` (``%main.x.t0s0``,
``main.load0.x``, ``layer "main.conv"``) except the block's interface tensors
(its Parameters and Results), which keep their module-level names.  Generated
kernels are already named ``@GRAPH.sgN`` and library kernels are shared, so
``@`` names stay.

It rewrites the program text before it is parsed: the VIR grammar marks every
value (``%``), label (``NAME:`` at the start of a statement) and layer key, so
one scan over the tokens renames them all; strings and comments are skipped.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r'^(?P<layer>layer[ \t]+)"(?P<key>[^"\n]*)"'          # a layer key: renamed
    r'|"[^"\n]*"|//[^\n]*'                                # other strings, comments: kept
    r'|%(?P<value>[A-Za-z0-9_][A-Za-z0-9_.$]*)'           # a value
    r'|^(?P<indent>[ \t]*)(?P<label>[A-Za-z_][A-Za-z0-9_.]*):', re.MULTILINE)


class Namespace:
    def __init__(self, prefix: str, keep: set[str]) -> None:
        """``prefix``: a graph name (sanitized); ``keep``: the names left as they are."""
        self.prefix = prefix
        self.keep = keep

    def name(self, name: str) -> str:
        return name if name in self.keep else f"{self.prefix}.{name}"

    def key(self, key: str) -> str:
        """A layer key: the tasks ``KEY.*`` become ``PREFIX.KEY.*`` (the empty key, a
        program of one unprefixed segment, becomes the prefix)."""
        return f"{self.prefix}.{key}" if key else self.prefix

    def text(self, text: str) -> str:
        return _TOKEN.sub(self._replace, text)

    def _replace(self, match: re.Match) -> str:
        if match.group("layer") is not None:
            return f'{match.group("layer")}"{self.key(match.group("key"))}"'
        if match.group("value") is not None:
            return "%" + self.name(match.group("value"))
        if match.group("label") is not None:
            return f'{match.group("indent")}{self.prefix}.{match.group("label")}:'
        return match.group(0)
