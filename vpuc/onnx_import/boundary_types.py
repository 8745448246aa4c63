"""The element types of an ONNX model's inputs and outputs at the program's boundary.

Transformers as exported (BERT, GPT-2, ViT) take integer token ids and bool or integer
attention masks.  The NPU has no 64-bit integers: Intel's NPU plugin converts i64 inputs
and outputs to i32 at the boundary (OpenVINO's ``ConvertPrecision`` i64 -> i32), and so
does vpuc: an int64 input is an ``i32`` Parameter, and ``vpuc run`` refuses an int64
value that does not fit i32, naming the input (``runtime_sim.inputs.check_integer_input``).  A bool is the
dialect's boolean, ``u8`` 0 or 1, as comparisons produce.  An output is written back in
the type the model declares (``as_declared``): an ``i32`` result as int64, a ``u8``
boolean as bool.
"""

from __future__ import annotations

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.ir.graph_ops import BOOL
from vpuc.ir.types import ElemType

# ONNX input type -> the program's element type (floats take the graph's precision)
INTEGER_INPUTS = {np.dtype(np.int64): ElemType.I32, np.dtype(np.int32): ElemType.I32,
                  np.dtype(np.uint8): ElemType.U8, np.dtype(np.int8): ElemType.I8,
                  np.dtype(np.bool_): BOOL}


def input_elem(dtype: np.dtype, precision: ElemType) -> ElemType | None:
    """The program's element type for an input the model declares ``dtype``; None when
    vpuc takes no input of that type."""
    if np.issubdtype(dtype, np.floating):
        return precision
    return INTEGER_INPUTS.get(np.dtype(dtype))


def refused_input(path, name: str, dtype: np.dtype) -> VpucError:
    taken = ", ".join(sorted({str(t) for t in INTEGER_INPUTS}))
    return VpucError(f"{path}: input '{name}' has element type {dtype}; vpuc takes float "
                     f"inputs and {taken} ones")


def as_declared(value: np.ndarray, declared: np.dtype | None) -> np.ndarray:
    """An output in the type the model declares: i32 -> int64, u8 booleans -> bool; floats
    and every other type as computed."""
    if declared is None or value.dtype == declared:
        return value
    if declared == np.bool_ and value.dtype == np.uint8:
        return value != 0
    if declared.kind in "iu" and value.dtype.kind in "iu" and \
            np.can_cast(value.dtype, declared, "safe"):
        return value.astype(declared)
    return value
