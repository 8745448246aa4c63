"""The plainest declarations of machine-written VIR, read without lark.

A lowered program (``lower-graph``'s text) is mostly one-line declarations:
``cmx %v : 1x16x8x8xf16 NCHW tile 0``, ``view %v = %b[0, 0:4, 0:8, 0:8]``,
``barrier %b``: 45% of the encoder layer's tokens, and lark spends ~23 us a
token.  ``take_declarations`` reads each line of exactly those shapes (static
dims, a named order, plain slices, no comment) with one regular expression and
builds its object through the parser's own callbacks (so every check and
location is the same), and blanks the line, so lark parses the rest with the
same line numbers.  A line of any other shape is left to lark.

Only for text vpuc writes (``parse_text(..., machine_written=True)``): in a
hand-written file such a line could sit where lark rejects it (inside a task
list), and this reader would not.  ``merge_declarations`` puts the objects back among lark's by line, the order a
whole parse gives.
"""

from __future__ import annotations

import re

from lark import Token

_NAME = r"%[A-Za-z0-9_][A-Za-z0-9_.$]*"
_ELEM = r"(?:bf16|f16|f32|f64|u8|i8|u16|i16|u32|i32|i64)"
_LINE = re.compile(
    rf"^(?:(?P<kind>cmx|ddr|input|output) (?P<buf>{_NAME}) : (?P<shaped>(?:\d+x)*{_ELEM})"
    rf"(?: (?P<order>[A-Z]+))?(?: tile (?P<tile>\d+))?"
    rf"|view (?P<view>{_NAME}) = (?P<base>{_NAME})\[(?P<slices>\d+(?::\d+){{0,2}}(?:, \d+(?::\d+){{0,2}})*)\]"
    rf"|barrier (?P<barrier>{_NAME}))$", re.MULTILINE)
_SLICE = re.compile(r"\d+")


def take_declarations(text: str, transformer) -> tuple[str, list, list, list]:
    """(``text`` with the lines read here blanked, their buffers, views, barriers)."""
    buffers, views, barriers = [], [], []
    line_starts = _LineIndex(text)

    def read(match: re.Match) -> str:
        start = match.start()
        line = line_starts.line(start)

        def token(kind: str, group: str) -> Token:
            at = match.start(group)
            return Token(kind, match.group(group), at, line, at - start + 1)

        if match.group("kind") is not None:
            order = None
            if match.group("order") is not None:
                order = transformer.dims_order(token("ORDER_NAME", "order"))
            tile = token("INT", "tile") if match.group("tile") is not None else None
            buffers.append(transformer.buffer_decl(token("BUFKIND", "kind"), token("VALUE", "buf"),
                                                   token("SHAPED", "shaped"), order, tile, None,
                                                   None))
        elif match.group("view") is not None:
            slices = []
            base = match.start("slices")
            for part in match.group("slices").split(", "):
                numbers = [Token("INT", m.group(0), base + m.start(), line,
                                 base + m.start() - start + 1)
                           for m in _SLICE.finditer(part)]
                base += len(part) + 2
                if len(numbers) == 1:
                    slices.append(transformer.slice_index(*numbers))
                elif len(numbers) == 2:
                    slices.append(transformer.slice_range(*numbers))
                else:
                    slices.append(transformer.slice_step(*numbers))
            views.append(transformer.view_decl(Token("VIEW", "view", start, line, 1),
                                               token("VALUE", "view"), token("VALUE", "base"),
                                               *slices))
        else:
            barriers.append(transformer.barrier_decl(Token("BARRIER", "barrier", start, line, 1),
                                                     token("VALUE", "barrier"), None))
        return ""

    return _LINE.sub(read, text), buffers, views, barriers


def merge_declarations(parsed: list, taken: list) -> list:
    """Two lists of declarations, each in line order, as one in line order."""
    if not taken:
        return parsed
    return sorted(parsed + taken, key=lambda item: item.loc.line)


class _LineIndex:
    """Line numbers of offsets visited in increasing order (one pass over the text)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset = 0
        self.number = 1

    def line(self, offset: int) -> int:
        self.number += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.number
