"""The FlatBuffer schema as data, and a verifying decoder driven by it.

The Python flatbuffers runtime has no verifier: its accessors read wherever an
offset points (a negative offset silently wraps to the end of the buffer).  So
the reader does not use them.  Instead ``schema/vpu_blob.fbs`` itself is parsed
(the subset of the grammar it uses) into table and struct layouts, and
``vpuc.blob.fb_decode.Decoder`` walks a buffer with them, checking what the C++ ``Verifier`` checks
before every read: the root offset, each vtable (inside the buffer, even size,
the table's inline size inside the buffer), each field inside its table, each
offset, vector and string inside the buffer, strings NUL-terminated and UTF-8.
A work budget bounds the objects a blob can make us decode, and objects
reached twice (shared strings, vectors, tables) are decoded once.

Decoded tables are namedtuples of their fields in schema order; an absent
field is its default (scalars) or None (strings, tables, vectors, structs).
"""

from __future__ import annotations

import re
import struct
from collections import namedtuple
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import schema as _schema_package

# Package data of ``schema``; found through __path__, which a regular package and
# an editable install's namespace mapping both have.
SCHEMA_PATH = Path(next(iter(_schema_package.__path__))) / "vpu_blob.fbs"

SCALARS: dict[str, str] = {
    "bool": "?", "byte": "b", "ubyte": "B", "short": "h", "ushort": "H", "int": "i",
    "uint": "I", "long": "q", "ulong": "Q", "float": "f", "double": "d",
    "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "uint64": "Q", "float32": "f", "float64": "d",
}


@dataclass
class FieldType:
    kind: str                       # scalar | string | struct | table | vector
    name: str = ""                  # struct/table name
    code: str = ""                  # scalar struct code
    element: "FieldType | None" = None

    @property
    def inline_size(self) -> int:
        return struct.calcsize("<" + self.code) if self.kind == "scalar" else 4


@dataclass
class Field:
    name: str
    index: int                      # vtable slot
    type: FieldType
    default: object = None
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class StructDef:
    name: str
    fields: list[tuple[str, str]]   # (name, scalar code)
    format: str = ""                # with padding, little-endian
    size: int = 0
    align: int = 1
    record: type | None = None


@dataclass
class TableDef:
    name: str
    fields: list[Field]
    record: type | None = None


@dataclass
class Schema:
    namespace: str = ""
    identifier: str = ""
    root: str = ""
    enums: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    structs: dict[str, StructDef] = field(default_factory=dict)
    tables: dict[str, TableDef] = field(default_factory=dict)


# --- parsing the .fbs subset we use --------------------------------------------------

_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"[^"]*"|[A-Za-z_][A-Za-z0-9_.]*|-?[0-9][0-9.eE+-]*|.',
                    re.S)


class SchemaError(Exception):
    """The .fbs uses something this parser does not support (a bug in vpuc, not in a blob)."""


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if t.strip() and not t.startswith(("//", "/*"))]


