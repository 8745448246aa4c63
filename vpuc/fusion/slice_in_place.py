"""``--schedule default``: a Slice's result read where it lies in its source, not copied.

A Slice is a DMA segment (``lower_dma``): a DDR -> DDR copy of the region, which its
readers then load again.  An unrolled LSTM (``convert_rnn``) slices every step's rows
out of the input projection and each gate's columns out of those: per step a handful of
copies of a few hundred bytes, each paying a DMA's dispatch and DDR latency twice (the
copy, then the reader's load), all on one channel (a CRNN's 26-step bidirectional
LSTM: 618 copies, 563 k of DMA0's 1.38 M busy cycles).  A Slice of unit steps takes a
box of its source, so its result is declared a ``view`` of that box (``Value.alias``,
as ``concat_in_place`` does for a Concat's operands; views compose, so a slice of a
slice is a box of the first source), and its segment copies nothing and is left out.
``resident.resident_values`` looks through such Slices to their readers (``viewed_slices``),
so a source only they read (the projection, written by a MatMul, read by the steps' ACT
segments) may stay in CMX, each box a view of its CMX buffer and each load a CMX -> CMX
copy: the CRNN 1,616,658 -> 1,083,671 cycles with the copies left out, 723,958 with the
projection in CMX as well.

Expects: the block's values after ``resident_values`` and ``concat_aliases``, and per
segment ``SegmentValues``.  Guarantees: a result is aliased only when it is a DDR value
(not resident, not an output, not itself a view) that this Slice alone writes, of the
source's dims order and element type, read only by ACT and DMA segments (whose loads
take strided views; a library segment re-types a tensor's bytes as dense), and its
source a DDR value (held in CMX or not; not with padded channels), an input or an
output; the bytes its readers see are the
source's, which nothing writes after the Slice's producer (values are written once).
"""

from __future__ import annotations

from dataclasses import replace

from vpuc.fusion.blocked_program import Value
from vpuc.fusion.concat_in_place import value_users
from vpuc.fusion.schedule_layouts import SegmentValues

READERS = ("act", "dma")


def viewed_slices(values: list[Value], segments: list[SegmentValues],
                  boxes: dict[int, tuple[tuple[int, int, int], ...]]) -> dict[int, str]:
    """Slice segment -> its result's program name, for each Slice whose result will be a
    view of its source (``slice_aliases``): ``resident.resident_values`` looks through
    them to their readers, so a source they alone read (an LSTM's input projection) may
    stay in CMX, its boxes then views of the CMX buffer."""
    by_name = {v.name: v for v in values}
    users = value_users(segments)
    out = {}
    for i, box in boxes.items():
        seg = segments[i]
        if len(seg.reads) == 1 and len(seg.writes) == 1 and all(s == 1 for _, _, s in box) \
                and _in_place(by_name[seg.reads[0]], by_name[seg.writes[0]], i, users,
                              segments) \
                and _box(box, by_name[seg.reads[0]], by_name[seg.writes[0]]) is not None:
            out[i] = seg.writes[0]
    return out


def _box(box, x: Value, y: Value) -> tuple[tuple[int, int], ...] | None:
    """The Slice's ``(start, stop)`` per axis of ``x``, or None when it is not ``y``'s dims."""
    spans = tuple(slice(b, e, 1).indices(d)[:2] for (b, e, _), d in zip(box, x.type.dims))
    return spans if tuple(e - b for b, e in spans) == y.type.dims else None


def slice_aliases(values: list[Value], segments: list[SegmentValues],
                  boxes: dict[int, tuple[tuple[int, int, int], ...]]
                  ) -> tuple[list[Value], dict[int, set[str]]]:
    """``values`` with each Slice result that can be read in place declared as a view of
    its source's box, and per Slice segment (``boxes``: segment index -> its ``(begin,
    end, step)`` per axis, as the op's attributes) the program name of the source it no
    longer copies."""
    by_name = {v.name: v for v in values}
    aliases: dict[str, tuple[str, tuple]] = {}
    in_place: dict[int, set[str]] = {}
    for i in viewed_slices(values, segments, boxes):
        seg = segments[i]
        x, y = by_name[seg.reads[0]], by_name[seg.writes[0]]
        spans, base = _box(boxes[i], x, y), x.name
        if x.name in aliases or x.alias is not None:   # a box of a view: of its base
            base, outer = aliases.get(x.name, x.alias)
            spans = tuple((o0 + b, o0 + e) for (o0, _), (b, e) in zip(outer, spans))
        aliases[y.name] = (base, spans)
        in_place[i] = {x.name}
    # a box of a value held in CMX (``resident.resident_values``) lives on its tile
    out = [replace(v, alias=aliases[v.name], tile=by_name[aliases[v.name][0]].tile)
           if v.name in aliases else v for v in values]
    return out, in_place


def _in_place(x: Value, y: Value, slice_seg: int, users: dict[str, list[int]],
              segments: list[SegmentValues]) -> bool:
    """Whether the Slice segment ``slice_seg`` of ``x`` into ``y`` can leave ``y`` a view
    of ``x`` (the module docstring's "Guarantees")."""
    readers = [u for u in users[y.name] if u != slice_seg]
    writers = [u for u in users[y.name] if y.name in segments[u].writes]
    return (y.kind == "ddr" and y.tile is None and not y.also_output and y.alias is None
            and x.kind in ("ddr", "input", "output") and not x.padded
            and x.type.is_static and y.type.is_static and x.type.rank == y.type.rank
            and x.type.order == y.type.order and x.type.elem == y.type.elem
            and writers == [slice_seg] and readers
            and all(segments[u].kind in READERS for u in readers))
