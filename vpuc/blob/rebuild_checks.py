"""The checks ``rebuild`` makes of a blob's records as it turns them into IR: names
(what VIR accepts after %), numbers, tensor types and barrier indices, each failing
with the section and the record it came from (``Checker.fail`` locates them)."""

from __future__ import annotations

import re

from vpuc.blob.content import ELEM_OF, Number
from vpuc.blob.rebuild_kernels import MAX_RANK
from vpuc.diagnostics import VpucError
from vpuc.ir.module import Ref
from vpuc.ir.types import DimsOrder, Dynamic, TensorType

MAX_DIM = (1 << 31) - 1       # MemRefData dims are int32
# What VIR accepts after % (vpuc/vir/grammar.lark, VALUE): the names a blob may carry.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.$]*")
LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# A column of names joined by newlines, for Checker.all_names.
_COLUMN = {p: re.compile(f"{p.pattern}(?:\n{p.pattern})*") for p in (NAME, LABEL)}

class Checker:
    def __init__(self, file: str) -> None:
        self.file = file
        # Names already matched, per pattern: aliases and kernel names repeat on every task.
        self._matched: dict[re.Pattern, set[str]] = {NAME: set(), LABEL: set()}
        self._refs: dict[str, Ref] = {}

    def fail(self, where: str, message: str) -> VpucError:
        return VpucError(f"{self.file}: blob {where}: {message}")

    def name(self, where: str, text, pattern=NAME) -> str:
        matched = self._matched[pattern]
        if text in matched and type(text) is str:
            return text
        if not isinstance(text, str) or not pattern.fullmatch(text):
            raise self.fail(where, f"name {text!r} is not an identifier")
        matched.add(text)
        return text

    def all_names(self, texts: list, pattern=NAME) -> bool:
        """Whether every text of a column is a name, by one match over the column joined
        (names hold no newline); on False the caller checks row by row for the message."""
        if not texts:
            return True
        try:
            joined = "\n".join(texts)
        except TypeError:
            return False
        return joined.count("\n") == len(texts) - 1 and \
            _COLUMN[pattern].fullmatch(joined) is not None

    def ref(self, where: str, text) -> Ref:
        """A checked name as a Ref; one per name (aliases and run() arguments repeat on every
        task, and a Ref without a location is never changed)."""
        made = self._refs.get(text) if type(text) is str else None
        if made is None:
            made = self._refs[text] = Ref(self.name(where, text))
        return made

    def label(self, where: str, text):
        return None if text is None else self.name(where, text, LABEL)

    def code(self, where: str, table: dict, code, what: str):
        member = table.get(code)
        if member is None:
            raise self.fail(where, f"unknown {what} code {code}")
        return member

    def index(self, where: str, value, limit: int, what: str) -> int:
        if not 0 <= value < limit:
            raise self.fail(where, f"{what} index {value} is out of range ({limit} {what}s)")
        return value


def checked_number(check: Checker, where: str, value: Number) -> int | float:
    if value.is_int not in (0, 1):
        raise check.fail(where, f"number flag {value.is_int} is not 0 or 1")
    return int(value.value) if value.is_int else float(value.value)


def checked_tensor_type(check: Checker, where: str, t, types: dict) -> TensorType:
    """``types``: the types built so far by their record fields; equal records share one
    (a program of 100k tasks has a handful of distinct types)."""
    key = (t.dims, t.dynamic_dims, t.data_type, t.dims_order, len(t.strides))
    known = types.get(key)
    if known is not None:
        return known
    rank = len(t.dims)
    if rank > MAX_RANK:
        raise check.fail(where, f"rank {rank} exceeds {MAX_RANK}")
    if len(t.strides) != rank or len(t.dims_order) != rank or \
            (t.dynamic_dims and len(t.dynamic_dims) != rank):
        raise check.fail(where, "dims, strides, dims order and dynamic flags differ in length")
    if sorted(t.dims_order) != list(range(rank)):
        raise check.fail(where, f"dims order {list(t.dims_order)} is not a permutation")
    if any(not 0 <= d <= MAX_DIM for d in t.dims):
        raise check.fail(where, f"dims {list(t.dims)} are out of range")
    dims = tuple(Dynamic(d) if t.dynamic_dims and t.dynamic_dims[i] else d
                 for i, d in enumerate(t.dims))
    types[key] = made = TensorType(dims, check.code(where, ELEM_OF, t.data_type, "element type"),
                                   DimsOrder(tuple(t.dims_order)))
    return made


def checked_barriers(check: Checker, where: str, indices, names: list[str]) -> tuple[str, ...]:
    if not indices:
        return ()
    limit = len(names)
    if min(indices) < 0 or max(indices) >= limit:
        bad = next(b for b in indices if not 0 <= b < limit)
        raise check.fail(where, f"barrier index {bad} is out of range ({limit} barriers)")
    return tuple(map(names.__getitem__, indices))
