"""`vpuc inspect FILE --section NAME [--hex]`: one part of a blob or kernel object, raw.

NAME is, in an ELF file (an ELF blob or a kernel object), a section name as
``readelf -S`` prints it; in a FlatBuffer blob, a path from the root table
``Blob``: a field name, then ``.field`` or ``[index]`` to go deeper
(``header``, ``tensors[2]``, ``tensors[2].dims``, ``kernel_data[0].data``).
The part's bytes are:

- an ELF section: its contents (``sh_offset``, ``sh_size``; SHT_NOBITS: none);
- a FlatBuffer table: its inline part (from the table's offset to its vtable's
  table size; the vtable and the objects its fields point to are elsewhere);
- a vector: its length word and its elements (offsets, for vectors of tables
  or strings); a string: its length word, its bytes and the NUL;
- a scalar or struct field: its bytes inside its table.

Offsets are file offsets.  ``--hex`` adds the bytes as ``hexdump -C`` prints
them.  Every position is checked by the same decoders ``read_blob`` uses.
"""

from __future__ import annotations

import re

from vpuc.diagnostics import UsageError

_PATH_TOKEN = re.compile(r"([A-Za-z_]\w*)|\[(\d+)\]|(\.)")


def section_report(data: bytes, file: str, name: str, fmt: str, version: int) -> dict:
    """The part called ``name`` of a blob (``fmt`` "fb" or "elf") or kernel object ("object")."""
    if fmt == "fb":
        kind, offset, size = _fb_part(data, file, name)
    else:
        kind, offset, size = _elf_part(data, file, name)
    in_file = data[offset:offset + size] if kind != "SHT_NOBITS" else b""
    return {"inspect_version": version, "file": file, "format": fmt, "section": name,
            "kind": kind, "offset": offset, "size": size, "hex": in_file.hex()}


def render_section(r: dict, hexdump_too: bool) -> str:
    head = (f"{r['file']}: {r['section']}: {r['kind']}, {r['size']} bytes at file offset "
            f"{r['offset']:#x}")
    if not hexdump_too:
        return head + "\n"
    if r["kind"] == "SHT_NOBITS":
        return head + " (SHT_NOBITS: no bytes in the file)\n"
    return head + "\n" + hexdump(bytes.fromhex(r["hex"]), r["offset"])


def hexdump(data: bytes, base: int = 0) -> str:
    """``hexdump -C`` of ``data`` read from file offset ``base``: offset, 16 bytes in two
    groups of 8, the printable ASCII; a run of lines equal to the one before is one ``*``;
    the last line is the end offset."""
    lines, previous, squeezing = [], None, False
    for at in range(0, len(data), 16):
        chunk = data[at:at + 16]
        if chunk == previous and len(chunk) == 16:
            if not squeezing:
                lines.append("*")
                squeezing = True
            continue
        previous, squeezing = chunk, False
        cells = [f"{b:02x}" for b in chunk] + ["  "] * (16 - len(chunk))
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{base + at:08x}  {' '.join(cells[:8])}  {' '.join(cells[8:])}  |{text}|")
    lines.append(f"{base + len(data):08x}")
    return "\n".join(lines) + "\n"


# --- ELF -------------------------------------------------------------------------------

def _elf_part(data: bytes, file: str, name: str) -> tuple[str, int, int]:
    from vpuc.shave.elf_layout import SHT_NOBITS, ShType, read_elf32
    image = read_elf32(data, file)
    sections = image.sections[1:]
    sec = next((s for s in sections if s.name == name), None)
    if sec is None:
        raise UsageError(f"no section '{name}' in {file}; its sections are: "
                         + ", ".join(s.name for s in sections))
    sh = sec.header
    try:
        kind = ShType(sh.sh_type).name
    except ValueError:
        from vpuc.blob.elf_records import VpucShType
        kind = VpucShType(sh.sh_type).name if sh.sh_type in set(VpucShType) else \
            f"sh_type {sh.sh_type:#x}"
    return ("SHT_NOBITS" if sh.sh_type == SHT_NOBITS else kind), sh.sh_offset, sh.sh_size


# --- FlatBuffer ------------------------------------------------------------------------

