"""Tensor arguments of ``vpuc run``: ``NAME=@file.npy``, typed literals, and output checks.

A value is ``@path.npy`` or a typed literal ``DIMSxELEM=v1,v2,...`` (IREE's
spelling: ``1x16xf16=1,2,...``; a single value fills the tensor; ``f32=2.5``
is a scalar).  ``NAME=VALUE`` names the tensor; a bare value goes to the next
tensor in declaration order.  Arrays are in the tensors' logical shapes.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np

from runtime_sim.memory import numpy_dtype
from vpuc.diagnostics import UsageError, VpucError
from vpuc.ir.module import Buffer
from vpuc.input_files import display_name, read_bytes
from vpuc.ir.types import ELEM_BY_NAME

_TYPE = re.compile(r"^(?:(\d+(?:x\d+)*)x)?([a-z]+\d+)$")


@dataclass
class TensorArg:
    name: str | None       # None: positional
    value: np.ndarray
    spelled: str           # for messages


def _looks_like_type(text: str) -> bool:
    match = _TYPE.match(text)
    return bool(match) and match.group(2) in ELEM_BY_NAME


def parse_literal(text: str, option: str) -> np.ndarray:
    type_text, _, values_text = text.partition("=")
    match = _TYPE.match(type_text)
    if not match or match.group(2) not in ELEM_BY_NAME:
        raise UsageError(f"{option}: '{type_text}' is not a tensor type; expected e.g. "
                         f"1x16xf16 (element types: {', '.join(ELEM_BY_NAME)})")
    shape = tuple(int(d) for d in match.group(1).split("x")) if match.group(1) else ()
    dtype = numpy_dtype(ELEM_BY_NAME[match.group(2)])
    items = [v for v in re.split(r"[,\s]+", values_text.strip()) if v]
    count = int(np.prod(shape, dtype=np.int64))
    if len(items) not in (1, count):
        raise UsageError(f"{option}: {type_text} needs {count} value{'s' if count != 1 else ''} "
                         f"(or one to fill it), got {len(items)}")
    try:
        numbers = [int(v, 0) if dtype.kind in "iu" else float(v) for v in items]
    except ValueError as exc:
        raise UsageError(f"{option}: bad value in '{text}': {exc}") from None
    try:
        data = np.array(numbers, dtype) if dtype.kind in "iu" else np.array(numbers).astype(dtype)
    except OverflowError:
        raise UsageError(f"{option}: a value of '{text}' does not fit {match.group(2)}") from None
    if len(items) == 1:
        return np.full(shape, data[0], dtype)
    return data.reshape(shape)


def load_npy(path: str, option: str) -> np.ndarray:
    """A .npy file (``-``: stdin); an unreadable or malformed one is an error (exit 1)."""
    try:
        data = read_bytes(path, "the .npy file")
    except VpucError as exc:
        raise VpucError(f"{option}: {exc.diagnostics[0].message}") from None
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise VpucError(f"{option}: {display_name(path)} is not a .npy file ({exc})") from None


def parse_tensor_arg(text: str, option: str) -> TensorArg:
    name, value_text = None, text
    head, sep, rest = text.partition("=")
    if sep and not text.startswith("@") and not _looks_like_type(head):
        name, value_text = head.lstrip("%"), rest
    if value_text.startswith("@"):
        value = load_npy(value_text[1:], option)
    else:
        value = parse_literal(value_text, option)
    return TensorArg(name, value, text)


def bind(args: list[TensorArg], buffers: list[Buffer], option: str,
         what: str) -> dict[str, np.ndarray]:
    """Named arguments by name, positional ones to the remaining tensors in order."""
    by_name = {b.name: b for b in buffers}
    bound: dict[str, np.ndarray] = {}
    for arg in args:
        if arg.name is not None:
            if arg.name not in by_name:
                names = ", ".join(f"%{b.name}" for b in buffers) or "none"
                raise UsageError(f"{option} {arg.spelled}: the program has no {what} "
                                 f"%{arg.name}; its {what}s are {names}")
            if arg.name in bound:
                raise UsageError(f"{option}: {what} %{arg.name} is given twice")
            bound[arg.name] = arg.value
    free = [b for b in buffers if b.name not in bound]
    positional = [a for a in args if a.name is None]
    if len(positional) > len(free):
        raise UsageError(f"{option}: {len(positional)} unnamed value(s) but only {len(free)} "
                         f"{what}(s) left to fill")
    for arg, buffer in zip(positional, free):
        bound[buffer.name] = arg.value
    return bound


def elem_name(dtype: np.dtype) -> str:
    """A numpy dtype in VIR's spelling (f16, i32, ...) when it has one."""
    for name, elem in ELEM_BY_NAME.items():
        try:
            if numpy_dtype(elem) == dtype:
                return name
        except VpucError:
            continue
    return str(dtype)


