"""A FlatBuffer task list's records as columns, for ``reader_fb``.

The column decoder's columns (``Columns``, ``Grouped``, ``Vectors``) or the generic
decoder's tuples cut into the fields of the task records: a vector of tables as one
column per field, a column of vectors as its flat rows and counts, barrier
references as wait and update columns (and ``ListSync``'s flattened indices), and
the columns a ``RecordTable`` makes only when asked: each task's barrier indices,
a DPU task's ``VariantRec``s and an ACT task's ``BindingRec``s, made whole when the
records are read, or row by row for a taken row (the verifier's representatives).
"""

from __future__ import annotations

from functools import partial
from itertools import islice

import numpy as np

from vpuc.blob.content import BindingRec, VariantRec
from vpuc.blob.fb_columns import Columns, Grouped, Vectors
from vpuc.blob.record_table import RecordTable
from vpuc.blob.sync_columns import ListSync, flat_lists

# Records made from a tuple without the namedtuple's Python __new__ frame.
BINDING_REC = partial(tuple.__new__, BindingRec)
VARIANT_REC = partial(tuple.__new__, VariantRec)


def record_table(record, columns: list, extra: dict | None = None) -> RecordTable:
    """A task list's records as the decoder's columns (field order), made when asked;
    ``extra``: the columns ``fb_task_columns`` made for the checks."""
    return RecordTable(record, len(columns[0]), {**(extra or {}),
                                                  **dict(zip(record._fields, columns))})


def binding_columns(groups) -> tuple | None:
    """A column of TensorBinding vectors as (every binding's tensor, alias, each row's
    count); None for the generic decoder's tuples."""
    if not isinstance(groups, Grouped):
        return None
    flat, counts = flat_rows(groups)
    if not flat:
        return [], [], counts
    bc = columns_of(flat)
    return bc["tensor"], bc["alias"], counts


def bindings(groups) -> list[tuple]:
    """A column of TensorBinding vectors as BindingRec tuples (a missing alias reads "")."""
    flat, counts = flat_rows(groups)
    if not flat:
        return [()] * len(counts)
    bc = columns_of(flat)
    return regroup(list(map(BINDING_REC, zip(bc["tensor"], [a or "" for a in bc["alias"]]))),
                   counts)


def columns_of(records) -> dict[str, tuple]:
    """A vector of decoded tables (``Columns``, or namedtuples of the schema's fields) as
    one column per field, by the field's schema name."""
    if isinstance(records, Columns):
        return records.columns
    return dict(zip(records[0]._fields, zip(*records)))


def flat_rows(groups) -> tuple:
    """A column of vectors of tables (``Grouped``, or one tuple or None per row) as every
    row's tables one after another and each row's count."""
    if isinstance(groups, Grouped):
        return groups.flat, groups.counts
    return [t for g in groups if g for t in g], [len(g) if g else 0 for g in groups]


def lazy(whole, row):
    """A ``RecordTable`` column made when asked: every row by ``whole()``, the rows of a
    table taken from it (a verifier's representatives) by ``row(i)`` each."""
    return lambda rows: whole() if rows is None else list(map(row, rows.tolist()))


def lazy_barriers(refs) -> tuple:
    """``barrier_lists``, made when asked (the decoder's rows of indices are tuples
    already; a missing vector reads ())."""
    if not isinstance(refs, Columns):
        return barrier_lists(refs)
    return tuple(lazy(lambda c=column: [x or () for x in c], lambda i, c=column: c[i] or ())
                 for column in (refs.columns["wait_barriers"], refs.columns["update_barriers"]))


def lazy_variants(vc: dict, starts: list, ends: list, counts: list):
    """Each DPU task's VariantRecs, made when asked."""
    labels, modes = vc["label"], vc["mode"]
    if not isinstance(vc["barriers"], Columns):     # the generic decoder's rows: now
        return regroup(list(map(VARIANT_REC, zip(labels, starts, ends,
                                                  *barrier_lists(vc["barriers"]), modes))),
                       counts)
    waits, updates = lazy_barriers(vc["barriers"])
    firsts = (np.cumsum(counts) - np.asarray(counts, np.int64)).tolist()

    def whole() -> list:
        return regroup(list(map(VARIANT_REC, zip(labels, starts, ends, waits(None),
                                                  updates(None), modes))), counts)

    def row(i: int) -> tuple:
        part = slice(firsts[i], firsts[i] + counts[i])
        at = np.arange(part.start, part.stop)
        return tuple(map(VARIANT_REC, zip(labels[part], starts[part], ends[part], waits(at),
                                          updates(at), modes[part])))
    return lazy(whole, row)


def lazy_bindings(groups):
    """``bindings``, made when asked."""
    found = binding_columns(groups)
    if found is None:
        return bindings(groups)
    tensors, aliases, counts = found
    firsts = (np.cumsum(counts) - np.asarray(counts, np.int64)).tolist() if counts else []

    def row(i: int) -> tuple:
        at = slice(firsts[i], firsts[i] + counts[i])
        return tuple(map(BINDING_REC, zip(tensors[at], [a or "" for a in aliases[at]])))
    return lazy(lambda: bindings(groups), row)


def barrier_lists(refs) -> tuple[list, list]:
    """The wait and update barrier columns of a column of BarrierReferences (None: none)."""
    if isinstance(refs, Columns):
        return ([w or () for w in refs.columns["wait_barriers"]],
                [u or () for u in refs.columns["update_barriers"]])
    waits = [() if r is None else r.wait_barriers or () for r in refs]
    updates = [() if r is None else r.update_barriers or () for r in refs]
    return waits, updates


def barrier_sync(refs, rows: int) -> ListSync | None:
    """A column of BarrierReferences as ``sync_columns`` flattens them, from the column
    decoder's numbers (``Vectors``, a missing vector counting none); None when a row has no
    BarrierReference table or the decoder kept no numbers (then ``sync_columns`` flattens
    the records)."""
    if not isinstance(refs, Columns):
        return None
    waits, updates = refs.columns["wait_barriers"], refs.columns["update_barriers"]
    if not (isinstance(waits, Vectors) and isinstance(updates, Vectors)):
        return None
    return ListSync(rows, flat_lists(rows, waits.counts, waits.values),
                    flat_lists(rows, updates.counts, updates.values))


def regroup(flat: list, counts: list[int]) -> list[tuple]:
    """``flat`` cut back into consecutive tuples of ``counts`` items (all in C when every
    row has the same count: one binding per task, one variant count)."""
    if counts and min(counts) == max(counts) > 0:
        return list(zip(*[iter(flat)] * counts[0]))
    items = iter(flat)
    return [tuple(islice(items, c)) for c in counts]


def _coord(c) -> tuple[int, int, int]:
    return (0, 0, 0) if c is None else (c.x, c.y, c.z)


def corners(column) -> list:
    """A column of Coord3 structs as (x, y, z) tuples (a missing one is the origin); the
    column decoder's are plain tuples already (``FbReader``'s struct types)."""
    if None not in column and (not column or type(column[0]) is tuple):
        return list(column)
    return list(map(_coord, column))