def parse_schema(text: str) -> Schema:
    toks = _tokens(text)
    pos = 0
    out = Schema()

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos >= len(toks):
            raise SchemaError(f"unexpected end of schema, expected {expected or 'more'}")
        tok = toks[pos]
        if expected is not None and tok != expected:
            raise SchemaError(f"expected '{expected}', found '{tok}'")
        pos += 1
        return tok

    def attributes() -> dict[str, str]:
        attrs: dict[str, str] = {}
        if pos < len(toks) and toks[pos] == "(":
            take("(")
            while toks[pos] != ")":
                key = take()
                attrs[key] = ""
                if toks[pos] == ":":
                    take(":")
                    attrs[key] = take()
                if toks[pos] == ",":
                    take(",")
            take(")")
        return attrs

    raw_tables: list[tuple[str, list[tuple[str, str, str | None, dict]]]] = []
    while pos < len(toks):
        word = take()
        if word == "namespace":
            out.namespace = take()
            take(";")
        elif word in ("file_identifier", "file_extension", "root_type", "attribute"):
            value = take().strip('"')
            take(";")
            if word == "file_identifier":
                out.identifier = value
            elif word == "root_type":
                out.root = value
        elif word == "enum":
            name = take()
            take(":")
            underlying = take()
            take("{")
            values, nxt = {}, 0
            while toks[pos] != "}":
                key = take()
                if toks[pos] == "=":
                    take("=")
                    nxt = int(take())
                values[key] = nxt
                nxt += 1
                if toks[pos] == ",":
                    take(",")
            take("}")
            out.enums[name] = (SCALARS[underlying], values)
        elif word in ("struct", "table"):
            name = take()
            attributes()
            take("{")
            members = []
            while toks[pos] != "}":
                fname = take()
                take(":")
                ftype = take("[") + take() + take("]") if toks[pos] == "[" else take()
                default = None
                if toks[pos] == "=":
                    take("=")
                    default = take()
                attrs = attributes()
                take(";")
                if "id" in attrs:
                    raise SchemaError(f"{name}.{fname}: explicit ids are not supported")
                members.append((fname, ftype, default, attrs))
            take("}")
            if word == "struct":
                out.structs[name] = _struct_def(name, members, out)
            else:
                raw_tables.append((name, members))
        else:
            raise SchemaError(f"unsupported schema construct '{word}'")
    for name, members in raw_tables:
        fields = [Field(fname, i, _field_type(ftype, out), None, attrs)
                  for i, (fname, ftype, _, attrs) in enumerate(members)]
        for fdef, (_, ftype, default, _) in zip(fields, members):
            fdef.default = _default(fdef.type, ftype, default, out)
        out.tables[name] = TableDef(name, fields, namedtuple(name, [f.name for f in fields]))
    for tdef in out.tables.values():
        for fdef in tdef.fields:
            for t in (fdef.type, fdef.type.element):
                if t is not None and t.kind == "table" and t.name not in out.tables:
                    raise SchemaError(f"{tdef.name}.{fdef.name}: unknown type {t.name}")
    return out


def _scalar_code(type_name: str, schema: Schema) -> str | None:
    if type_name in SCALARS:
        return SCALARS[type_name]
    if type_name in schema.enums:
        return schema.enums[type_name][0]
    return None


def _struct_def(name: str, members, schema: Schema) -> StructDef:
    fmt, size, align, fields = "<", 0, 1, []
    for fname, ftype, _, _ in members:
        code = _scalar_code(ftype, schema)
        if code is None:
            raise SchemaError(f"struct {name}.{fname}: only scalar struct fields are supported")
        width = struct.calcsize("<" + code)
        pad = -size % width
        fmt += "x" * pad + code
        size += pad + width
        align = max(align, width)
        fields.append((fname, code))
    pad = -size % align
    return StructDef(name, fields, fmt + "x" * pad, size + pad, align,
                     namedtuple(name, [f for f, _ in fields]))


def _field_type(text: str, schema: Schema) -> FieldType:
    if text.startswith("["):
        return FieldType("vector", element=_field_type(text[1:-1], schema))
    if text == "string":
        return FieldType("string")
    code = _scalar_code(text, schema)
    if code is not None:
        return FieldType("scalar", text, code)
    if text in schema.structs:
        return FieldType("struct", text)
    return FieldType("table", text)


def _default(ftype: FieldType, type_name: str, text: str | None, schema: Schema):
    if ftype.kind != "scalar":
        return None
    if text is None:
        return False if ftype.code == "?" else (0.0 if ftype.code in "fd" else 0)
    if ftype.code == "?":
        return text == "true"
    if type_name in schema.enums and text in schema.enums[type_name][1]:
        return schema.enums[type_name][1][text]
    return float(text) if ftype.code in "fd" else int(text)


@lru_cache(maxsize=None)
def load_schema() -> Schema:
    return parse_schema(SCHEMA_PATH.read_text(encoding="utf-8"))