def check_input_types(bound: dict[str, np.ndarray], buffers: list[Buffer], option: str,
                      declared: dict[str, np.dtype] | None = None) -> None:
    """A value whose element type is not its input's is an error (exit 1): the simulator
    would convert it, and a silently rounded or truncated input is a wrong answer.
    ``vpuc run --cast-inputs`` skips this check and converts (``network.cast_to``).

    ``declared`` are the types the source model gives its inputs (an ONNX model's f32,
    imported at f16): a value of that type is what the model takes, and is rounded to the
    program's type as its weights were, unless a value lies beyond the program's range."""
    by_name = {b.name: b for b in buffers}
    for name, value in bound.items():
        elem = by_name[name].type.elem
        expected = numpy_dtype(elem)
        if value.dtype == expected:
            continue
        if declared and value.dtype == declared.get(name):
            if expected.kind in "iu" and value.dtype.kind in "biu":
                check_integer_input(option, name, value)     # int64 -> i32, bool -> u8
                continue
            if expected.kind == "f" and value.dtype.kind == "f":
                limit = float(np.finfo(expected).max)
                finite = value[np.isfinite(value)]
                if finite.size and float(np.abs(finite).max()) > limit:
                    raise VpucError(f"{option}: input %{name} holds values beyond the {elem} range "
                                    f"(±{limit:g}), which the model, imported as {elem}, cannot hold; "
                                    "scale it into range (--cast-inputs would make them ±inf)")
                continue
        raise VpucError(f"{option}: input %{name} is {elem}, the value given is "
                        f"{elem_name(value.dtype)}; give it as {elem}"
                        + (f" or as the model's {elem_name(declared[name])}" if declared and name in declared else "")
                        + ", or pass --cast-inputs to convert it")


I32_RANGE = (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))


def check_integer_input(option: str, name: str, value: np.ndarray) -> None:
    """An int64 value for an input the program holds as i32 must fit i32: the boundary's
    conversion would wrap it into another index."""
    if value.dtype != np.int64 or value.size == 0:
        return
    low, high = int(value.min()), int(value.max())
    bad = low if low < I32_RANGE[0] else high if high > I32_RANGE[1] else None
    if bad is not None:
        where = tuple(int(i) for i in np.argwhere(value == bad)[0])
        raise VpucError(f"{option}: input %{name} holds {bad} at index {list(where)}, beyond "
                        f"the i32 range [{I32_RANGE[0]}, {I32_RANGE[1]}] the NPU takes int64 "
                        "inputs in (converted at the boundary, as Intel's NPU plugin does)")


# ------------------------------------------------------------------ comparing

# (rtol, atol) by element type, for |got - expected| <= atol + rtol |expected|.  Both sides
# round to the stored type at the same places (every unit's output), so they differ only by
# how each unit orders its f32 arithmetic: at most 1 ulp per rounding, and a unit fed a
# value 1 ulp off passes it on.  rtol is therefore a few ulps of the type's precision (f16:
# 2^-10 per ulp, 4e-3 = 4 ulps; bf16: 2^-7, 2e-2 = 2.5 ulps), enough for a few chained
# roundings and tight enough that a wrong formula shows (the exact-erf gelu against the
# kernel's tanh approximation differs by 100 f16 ulps at x = -3).  atol covers results
# near zero, where one ulp is tiny and cancellation decides: about 1 ulp at 0.1.  f32
# allows the ordering error of reductions of a few thousand elements.  Integers: one unit
# (half to even).
DEFAULT_TOLERANCES = {"f16": (4e-3, 1e-4), "bf16": (2e-2, 1e-3), "f32": (1e-4, 1e-5),
                      "f64": (1e-9, 1e-12)}
INTEGER_TOLERANCE = (0.0, 1.0)


def tolerances(buffer: Buffer, rtol: float | None, atol: float | None) -> tuple[float, float]:
    default = DEFAULT_TOLERANCES.get(buffer.type.elem.value, INTEGER_TOLERANCE)
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def compare(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float,
            against: str) -> tuple[bool, str]:
    """(matches, one line): the worst mismatch with its index and both values."""
    if tuple(got.shape) != tuple(np.shape(expected)):
        return False, (f"output %{name}: shape {'x'.join(map(str, got.shape))} differs from "
                       f"{against} shape {'x'.join(map(str, np.shape(expected)))}")
    a = got.astype(np.float64)
    b = np.asarray(expected).astype(np.float64)
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
        diff = np.where(np.isnan(diff), np.inf, diff)
        excess = diff - (atol + rtol * np.abs(np.where(np.isfinite(b), b, 0.0)))
    bad = int((excess > 0).sum())
    tol = f"rtol {rtol:g}, atol {atol:g}"
    if not bad:
        worst = float(diff.max()) if diff.size else 0.0
        return True, (f"output %{name}: matches {against} ({got.size:,} elements, max |diff| "
                      f"{worst:.6g}, {tol})")
    index = np.unravel_index(int(np.argmax(excess)), got.shape)
    at = "[" + ", ".join(str(int(i)) for i in index) + "]"
    return False, (f"output %{name}: {bad:,} of {got.size:,} elements differ from {against} "
                   f"({tol}); worst at {at}: got {_value(got[index])}, expected "
                   f"{_value(np.asarray(expected)[index])} (|diff| {diff[index]:.6g})")


def _value(x) -> str:
    x = np.asarray(x)
    return str(int(x)) if x.dtype.kind in "biu" else f"{float(x):.6g}"
