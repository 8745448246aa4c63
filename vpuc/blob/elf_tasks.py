"""The ELF container's task sections as ``RecordTable``s: checked whole, made on request.

Every check ``ElfColumns`` makes of a task section is made here too, on the
columns, when the section is read: each (start, count) list inside its pool,
every string offset at a string of ``.vpuc.strtab``, every DPU task's variants
its own, every invocation image inside ``.vpuc.kernelParams``.  What goes to
Python values then is what reading checks on every task (labels, and for the
ACT SHAVE list its invocation images); the other fields stay numpy columns, or
functions that make the rows asked for (``vpuc.blob.record_table``), so a
record is made only when something reads it.  Extra columns: a DPU list's
"variants.label" and "variants.mode" (every variant, task order), "first_input"
and "inputs.flat"; an ACT SHAVE list's "bindings.tensor" (every binding's tensor)
and "names" (its distinct aliases and run() arguments); and for both, "class_key":
the fields the verifier's per-task rules read, one row of ints per task (pool lists
padded, strings by their offset: equal keys, equal tasks), ``verify_columns``'s
classes without a record (none with a post op or scalar arguments).
"""

from __future__ import annotations

import numpy as np

from vpuc.blob import elf_records as R
from vpuc.blob.content import ActTaskRec, BindingRec, DmaRec, DpuRec, PostOpRec, VariantRec
from vpuc.blob.elf_columns import _make, _split
from vpuc.blob.record_table import RecordTable


def _rows(column: np.ndarray, rows) -> np.ndarray:
    return column if rows is None else column[rows]


def lazy_lists(c, starts, counts, *, wide: bool = False, none_ok: bool = False):
    """Each row's pool list, checked now, made for the rows asked."""
    c._check_lists(wide, starts, counts, none_ok)
    return lambda rows: c.lists(_rows(starts, rows), _rows(counts, rows), wide=wide,
                                none_ok=none_ok)


def checked_strings(c, offsets: np.ndarray) -> None:
    """Every offset at a string (``strings``' checks and errors), each distinct one once."""
    if len(offsets):
        c.strings(np.unique(offsets))


def lazy_strings(c, offsets: np.ndarray):
    checked_strings(c, offsets)
    return lambda rows: c.strings(_rows(offsets, rows))


def padded(c, starts, counts, *, none_ok: bool = False) -> np.ndarray:
    """Each row's pool list as one row of ints: its count (-1: none) and its values, padded
    with -1 to the longest: equal rows iff equal lists (a class key's columns)."""
    starts, counts = starts.astype(np.int64), counts.astype(np.int64)
    none = (starts == R.LIST_NONE) & (counts == 0) if none_ok else np.zeros(len(counts), bool)
    width = int(counts.max()) if len(counts) else 0
    out = np.full((len(counts), 1 + width), -1, np.int64)
    out[:, 0] = np.where(none, -1, counts)
    if width:
        values = c.elements(np.where(none, 0, starts), counts)
        rows = np.repeat(np.arange(len(counts)), counts)
        out[rows, 1 + np.arange(len(values)) - np.repeat(np.cumsum(counts) - counts, counts)] = \
            values
    return out


def dma(c, t: np.ndarray) -> RecordTable:
    sync = c._sync(t)
    sync.fields = {name: t[name] for name in ("src", "dst", "channel", "mode")}
    return RecordTable(DmaRec, len(t), {
        "label": c.strings(t["label"]), "src": t["src"], "dst": t["dst"],
        "channel": t["channel"], "mode": t["mode"],
        "waits": lazy_lists(c, t["waits_start"], t["waits_count"]),
        "updates": lazy_lists(c, t["updates_start"], t["updates_count"])}, sync)


