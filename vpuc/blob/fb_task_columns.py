"""A FlatBuffer task list's extra columns, from the column decoder's, for ``reader_fb``.

What the ELF reader hands over with its task sections (``elf_tasks``), made here
from the FlatBuffer column decoder's lists and ``Vectors``: the numpy fields a
timing-only plan and the class checks read (``ListSync.fields``: a list's tiles,
a DMA list's tensor indices, channels and modes, a DPU list's variant corners
and modes), the flattened columns ``rebuild_lists`` checks ("inputs.flat",
"variants.mode", "bindings.tensor", "names") and "class_key": the fields the
verifier's per-task rules read, one row of ints per task (vectors padded, a
missing vector -1, strings by their interned number: equal keys, equal tasks),
so ``verify_columns`` finds its classes without a record per task.  Without a
``Vectors`` column (the generic decoder's tuples) a key is not made and the
records are compared instead.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from vpuc.blob.fb_rows import Vectors


def ints(column) -> np.ndarray:
    """A column of ints (a list, or the decoder's ``Scalars``: its array) as int64."""
    array = getattr(column, "array", None)
    if array is not None and array.dtype.kind in "iub" and array.dtype != np.uint64:
        return array.astype(np.int64)       # every value fits: no list read back
    return np.fromiter(column, np.int64, len(column))


def padded(column, *, none_ok: bool = False) -> np.ndarray | None:
    """Each row's vector as one row of ints: its count (-1: no vector, with ``none_ok``)
    and its values, padded with -1 to the longest (elf_tasks.padded's rows); None when the
    column holds tuples rather than the decoder's numbers."""
    n = len(column)
    if not isinstance(column, Vectors):
        if list(column).count(None) != n:      # a row with a vector: tuples, no numbers
            return None
        return np.full((n, 1), -1 if none_ok else 0, np.int64)
    counts = np.asarray(column.counts, np.int64)
    return _spread(column.values.astype(np.int64).reshape(-1, 1), counts,
                   _missing(column) if none_ok else None)


def _missing(column: list) -> np.ndarray | None:
    """Rows without a vector (None), or None when every row has one."""
    if isinstance(column, Vectors):
        return column.missing_rows()
    if None not in column:
        return None
    return np.fromiter((v is None for v in column), bool, len(column))


def _spread(values: np.ndarray, counts: np.ndarray, none: np.ndarray | None) -> np.ndarray:
    """Rows of ``counts`` items of ``values`` (``k`` ints each) padded with -1: (count,
    items...) per row, count -1 where ``none``."""
    n, k = len(counts), values.shape[1]
    width = int(counts.max()) if n else 0
    out = np.full((n, 1 + width * k), -1, np.int64)
    out[:, 0] = counts if none is None else np.where(none, -1, counts)
    if width:
        rows = np.repeat(np.arange(n), counts)
        within = np.arange(len(values)) - np.repeat(np.cumsum(counts) - counts, counts)
        for j in range(k):
            out[rows, 1 + within * k + j] = values[:, j]
    return out


def tuple_rows(column: list, width: int) -> np.ndarray:
    """A column of equal-length tuples of ints as an (n, width) int64 array, each distinct
    tuple converted once (a DPU list's variants share a handful of corners)."""
    numbers = {t: i for i, t in enumerate(dict.fromkeys(column))}
    distinct = np.array(list(numbers), np.int64).reshape(len(numbers), width)
    return distinct[np.fromiter(map(numbers.__getitem__, column), np.int64, len(column))]


class Strings:
    """Strings numbered in order of first use: equal numbers iff equal strings."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def codes(self, strings) -> np.ndarray:
        numbers = self.numbers
        for s in dict.fromkeys(strings):
            numbers.setdefault(s, len(numbers))
        return np.fromiter(map(numbers.__getitem__, strings), np.int64, len(strings))


def dma_fields(cols: dict) -> dict:
    """A DMA list's src, dst, channel and mode as numpy (``ListSync.fields``)."""
    return {name: ints(cols[name]) for name in ("src", "dst", "channel", "mode")}


def dpu_columns(ic: dict, vc: dict | None, starts: list, ends: list, posts: list) -> tuple:
    """A DPU list's extra columns and its ``ListSync.fields``: the variants' labels and
    modes, every input, each task's first input and (no post op) its class key, and
    "numbers": its integer fields as numpy; its tiles and each variant's corners and mode
    (start x y z, end x y z, mode)."""
    n = len(ic["op"])
    numbers = {name: ints(ic[name]) for name in ("op", "tile", "output", "weights", "bias",
                                                 "mode", "quant_scale", "in_zero_point",
                                                 "out_zero_point")}
    fields = {"tile": numbers["tile"]}
    extra: dict = {"numbers": numbers}
    modes = ints(vc["mode"]) if vc is not None else np.zeros(0, np.int64)
    if vc is not None:
        extra["variants.label"] = vc["label"]
        fields["corners"] = np.concatenate([tuple_rows(starts, 3), tuple_rows(ends, 3),
                                            modes[:, None]], axis=1)
    else:
        extra["variants.label"] = []
        fields["corners"] = np.zeros((0, 7), np.int64)
    extra["variants.mode"] = modes
    inputs = ic["inputs"]
    if isinstance(inputs, Vectors):
        flat = inputs.values.astype(np.int64)
        counts = np.asarray(inputs.counts, np.int64)
        firsts = np.full(n, -1, np.int64)
        has = counts > 0
        firsts[has] = flat[(np.cumsum(counts) - counts)[has]]
        extra["inputs.flat"], extra["first_input"] = flat, firsts
    if all(p is None for p in posts):
        vectors = [padded(inputs)] + [padded(ic[name], none_ok=True)
                                      for name in ("kernel", "stride", "pad", "dilation",
                                                   "odu_cast")]
        if not any(v is None for v in vectors):
            extra["class_key"] = np.concatenate(
                [np.stack(list(numbers.values()), axis=1)]
                + vectors, axis=1)
    return extra, fields


def act_columns(ic: dict, inputs: tuple, outputs: tuple, run_args: list,
                scalars: bool) -> tuple:
    """An ACT SHAVE list's extra columns and its ``ListSync.fields``: every binding's
    tensor, the distinct aliases and run() arguments, and (no scalar arguments) the class
    key: kernel, tile, each binding's (tensor, alias) and the run() arguments.
    ``inputs``/``outputs``: (every binding's tensor, alias, each row's count)."""
    fields = {"tile": ints(ic["tile"])}
    tensors = [ints(inputs[0]), ints(outputs[0])]
    aliases = [[a or "" for a in inputs[1]], [a or "" for a in outputs[1]]]
    flat_args = list(chain.from_iterable(run_args))
    extra = {"bindings.tensor": np.concatenate(tensors),
             "names": list(dict.fromkeys(chain(aliases[0], aliases[1], flat_args)))}
    if not scalars:
        strings = Strings()
        arg_counts = np.fromiter(map(len, run_args), np.int64, len(run_args))
        extra["class_key"] = np.concatenate(
            [np.stack([ints(ic["kernel"]), fields["tile"]], axis=1)] +
            [_spread(np.stack([t, strings.codes(a)], axis=1), np.asarray(side[2], np.int64),
                     None) for t, a, side in zip(tensors, aliases, (inputs, outputs))] +
            [_spread(strings.codes(flat_args).reshape(-1, 1), arg_counts, None)], axis=1)
    return extra, fields
