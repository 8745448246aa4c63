"""Turning lark's syntax errors into messages people understand.

lark reports the terminals it would have accepted by their grammar names
(``VALUE``, ``LPAR``).  We map each back to how it is written (``'('``,
``a value such as %x``), list what was expected at that point (from the
parser's ``accepts``), and recognise the common slips by example, the way
lark's ``match_examples`` does, so the message can say what most likely went
wrong.  An example matches when it fails in the same LR state on the same
kind of token (lark's own matcher also compares the parser's stack depth, which
differs with the number of declarations above the slip, so it misses most).
Slips at the character level (';', '#') and malformed tensor types are
recognised from the text itself.
"""

from __future__ import annotations

import re

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
    "DIRECTION": "a direction (in, out or inout)",
    "FLOAT": "a number",
    "INT": "an integer",
    "STRING": 'a string in double quotes',
    "DYN_DIM": "a dynamic dim such as ?<=128",
    "$END": "the end of the file",
}

# Common slips, recognised by the parser state they leave it in.  Each example
# is a whole (wrong) program that fails at the same point as the slip would.
_HEADER = "module @m\n"
COMMON_SLIPS = {
    "a VIR file starts with a module header such as 'module @net arch NPU37XX'": [
        "input %x : 16xf16",
        "const %c : f16 = splat 0",
        "kernel @k() from library \"copy\"",
        "runtime @r stacks(1)",
        "view %v = %x[0]",
        "barrier %b",
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
    "an argument's direction follows its colon, as in 'x: in memref<*xf16>'": [
        _HEADER + "kernel @k(in x: memref<*xf16>) from library \"relu\"",
        _HEADER + "kernel @k(x: memref<*xf16>, out y: memref<*xf16>) from library \"relu\"",
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
    "waits(...) comes before updates(...), as in waits(%b0) updates(%b1)": [
        _HEADER + "tasks DMA { dma %a -> %b updates(%b1) waits(%b0) }",
        _HEADER + "tasks ACT_SHAVE { sw @k on tile 0 inputs() outputs() updates(%b) waits(%a) { run() } }",
        _HEADER + "tasks DPU { dpu add on tile 0 in(%a, %b) out(%c) updates(%b) waits(%a) { } }",
        _HEADER + "tasks DPU { dpu add on tile 0 in(%a, %b) out(%c) { variant start(0, 0, 0) "
                  "end(0, 0, 0) updates(%b) waits(%a) } }",
    ],
    "a dpu task's clauses come in this order: in(...) weights(...) bias(...) out(...) "
    "kernel/stride/pad/dilation(...) post ... waits(...) updates(...)": [
        _HEADER + "tasks DPU { dpu conv on tile 0 in(%x) out(%y) waits(%b) post relu { } }",
        _HEADER + "tasks DPU { dpu conv on tile 0 in(%x) out(%y) updates(%b) post relu { } }",
        _HEADER + "tasks DPU { dpu conv on tile 0 in(%x) out(%y) post relu kernel(1, 1) { } }",
        _HEADER + "tasks DPU { dpu conv on tile 0 in(%x) out(%y) weights(%w) { } }",
        _HEADER + "tasks DPU { dpu conv on tile 0 in(%x) out(%y) bias(%w) { } }",
        _HEADER + "tasks DPU { dpu conv on tile 0 in(%x) bias(%b) weights(%w) out(%y) { } }",
    ],
    "a variant is written 'variant start(x, y, z) end(x, y, z)', inclusive output coordinates": [
        _HEADER + "tasks DPU { dpu add on tile 0 in(%a, %b) out(%c) { variant start(0, 0) end(1, 1) } }",
        _HEADER + "tasks DPU { dpu add on tile 0 in(%a, %b) out(%c) { variant start(0, 0, 0) end(1, 1) } }",
        _HEADER + "tasks DPU { dpu add on tile 0 in(%a, %b) out(%c) { variant (0, 0, 0) (1, 1, 1) } }",
        _HEADER + "tasks DPU { dpu add on tile 0 in(%a, %b) out(%c) { variant start(0, 0, 0) (1, 1, 1) } }",
    ],
    "a sw task's region ends with run(...), passing the kernel's arguments in contract order": [
        _HEADER + "tasks ACT_SHAVE { sw @k on tile 0 inputs() outputs() { } }",
        _HEADER + "tasks ACT_SHAVE { sw @k on tile 0 inputs() outputs() { %c = const 1 : i32 } }",
    ],
    "every graph op but Result defines a value, as in '%y = Relu(%x)'": [
        _HEADER + "graph @g { Relu(%x) }",
        _HEADER + "graph @g { %x = Parameter() : 4xf16\n Relu(%x) }",
    ],
    "a graph op has parentheses even without operands, as in '%x = Parameter() : 1x16xf16'": [
        _HEADER + "graph @g { %x = Parameter : 4xf16 }",
        _HEADER + "graph @g { %x = Relu %y }",
    ],
    "attributes are written {name = value, ...} between the op name and its operands, "
    "as in Clamp{min = 0, max = 6}(%x)": [
        _HEADER + "graph @g { %y = Clamp{min 0}(%x) }",
        _HEADER + "graph @g { %y = Clamp(%x){min = 0} }",
        _HEADER + "graph @g { %y = Clamp{min: 0}(%x) }",
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


# Characters that start no token, and what writing them most likely meant.
CHARACTER_SLIPS = {
    ";": "VIR statements are not terminated by ';'",
    "#": "comments start with '//'",
    '"': 'a string ends with a closing " on the same line',
}


def _describe_token(token: lark.Token) -> str:
    if token.type == "$END":
        return "end of file"
    return f"'{token}'"


_slip_states: list[tuple[int, str, frozenset, str]] | None = None


def _failure(parse, text: str):
    try:
        parse(text)
    except lark.exceptions.UnexpectedToken as exc:
        return exc
    except lark.exceptions.UnexpectedInput:
        return None
    return None


def _slip_hint(exc: lark.exceptions.UnexpectedToken, parser: lark.Lark) -> str | None:
    """The COMMON_SLIPS label whose example fails in the same state on the same kind of token."""
    global _slip_states
    if _slip_states is None:
        # The examples are parsed once, by this very parser: state numbers differ
        # between two lark instances of the same grammar.
        _slip_states = []
        for label, examples in COMMON_SLIPS.items():
            for example in examples:
                failure = _failure(parser.parse, example)
                if failure is not None:
                    _slip_states.append((failure.state.position, failure.token.type,
                                         frozenset(failure.accepts or ()), label))
    position = exc.state.position if exc.state is not None else None
    accepts = frozenset(exc.accepts or ())
    for state, token_type, example_accepts, label in _slip_states:
        if state == position and token_type == exc.token.type and example_accepts == accepts:
            return label
    return None


_ELEM_NAMES = ("bf16", "f16", "f32", "f64", "u8", "i8", "u16", "i16", "u32", "i32", "i64")
_TYPE_WORD = re.compile(r"[0-9A-Za-z_?<=]+")


def _type_hint(text: str, line: int, column: int) -> str | None:
    """Say what is wrong with a malformed tensor type such as 1x?x16xf16 or 16xf17."""
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return None
    word = _TYPE_WORD.match(lines[line - 1], column - 1)
    if word is None:
        return None
    *dims, elem = word.group().split("x")
    for dim in dims:
        if dim.startswith("?") and not re.fullmatch(r"\?<=\d+", dim):
            return f"a dynamic dim needs an upper bound: write ?<=N (as in 1x?<=128x16xf16), not {dim}"
        if not dim.isdigit() and not dim.startswith("?"):
            return None
    if dims and elem not in _ELEM_NAMES:
        return f"unknown element type '{elem}'; expected one of {', '.join(_ELEM_NAMES)}"
    return None


def syntax_error(exc: lark.exceptions.UnexpectedInput, text: str, file: str,
                 parser: lark.Lark) -> VpucError:
    """Build the located, human-worded error for a lark syntax error."""
    hint = None
    line = getattr(exc, "line", 0) or 0
    column = getattr(exc, "column", 0) or 0
    try:
        if isinstance(exc, lark.exceptions.UnexpectedCharacters):
            hint = CHARACTER_SLIPS.get(exc.char)
        elif isinstance(exc, lark.exceptions.UnexpectedToken):
            if "SHAPED" in (exc.accepts or exc.expected):
                hint = _type_hint(text, line, column)
            hint = hint or _slip_hint(exc, parser)
    except Exception:  # a hint is optional; never let it hide the error itself
        hint = None
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