def _fb_part(data: bytes, file: str, path: str) -> tuple[str, int, int]:
    from vpuc.blob.fb_decode import Decoder
    from vpuc.blob.fb_schema import FieldType, load_schema
    schema = load_schema()
    dec = Decoder(schema, data, file)
    tokens = _tokens(path)
    root = schema.tables[schema.root]
    # The current object: (kind, type, position); kind "table", "vector", "string", "inline".
    current: tuple = ("table", FieldType("table", name=root.name), dec.root_position())
    walked = root.name
    for field_name, index in tokens:
        kind, ftype, pos = current
        if field_name is not None:
            if kind != "table":
                raise UsageError(f"{walked} is a {kind}, it has no field '{field_name}'")
            tdef = schema.tables[ftype.name]
            fdef = next((f for f in tdef.fields if f.name == field_name), None)
            if fdef is None:
                at_root = walked == root.name
                raise UsageError(f"no field '{field_name}' in "
                                 + (f"the root table {root.name} of {file}" if at_root else
                                    f"{walked} (table {tdef.name})")
                                 + f"; its fields are: {', '.join(f.name for f in tdef.fields)}"
                                 + (_PATH_HINT if at_root else ""))
            walked += "." + field_name
            size = _inline_size(schema, fdef.type)
            at = dec.slot(tdef, pos, field_name, size)
            if at is None:
                raise UsageError(f"{walked} is absent from {file}")
            current = _object(dec, fdef.type, at, size)
        else:
            if kind != "vector":
                raise UsageError(f"{walked} is a {kind}, not a vector; [{index}] needs a vector")
            element = ftype.element
            width = _inline_size(schema, element)
            count = dec.length(pos, width, walked, "vector")
            if index >= count:
                raise UsageError(f"{walked} has {count} elements; [{index}] is out of range")
            walked += f"[{index}]"
            current = _object(dec, element, pos + 4 + index * width, width)
    return _extent(dec, schema, current, walked)


_SCALAR_NAMES = {"?": "bool", "b": "byte", "B": "ubyte", "h": "short", "H": "ushort", "i": "int",
                 "I": "uint", "q": "long", "Q": "ulong", "f": "float", "d": "double"}
_PATH_HINT = " (then .FIELD or [INDEX] to go deeper, e.g. tensors[0].dims)"


def _tokens(path: str) -> list[tuple[str | None, int | None]]:
    out, pos, want_name = [], 0, True
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None or (want_name and m.group(1) is None) or \
                (not want_name and m.group(1) is not None):
            raise UsageError(f"bad section path '{path}' at character {pos + 1}: expected "
                             + ("a field name" if want_name else "'.' or '[INDEX]'"))
        if m.group(1) is not None:
            out.append((m.group(1), None))
            want_name = False
        elif m.group(2) is not None:
            out.append((None, int(m.group(2))))
        else:
            want_name = True
        pos = m.end()
    if want_name:
        raise UsageError(f"bad section path '{path}': expected a field name at the end")
    return out


def _inline_size(schema, ftype) -> int:
    if ftype.kind == "struct":
        return schema.structs[ftype.name].size
    return ftype.inline_size


def _object(dec, ftype, at: int, size: int) -> tuple:
    """What a field or vector element at ``at`` holds: inline bytes or an object it points to."""
    if ftype.kind in ("scalar", "struct"):
        return ("inline", ftype, (at, size))
    return (ftype.kind, ftype, dec.follow(at))


def _type_name(ftype) -> str:
    if ftype.kind == "vector":
        return "[" + _type_name(ftype.element) + "]"
    if ftype.kind in ("table", "struct"):
        return ftype.name
    return ftype.kind if ftype.kind == "string" else _SCALAR_NAMES.get(ftype.code, ftype.code)


def _extent(dec, schema, current: tuple, walked: str) -> tuple[str, int, int]:
    kind, ftype, pos = current
    if kind == "inline":
        at, size = pos
        return f"{_type_name(ftype)} field", at, size
    if kind == "table":
        return f"table {ftype.name}", pos, dec.table_size(schema.tables[ftype.name], pos, walked)
    if kind == "string":
        return "string", pos, 4 + dec.length(pos, 1, walked, "string") + 1
    width = _inline_size(schema, ftype.element)
    count = dec.length(pos, width, walked, "vector")
    return f"vector {_type_name(ftype)} of {count}", pos, 4 + count * width
