"""The safety net behind the verifier's limits: a number that does not fit its blob field
is reported with the field, the value, the field's range and the IR it came from.

The writers leave range checks to ``struct`` and the flatbuffers builder, which
refuse an out-of-range number with a bare ``struct.error`` (or ``OverflowError``)
that names neither the field nor the source.  ``reported(content, program)``
wraps a writer: when it fails that way, the content records are walked with the
narrower of each field's two encodings (``FIELDS``: the FlatBuffer schema's type
and the ELF record's) and the first value out of range becomes a located error.
The walk runs only after a failure, so writing costs nothing more.  The verifier
(``vpuc/verifier/limits.py``) is meant to catch all of these first; this net
names what it missed.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from typing import Iterator, NamedTuple

from vpuc.diagnostics import Loc, VpucError
from vpuc.program import Program

RANGES = {"B": (0, (1 << 8) - 1), "b": (-(1 << 7), (1 << 7) - 1),
          "H": (0, (1 << 16) - 1), "h": (-(1 << 15), (1 << 15) - 1),
          "I": (0, (1 << 32) - 1), "i": (-(1 << 31), (1 << 31) - 1),
          "Q": (0, (1 << 64) - 1), "q": (-(1 << 63), (1 << 63) - 1)}
TYPE_NAMES = {"B": "uint8", "b": "int8", "H": "uint16", "h": "int16", "I": "uint32",
              "i": "int32", "Q": "uint64", "q": "int64"}

# Per record type, each integer field's struct code, the narrower of the two formats
# (schema/vpu_blob.fbs, vpuc/blob/elf_records.py).  A tuple field: each element.
# -1 ("none") is written as such where the field is signed and as 0xFFFFFFFF where it
# is not (NONE_INDEX), so indices that may be -1 are checked as int32.
FIELDS = {
    "TensorRec": {"tile": "h", "offset": "q", "data_offset": "Q", "dims": "I",
                  "strides": "Q", "base": "i", "dims_order": "B"},
    "SliceRec": {"start": "q", "stop": "q", "step": "q"},
    "Number": {"value": "q"},
    "BarrierRec": {"id": "I", "physical_id": "h", "producer_count": "I",
                   "consumer_count": "I"},
    "DmaRec": {"src": "I", "dst": "I", "channel": "B", "waits": "I", "updates": "I"},
    "DpuRec": {"tile": "B", "inputs": "I", "output": "I", "weights": "i", "bias": "i",
               "kernel": "I", "stride": "I", "pad": "I", "dilation": "I", "waits": "I",
               "updates": "I", "quant_scale": "i", "in_zero_point": "i", "out_zero_point": "i"},
    "VariantRec": {"start": "i", "end": "i", "waits": "I", "updates": "I"},
    "ActTaskRec": {"kernel": "I", "tile": "B", "waits": "I", "updates": "I"},
    "BindingRec": {"tensor": "I"},
    "InvocationRec": {"args_offset": "I", "args_size": "I"},
    "KernelRec": {"image_kernel": "i"},
    "ParamRec": {"dims": "i"},
    "KernelImageRec": {"entry": "I", "rodata_offset": "I"},
    "RuntimeRec": {"kernel": "I", "stack_sizes": "I"},
    "ArchRec": {"version": "I", "tiles": "I", "cmx_bytes": "I", "act_shaves_per_tile": "I",
                "dpus_per_tile": "I", "dma_channels": "I", "barriers": "I",
                "max_producers": "I", "max_consumers": "I", "window_size": "I",
                "win_d_base": "I", "win_e_base": "I", "win_f_base": "I"},
    "TaskCounts": {name: "I" for name in ("dma", "dpu", "dpu_variants", "act_kernel",
                                          "barriers", "tensors", "kernels")},
    "HeaderRec": {"network_inputs": "I", "network_outputs": "I"},
    "ConstantRec": {"tensor": "I"},
}


class TensorOverflow(Exception):
    """A writer's refusal of a tensor its format cannot hold (``index``: the tensor's
    record), located by ``reported`` at the buffer or view it was made from."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


class Overflow(NamedTuple):
    field: str            # e.g. "DmaRec.channel", "TensorRec.dims[2]"
    value: int
    code: str
    loc: Loc | None


@contextmanager
def reported(content, program: Program) -> Iterator[None]:
    """Turn a writer's range failure into a located ``VpucError`` naming the field."""
    try:
        yield
    except TensorOverflow as exc:
        found = first_overflow(content, program)    # a field out of range comes first
        if found is not None:
            raise overflow_error(found) from None
        module = program.module
        named = list(module.buffers) + list(module.views)
        loc = _loc(named[exc.index]) if 0 <= exc.index < len(named) else None
        raise VpucError(f"cannot serialize the program: {exc.message}", loc) from None
    except (struct.error, OverflowError, TypeError) as exc:
        # struct and the flatbuffers builder refuse out-of-range numbers this way
        if isinstance(exc, TypeError) and not str(exc).startswith("bad number"):
            raise
        found = first_overflow(content, program)
        if found is None:
            raise VpucError(f"cannot serialize the program: a value does not fit its blob "
                            f"field ({exc})") from None
        raise overflow_error(found) from None


def overflow_error(found: Overflow) -> VpucError:
    lo, hi = RANGES[found.code]
    return VpucError(f"cannot serialize the program: {found.field} = {found.value} does not "
                     f"fit its blob field ({TYPE_NAMES[found.code]}, {lo}..{hi})", found.loc)


def first_overflow(content, program: Program) -> Overflow | None:
    """The first integer of ``content`` outside its field's range, with the location of
    the IR object it was made from."""
    module = program.module
    named = list(module.buffers) + list(module.views)
    places = [(content.header, module.loc), (content.runtime, _loc(module.runtime))]
    places += [(t, _loc(named[i]) if i < len(named) else None)
               for i, t in enumerate(content.tensors)]
    places += [(b, _loc(module.barriers[i]) if i < len(module.barriers) else None)
               for i, b in enumerate(content.barriers)]
    for task_list, ir_list in zip(content.task_lists, module.task_lists):
        places += [(t, _loc(task)) for t, task in zip(task_list.tasks, ir_list.tasks)]
    places += [(k, _loc(decl)) for k, decl in zip(content.kernels, module.kernels)]
    places += [(c, _loc(named[c.tensor]) if 0 <= c.tensor < len(named) else None)
               for c in content.constants]
    for record, loc in places:
        found = _walk(record, loc)
        if found is not None:
            return found
    return None


def _walk(record, loc: Loc | None, prefix: str = "") -> Overflow | None:
    if record is None or not hasattr(record, "_fields"):
        return None
    kind = type(record).__name__
    codes = FIELDS.get(kind, {})
    for name in record._fields:
        value = getattr(record, name)
        field = f"{prefix}{kind}.{name}"
        code = codes.get(name)
        if code is not None:
            for i, v in _integers(value):
                lo, hi = RANGES[code]
                if not lo <= v <= hi:
                    return Overflow(field + ("" if i is None else f"[{i}]"), v, code, loc)
        items = value if isinstance(value, tuple) and not hasattr(value, "_fields") else (value,)
        for item in items:
            found = _walk(item, loc)
            if found is not None:
                return found
    return None


def _integers(value) -> list[tuple[int | None, int]]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [(None, value)]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, int)
                and not isinstance(v, bool)]
    return []


def _loc(obj) -> Loc | None:
    return getattr(obj, "loc", None)
