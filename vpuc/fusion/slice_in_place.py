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

Expects: the block's values after ``resident_values`` and ``concat_aliases``, and per
segment ``SegmentValues``.  Guarantees: a result is aliased only when it is a DDR value
(not resident, not an output, not itself a view) that this Slice alone writes, of the
source's dims order and element type, read only by ACT and DMA segments (whose loads
take strided views; a library segment re-types a tensor's bytes as dense), and its
source a DDR value, an input or an output in DDR; the bytes its readers see are the
source's, which nothing writes after the Slice's producer (values are written once).
"""

from __future__ import annotations

from dataclasses import replace

from vpuc.fusion.blocked_program import Value
from vpuc.fusion.concat_in_place import value_users
from vpuc.fusion.schedule_layouts import SegmentValues

READERS = ("act", "dma")


def slice_aliases(values: list[Value], segments: list[SegmentValues],
                  boxes: dict[int, tuple[tuple[int, int, int], ...]]
                  ) -> tuple[list[Value], dict[int, set[str]]]:
    """``values`` with each Slice result that can be read in place declared as a view of
    its source's box, and per Slice segment (``boxes``: segment index -> its ``(begin,
    end, step)`` per axis, as the op's attributes) the program name of the source it no
    longer copies."""
    by_name = {v.name: v for v in values}
    users = value_users(segments)
    aliases: dict[str, tuple[str, tuple]] = {}
    in_place: dict[int, set[str]] = {}
    for i, box in boxes.items():
        seg = segments[i]
        if len(seg.reads) != 1 or len(seg.writes) != 1 or any(s != 1 for _, _, s in box):
            continue
        x, y = by_name[seg.reads[0]], by_name[seg.writes[0]]
        if not _in_place(x, y, i, users, segments):
            continue
        spans = tuple(slice(b, e, 1).indices(d)[:2] for (b, e, _), d in zip(box, x.type.dims))
        if tuple(e - b for b, e in spans) != y.type.dims:
            continue
        base = x.name
        if x.name in aliases or x.alias is not None:   # a box of a view: of its base
            base, outer = aliases.get(x.name, x.alias)
            spans = tuple((o0 + b, o0 + e) for (o0, _), (b, e) in zip(outer, spans))
        aliases[y.name] = (base, spans)
        in_place[i] = {x.name}
    out = [replace(v, alias=aliases[v.name]) if v.name in aliases else v for v in values]
    return out, in_place


def _in_place(x: Value, y: Value, slice_seg: int, users: dict[str, list[int]],
              segments: list[SegmentValues]) -> bool:
    """Whether the Slice segment ``slice_seg`` of ``x`` into ``y`` can leave ``y`` a view
    of ``x`` (the module docstring's "Guarantees")."""
    readers = [u for u in users[y.name] if u != slice_seg]
    writers = [u for u in users[y.name] if y.name in segments[u].writes]
    return (y.kind == "ddr" and y.tile is None and not y.also_output and y.alias is None
            and x.kind in ("ddr", "input", "output") and x.tile is None
            and x.type.is_static and y.type.is_static and x.type.rank == y.type.rank
            and x.type.order == y.type.order and x.type.elem == y.type.elem
            and writers == [slice_seg] and readers
            and all(segments[u].kind in READERS for u in readers))
