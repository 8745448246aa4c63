"""Turning lark's syntax errors into messages people understand.

lark reports the terminals it would have accepted by their grammar names
(``VALUE``, ``LPAR``).  We map each back to how it is written (``'('``,
``a value such as %x``), list what was expected at that point (from the
parser's ``accepts``), and recognise the common slips with ``match_examples``
so the message can say what most likely went wrong.
"""

from __future__ import annotations

import lark
from lark.lexer import PatternStr

from vpuc.diagnostics import Diagnostic, Loc, Severity, VpucError

# How the regex terminals of the grammar are spelled for humans.
TERMINAL_TEXT = {
    "SYMBOL": "a symbol such as @name",
    "VALUE": "a value such as %x",
    "LABEL": "a task label such as load0:",
    "NAME": "a name",
    "ORDER_NAME": "a dims order such as NHWC",
    "SHAPED": "a type such as 1x16x32x32xf16 or f16",
    "MEMREF": "a memref type such as memref<*xf16>",
    "FLOAT": "a number",
    "INT": "an integer",
    "STRING": 'a string in double quotes',
    "$END": "the end of the file",
}

# Common slips, recognised by the parser state they leave it in.  Each example
# is a whole (wrong) program that fails at the same point as the slip would.
_HEADER = "module @m\n"
COMMON_SLIPS = {
    "a VIR file starts with a module header such as 'module @net arch NPU37XX'": [
        "input %x : 16xf16",
        "kernel @k() from library \"copy\"",
        "tasks DMA { }",
    ],
    "a value name needs its '%' sigil, as in %x": [
        _HEADER + "input x : 16xf16",
        _HEADER + "barrier b0",
        _HEADER + "tasks DMA { dma a -> %b }",
        _HEADER + "tasks DMA { dma %a -> b }",
    ],
    "a kernel or module name needs its '@' sigil, as in @clamp": [
        "module m",
        _HEADER + "kernel clamp() from library \"clamp\"",
    ],
    "barrier lists are written in parentheses, as in waits(%b0, %b1)": [
        _HEADER + "tasks DMA { dma %a -> %b waits %b0 }",
        _HEADER + "tasks DMA { dma %a -> %b updates %b0 }",
    ],
    "a kernel declaration says where its code comes from, as in: from library \"clamp\"": [
        _HEADER + "kernel @k(x: f16) library \"clamp\"",
        _HEADER + "kernel @k(x: f16)\ninput %x : 16xf16",
    ],
    "a DMA copies from a source to a destination, written '%src -> %dst'": [
        _HEADER + "tasks DMA { dma %a %b }",
        _HEADER + "tasks DMA { dma %a, %b }",
    ],
    "a task runs 'on tile N'": [
        _HEADER + "tasks ACT_SHAVE { sw @k on 0 inputs() outputs() { run() } }",
        _HEADER + "tasks DPU { dpu conv on 0 in(%x) out(%y) { } }",
    ],
    "VIR statements are not terminated by ';'": [
        _HEADER + "input %x : 16xf16;",
        _HEADER + "barrier %b0;",
    ],
    "a buffer declaration needs a type after ':', as in input %x : 1x16xf16 NHWC": [
        _HEADER + "input %x",
        _HEADER + "input %x 16xf16",
    ],
}


def _terminal_texts(parser: lark.Lark, name: str) -> list[str]:
    if name in TERMINAL_TEXT:
        return [TERMINAL_TEXT[name]]
    try:
        term = parser.get_terminal(name)
    except KeyError:
        return [name]
    if isinstance(term.pattern, PatternStr):
        return [f"'{term.pattern.value}'"]
    # A keyword alternation such as (?:dma|dpu): show each of its words.
    raw = term.pattern.value
    if raw.startswith("(?:") and raw.endswith(")"):
        words = raw[3:-1].split("|")
        if all(w.replace("_", "").isalnum() for w in words):
            return [f"'{w}'" for w in words]
    return [name.lower()]


def expected_text(parser: lark.Lark, names) -> str:
    texts = sorted({text for n in names for text in _terminal_texts(parser, n)})
    if not texts:
        return "nothing more"
    if len(texts) == 1:
        return texts[0]
    return "one of " + ", ".join(texts[:-1]) + " or " + texts[-1]


def _describe_token(token: lark.Token) -> str:
    if token.type == "$END":
        return "the end of the file"
    return f"'{token}'"


def syntax_error(exc: lark.exceptions.UnexpectedInput, text: str, file: str,
                 parser: lark.Lark) -> VpucError:
    """Build the located, human-worded error for a lark syntax error."""
    hint = None
    try:
        hint = exc.match_examples(parser.parse, COMMON_SLIPS, use_accepts=True)
    except Exception:  # an example may trip the transformer; a hint is optional
        hint = None
    line = getattr(exc, "line", 0) or 0
    column = getattr(exc, "column", 0) or 0
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        if exc.token.type == "$END":
            line, column = _end_position(text)
        names = exc.accepts or exc.expected
        message = (f"unexpected {_describe_token(exc.token)}; expected "
                   f"{expected_text(parser, names)}")
    elif isinstance(exc, lark.exceptions.UnexpectedCharacters):
        names = exc.allowed or ()
        message = (f"unexpected character '{exc.char}'; expected "
                   f"{expected_text(parser, names)}")
    else:  # UnexpectedEOF
        line, column = _end_position(text)
        message = f"unexpected end of file; expected {expected_text(parser, exc.expected)}"
    loc = Loc(file, max(line, 1), max(column, 1))
    notes = ((None, f"hint: {hint}"),) if hint else ()
    return VpucError([Diagnostic(Severity.ERROR, loc, message, notes)])


def _end_position(text: str) -> tuple[int, int]:
    lines = text.rstrip("\n").split("\n")
    return len(lines), len(lines[-1]) + 1
