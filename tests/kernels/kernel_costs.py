"""Measured cost of the library kernels, as tabulated in docs/kernels.md.

Cycles are the interpreter's (deterministic), so the figures are exact: the
marginal cycles per element between two sizes, i.e. the steady-state cost of the
inner loops, without the fixed per-invocation cost (reported separately).
Run ``python tests/kernels/kernel_costs.py`` to print the table for the docs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from kernel_harness import Tensor, channels_last, run  # noqa: E402
from vpuc.abi.params import ScalarArg  # noqa: E402
from vpuc.ir.types import ElemType  # noqa: E402

ELEMENTWISE = ["copy", "clamp", "relu", "tanh", "sigmoid", "swish", "gelu", "hswish", "add",
               "sub", "mul", "max", "min", "convert"]
REDUCING = ["softmax", "reduce_sum", "reduce_mean", "reduce_max", "log_softmax", "mvn"]
SAME_SHAPE = ("softmax", "log_softmax", "mvn")
F16, F32 = np.float16, np.float32
BEGIN, END = "<!-- BEGIN MEASURED: cycles -->", "<!-- END MEASURED: cycles -->"


def _cycles(name, shape, dtype, perm=None, out_shape=None, out_dtype=None) -> int:
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    inputs = [Tensor(x, perm)] * (2 if name in ("add", "sub", "mul", "max", "min") else 1)
    bounds = [ScalarArg(ElemType.F16, -1.0), ScalarArg(ElemType.F16, 1.0)]
    scalars = bounds if name == "clamp" else []
    if name == "mvn":
        scalars = [ScalarArg(ElemType.F32, 1e-5), ScalarArg(ElemType.I32, 0)]
    out = Tensor(np.zeros(out_shape or shape, out_dtype or dtype), perm)
    return run(name, inputs, out, scalars, check_paths=False).cycles


def elementwise_cost(name: str, dtype) -> float:
    other = (F32 if dtype == F16 else F16) if name == "convert" else dtype
    small, large = (_cycles(name, (n,), dtype, out_dtype=other) for n in (4096, 8192))
    return (large - small) / 4096


def reducing_cost(name: str, dtype, grouped: bool) -> float:
    """rows: (rows, 256) NCHW-like, R dense; groups: NHWC (1, 32, H, 16), R = W strided."""
    def out(shape):
        return shape[:-1] + (1,) if name not in SAME_SHAPE else shape
    if grouped:
        perm = channels_last(4)
        shapes = [(1, 32, h, 16) for h in (4, 8)]
    else:
        perm = None
        shapes = [(rows, 256) for rows in (16, 32)]
    small, large = (_cycles(name, s, dtype, perm, out(s)) for s in shapes)
    return (large - small) / (np.prod(shapes[1]) - np.prod(shapes[0]))


def overhead(rank: int) -> int:
    """Cycles of relu on a one-element f16 tensor of the given rank (prologue and walk)."""
    return _cycles("relu", (1,) * rank, F16)


def table() -> str:
    lines = ["| kernel | f16 | f32 |", "|---|---|---|"]
    for name in ELEMENTWISE:
        f16, f32 = elementwise_cost(name, F16), elementwise_cost(name, F32)
        label = "convert (f16->f32, f32->f16)" if name == "convert" else name
        lines.append(f"| {label} | {f16:.3f} | {f32:.3f} |")
    for name in REDUCING:
        for grouped in (False, True):
            how = "groups, NHWC (1,32,H,16)" if grouped else "rows of 256"
            f16, f32 = (reducing_cost(name, dt, grouped) for dt in (F16, F32))
            lines.append(f"| {name}, {how} | {f16:.3f} | {f32:.3f} |")
    lines.append("")
    lines.append("Fixed cost per invocation (relu, one element): "
                 + ", ".join(f"rank {r}: {overhead(r)} cycles" for r in (1, 4)) + ".")
    return "\n".join(lines)


def documented(doc: str) -> str:
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()


if __name__ == "__main__":
    print(table())