def dpu(c, t: np.ndarray, v: np.ndarray, vname: str) -> RecordTable:
    first = t["variants_start"].astype(np.int64)
    count = t["variants_count"].astype(np.int64)
    bad = (first + count > len(v)) & (count != 0)
    inside = np.where(bad, 0, count)        # the groups that lie inside the section
    owner = np.repeat(np.arange(len(t)), inside)
    at = np.repeat(first - (np.cumsum(inside) - inside), inside) + np.arange(len(owner))
    wrong = v["invariant"][at] != owner
    bad |= np.bincount(owner[wrong], minlength=len(t)).astype(bool)
    if bad.any():
        raise c.r.fail(vname, f"variants of DPU task #{int(np.argmax(bad))} are out of "
                       "range or belong to another task")
    # Every variant of the section checked, as reading them all did (task order or not).
    checked_strings(c, v["label"])
    for side in ("waits", "updates"):
        c._check_lists(False, v[f"{side}_start"], v[f"{side}_count"], False)
    variant_rows = v[at]

    def groups(rows) -> list:
        counts = _rows(count, rows)
        taken = at if rows is None else \
            np.repeat(_rows(first, rows) - (np.cumsum(counts) - counts), counts) + \
            np.arange(int(counts.sum()), dtype=np.int64)
        return _split(variants(c, v[taken]), counts.tolist())

    posts = [None] * len(t)
    rows = np.flatnonzero(t["post_kind"] != -1)
    words = c.lists(t["post_params_start"][rows], t["post_params_count"][rows], wide=True)
    for row, params in zip(rows.tolist(), words):
        posts[row] = PostOpRec(int(t["post_kind"][row]), tuple(
            np.array(params, dtype=np.int64).view(np.float64).tolist()))
    columns = {"label": c.strings(t["label"]), "op": t["op"], "tile": t["tile"],
               "inputs": lazy_lists(c, t["inputs_start"], t["inputs_count"]),
               "output": t["output"], "weights": t["weights"], "bias": t["bias"]}
    for name in ("kernel", "stride", "pad", "dilation"):
        columns[name] = lazy_lists(c, t[f"{name}_start"], t[f"{name}_count"], none_ok=True)
    columns.update({"post_op": posts,
                    "waits": lazy_lists(c, t["waits_start"], t["waits_count"]),
                    "updates": lazy_lists(c, t["updates_start"], t["updates_count"]),
                    "variants": groups, "mode": t["mode"],
                    "odu_cast": lazy_lists(c, t["odu_cast_start"], t["odu_cast_count"]),
                    "quant_scale": t["quant_scale_plus_one"].astype(np.int64) - 1,
                    "in_zero_point": t["in_zero_point"], "out_zero_point": t["out_zero_point"]})
    inputs_count = t["inputs_count"].astype(np.int64)
    flat = c.elements(t["inputs_start"], inputs_count)
    firsts = np.full(len(t), -1, np.int64)
    has = inputs_count > 0
    firsts[has] = flat[(np.cumsum(inputs_count) - inputs_count)[has]]
    # A task's fields the per-task rules read, as one row of ints (``verify_columns``'s
    # classes; the post op's float params are not in it: with a post op, no key).
    if not (t["post_kind"] != -1).any():
        columns["class_key"] = np.concatenate(
            [np.stack([t[name].astype(np.int64) for name in
                       ("op", "tile", "output", "weights", "bias", "mode",
                        "quant_scale_plus_one", "in_zero_point", "out_zero_point")], axis=1),
             padded(c, t["inputs_start"], t["inputs_count"])] +
            [padded(c, t[f"{name}_start"], t[f"{name}_count"], none_ok=True)
             for name in ("kernel", "stride", "pad", "dilation", "odu_cast")], axis=1)
    columns.update({"variants.label": c.strings(variant_rows["label"]),
                    "variants.mode": variant_rows["mode"], "inputs.flat": flat,
                    "first_input": firsts})
    sync = c._sync(t)
    # The variants in task order (each task's run of the variants section), as the
    # records list them.
    sync.variant_task, sync.variant_count = owner, count
    sync.variant_waits, sync.variant_updates = c._sync_sides(variant_rows)
    sync.fields = {"tile": t["tile"], "corners": np.stack(
        [variant_rows[name].astype(np.int64) for name in
         ("start_x", "start_y", "start_z", "end_x", "end_y", "end_z", "mode")], axis=1)}
    return RecordTable(DpuRec, len(t), columns, sync)


def variants(c, v: np.ndarray) -> list:
    starts = zip(v["start_x"].tolist(), v["start_y"].tolist(), v["start_z"].tolist())
    ends = zip(v["end_x"].tolist(), v["end_y"].tolist(), v["end_z"].tolist())
    rows = zip(c.strings(v["label"]), starts, ends,
               c.lists(v["waits_start"], v["waits_count"]),
               c.lists(v["updates_start"], v["updates_count"]), v["mode"].tolist())
    return list(map(_make(VariantRec), rows))


def _bindings(c, starts, counts):
    """Each row's bindings, checked now (pool lists, alias strings), made for the rows
    asked; and every binding's tensor index and alias offset (numpy)."""
    counts = counts.astype(np.int64)
    words = c.elements(starts, 2 * counts)
    checked_strings(c, words[1::2])

    def made(rows) -> list:
        wanted = _rows(counts, rows)
        taken = words if rows is None else c.elements(_rows(starts, rows), 2 * wanted)
        flat = list(map(_make(BindingRec), zip(taken[0::2].tolist(),
                                               c.strings(taken[1::2]))))
        return _split(flat, wanted.tolist())
    return made, words[0::2], words[1::2]


def act(c, t: np.ndarray, where: str):
    if not len(t):
        return ()
    scalars = c._scalars(t, where)
    run_words = c.elements(t["run_args_start"], t["run_args_count"])
    checked_strings(c, run_words)
    run_counts = t["run_args_count"].astype(np.int64)

    def run_args(rows) -> list:
        counts = _rows(run_counts, rows)
        words = run_words if rows is None else c.elements(_rows(t["run_args_start"], rows),
                                                          counts)
        return _split(c.strings(words), counts.tolist())

    inputs, in_tensors, in_names = _bindings(c, t["inputs_start"], t["inputs_count"])
    outputs, out_tensors, out_names = _bindings(c, t["outputs_start"], t["outputs_count"])
    names = c.strings(np.unique(np.concatenate([in_names, out_names, run_words])))
    sync = c._sync(t)
    sync.fields = {"tile": t["tile"]}
    extra = {}
    if not t["scalars_count"].any():        # the per-task rules' fields as one row of ints
        extra["class_key"] = np.concatenate(
            [np.stack([t["kernel"].astype(np.int64), t["tile"].astype(np.int64)], axis=1),
             padded(c, t["inputs_start"], 2 * t["inputs_count"].astype(np.int64)),
             padded(c, t["outputs_start"], 2 * t["outputs_count"].astype(np.int64)),
             padded(c, t["run_args_start"], t["run_args_count"])], axis=1)
    return RecordTable(ActTaskRec, len(t), extra | {
        "label": c.strings(t["label"]), "kernel": t["kernel"], "tile": t["tile"],
        "inputs": inputs, "outputs": outputs, "scalars": scalars, "run_args": run_args,
        "invocation": c._images(t),
        "waits": lazy_lists(c, t["waits_start"], t["waits_count"]),
        "updates": lazy_lists(c, t["updates_start"], t["updates_count"]),
        "bindings.tensor": np.concatenate([in_tensors, out_tensors]),
        "names": list(dict.fromkeys(names))}, sync)

