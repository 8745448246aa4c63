"""What a generated kernel records about itself: the notes of ``.note.vpuc.graph``.

A kernel object made by the fusion generator carries a section
``.note.vpuc.graph`` (``SHT_NOTE``, no flags: never loaded; ``sh_addralign``
4) holding ELF notes of the owner ``"VPUC"`` (``n_namesz`` 5, name padded to
8, descriptor padded with zeros to 4), in this order:

- ``NT_VPUC_GRAPH`` (0x10): what the kernel computes -- the subgraph body as
  UTF-8 graph-level VIR text (no NUL); ``KernelObject.graph``;
- ``NT_VPUC_TAGS`` (0x11): which LIR expression every ``.text`` instruction
  came from (``KernelObject.tags``, an ``ExprTags``): the descriptor is a
  ``VpucTagsHdr``, then ``t_nruns`` ``VpucTagRun`` records, then ``t_nlabels``
  NUL-terminated UTF-8 labels.  The runs cover ``.text`` in order from
  instruction 0 (run k starts where run k-1 ends); ``r_label`` indexes the
  labels (``NO_LABEL``: an instruction of no expression), which are listed in
  the generator's LIR order (``prologue``, ``e8 Load``, ..., ``epilogue``).

Notes of other types are skipped (room for more records); a second note of
one type, a note running past the section, text that is not UTF-8 or tags
that do not cover ``.text`` exactly are ``VpucError``s naming the section
and the byte offset (docs/blob-format.md, "Kernel objects").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave import elf_layout as elf

GRAPH_SECTION = ".note.vpuc.graph"
NOTE_NAME = b"VPUC"
NOTE_ALIGN = 4                   # ELF32 notes: name and descriptor each padded to 4 bytes


class KernelNoteType(IntEnum):
    """Note types of the "VPUC" owner in kernel objects (the blob's version note is 1).

    Values stay clear of the note types readelf names whatever the owner (NT_VERSION 1,
    NT_ARCH 2, Go's build id 4, GNU build attributes 0x100 and 0x101), so that
    ``readelf -n`` says "Unknown note type" instead of misnaming ours.
    """

    NT_VPUC_GRAPH = 0x10         # desc: UTF-8 graph-level VIR text (what the kernel computes)
    NT_VPUC_TAGS = 0x11          # desc: VpucTagsHdr, VpucTagRun[t_nruns], labels


NT_VPUC_GRAPH, NT_VPUC_TAGS = KernelNoteType

TagsHeader = elf.Struct("VpucTagsHdr", (
    ("t_ninsts", "I"),           # instructions covered: the .text size / 8
    ("t_nruns", "I"),
    ("t_nlabels", "I"),
))
TagRun = elf.Struct("VpucTagRun", (
    ("r_count", "H"),            # instructions in the run, >= 1
    ("r_label", "H"),            # index into the labels, or NO_LABEL
))
_RUNS = struct.Struct("<HH")     # TagRun's layout, for unpacking every run at once
assert _RUNS.size == TagRun.size
NO_LABEL = 0xFFFF
MAX_RUN = 0xFFFF                 # longer runs are written as several


@dataclass(frozen=True)
class ExprTags:
    """Run-length expression tags of a kernel's ``.text``."""

    labels: tuple[str, ...]
    runs: tuple[tuple[int, int], ...]       # (count, label index or NO_LABEL), in .text order

    @classmethod
    def from_instructions(cls, per_instruction: list[str | None],
                          order: list[str] = ()) -> "ExprTags":
        """Tags of instructions labelled ``per_instruction``; labels listed in ``order``
        first (those used), then the others in order of appearance."""
        used = set(per_instruction) - {None}
        labels = [x for x in dict.fromkeys(order) if x in used]
        labels += [x for x in dict.fromkeys(per_instruction) if x is not None and x not in labels]
        index = {x: i for i, x in enumerate(labels)}
        runs: list[list[int]] = []
        for label in per_instruction:
            code = NO_LABEL if label is None else index[label]
            if runs and runs[-1][1] == code and runs[-1][0] < MAX_RUN:
                runs[-1][0] += 1
            else:
                runs.append([1, code])
        return cls(tuple(labels), tuple((c, x) for c, x in runs))

    @property
    def instructions(self) -> int:
        return sum(count for count, _ in self.runs)

    def per_instruction(self) -> list[int]:
        """The label index (or NO_LABEL) of every instruction."""
        out: list[int] = []
        for count, label in self.runs:
            out += [label] * count
        return out

    def label(self, index: int) -> str:
        return "(no expression)" if index == NO_LABEL else self.labels[index]

    def starts(self) -> dict[int, str]:
        """Instruction index -> label, where a run starts (for annotated disassembly)."""
        out, first = {}, 0
        for count, label in self.runs:
            out[first] = self.label(label)
            first += count
        return out


def _padded(size: int) -> int:
    return size + (-size % NOTE_ALIGN)


def _note(n_type: int, desc: bytes) -> bytes:
    name = NOTE_NAME + b"\0"
    return (elf.Elf32_Nhdr.pack_values(len(name), len(desc), n_type)
            + name + bytes(_padded(len(name)) - len(name))
            + desc + bytes(_padded(len(desc)) - len(desc)))


def graph_note(text: str) -> bytes:
    """The note recording the graph ``text``."""
    return _note(NT_VPUC_GRAPH, text.encode("utf-8"))


def tags_note(tags: ExprTags) -> bytes:
    """The note recording ``tags``."""
    desc = TagsHeader.pack_values(tags.instructions, len(tags.runs), len(tags.labels))
    desc += b"".join(TagRun.pack_values(count, label) for count, label in tags.runs)
    desc += b"".join(label.encode("utf-8") + b"\0" for label in tags.labels)
    return _note(NT_VPUC_TAGS, desc)


def notes_section(graph: str | None, tags: ExprTags | None) -> bytes:
    """The contents of ``.note.vpuc.graph``: the graph note, then the tags note."""
    return (graph_note(graph) if graph is not None else b"") + \
        (tags_note(tags) if tags is not None else b"")


@dataclass
class KernelNotes:
    graph: str | None = None
    tags: ExprTags | None = None
    tags_offset: int = 0           # where the tags note starts in the section


def read_notes(data: bytes, file: str, instructions: int | None = None) -> KernelNotes:
    """The records in a ``.note.vpuc.graph`` section; with ``instructions`` (the .text
    size / 8) the tags must cover exactly that many.  Errors name the section and offset."""
    found = KernelNotes()
    offset = 0
    while offset < len(data):
        head = elf.Elf32_Nhdr.unpack_from(data, offset, file, GRAPH_SECTION)
        name_at = offset + elf.Elf32_Nhdr.size
        desc_at = name_at + _padded(head.n_namesz)
        end = desc_at + _padded(head.n_descsz)
        if end > len(data):
            raise VpucError(f"note ({head.n_namesz}-byte name, {head.n_descsz}-byte descriptor) "
                            f"runs past the end of the section ({len(data)} bytes)",
                            BinLoc(file, GRAPH_SECTION, offset))
        ours = data[name_at:name_at + head.n_namesz] == NOTE_NAME + b"\0"
        desc = data[desc_at:desc_at + head.n_descsz]
        if ours and head.n_type == NT_VPUC_GRAPH:
            if found.graph is not None:
                raise VpucError("a second graph note; a kernel object records one graph",
                                BinLoc(file, GRAPH_SECTION, offset))
            try:
                found.graph = desc.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise VpucError("the graph note's text is not UTF-8",
                                BinLoc(file, GRAPH_SECTION, desc_at + exc.start)) from None
        elif ours and head.n_type == NT_VPUC_TAGS:
            if found.tags is not None:
                raise VpucError("a second expression-tags note",
                                BinLoc(file, GRAPH_SECTION, offset))
            found.tags, found.tags_offset = _read_tags(desc, desc_at, file), offset
        offset = end
    if found.tags is not None and instructions is not None and \
            found.tags.instructions != instructions:
        raise VpucError(f"the expression-tags note covers {found.tags.instructions} "
                        f"instructions; .text holds {instructions}",
                        BinLoc(file, GRAPH_SECTION, found.tags_offset))
    return found


def _read_tags(desc: bytes, at: int, file: str) -> ExprTags:
    """The tags in a descriptor found at section offset ``at``; every count is checked."""
    def fail(message: str, offset: int) -> VpucError:
        return VpucError(f"expression-tags note: {message}", BinLoc(file, GRAPH_SECTION,
                                                                     at + offset))

    if len(desc) < TagsHeader.size:
        raise fail(f"its descriptor is {len(desc)} bytes, shorter than its "
                   f"{TagsHeader.size}-byte header", 0)
    head = TagsHeader.unpack_from(desc, 0, file, GRAPH_SECTION)
    pool = TagsHeader.size + head.t_nruns * TagRun.size
    if pool > len(desc):
        raise fail(f"{head.t_nruns} runs do not fit its {len(desc)}-byte descriptor", 4)
    strings = desc[pool:].split(b"\0")
    if strings[-1] or len(strings) - 1 != head.t_nlabels:
        raise fail(f"the header says {head.t_nlabels} labels; after the runs come "
                   f"{len(strings) - 1} NUL-terminated strings"
                   + (" and unterminated bytes" if strings[-1] else ""), pool)
    labels, seen, place = [], set(), pool
    for raw in strings[:-1]:
        try:
            labels.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise fail("a label is not UTF-8", place + exc.start) from None
        if not raw or raw in seen:
            raise fail(f"label {len(labels) - 1} is empty or repeated", place)
        seen.add(raw)
        place += len(raw) + 1
    # all runs unpacked at once (a generated kernel has hundreds), then checked in order
    runs = list(_RUNS.iter_unpack(desc[TagsHeader.size:pool]))
    total = 0
    for k, (count, label) in enumerate(runs):
        if count == 0 or (label >= head.t_nlabels and label != NO_LABEL):
            raise fail(f"run {k} has count {count} and label {label}; counts "
                       f"are at least 1 and labels below {head.t_nlabels} (or {NO_LABEL:#x})",
                       TagsHeader.size + k * TagRun.size)
        total += count
    if total != head.t_ninsts:
        raise fail(f"the runs cover {total} instructions, the header says {head.t_ninsts}", 0)
    return ExprTags(tuple(labels), tuple(runs))


def object_notes(data: bytes, file: str, instructions: int | None = None) -> KernelNotes:
    """The notes of a kernel ELF file, without reading the rest of it (the blob reader
    surfaces them as ``KernelImage.graph`` / ``.tags``).  An object that is not a readable
    ELF file has none here: the kernel loader reports its problem when it runs."""
    try:
        image = elf.read_elf32(data, file, machine=elf.EM_VPUC_SHAVE)
    except VpucError:
        return KernelNotes()
    sections = [s for s in image.sections if s.name == GRAPH_SECTION
                and s.header.sh_type == elf.SHT_NOTE]
    if len(sections) > 1:
        raise VpucError(f"its object has {len(sections)} {GRAPH_SECTION} sections; expected "
                        "at most one", BinLoc(file, GRAPH_SECTION, 0))
    return read_notes(sections[0].data, file, instructions) if sections else KernelNotes()


def read_graph_note(data: bytes, file: str) -> str | None:
    """The graph text in a ``.note.vpuc.graph`` section (None if it holds no graph note)."""
    return read_notes(data, file).graph
