"""Numpy semantics of the graph's copy ops (``vpuc/ir/graph_ops_copy.py``): Pad in every
mode, Tile.

Written with ``np.pad`` and ``np.tile``, not with the per-axis index lists the DMA
lowering copies by, so the reference checks the lowering rather than repeating it.
Negative pads crop first, as onnxruntime does; numpy's ``reflect``, ``edge`` and
``wrap`` are ONNX's modes of the same names on what is left.
"""

from __future__ import annotations

import numpy as np


def pad(x: np.ndarray, attrs) -> np.ndarray:
    begin, end, mode = attrs["pads_begin"], attrs["pads_end"], attrs["mode"]
    kept = tuple(slice(max(-b, 0), size - max(-e, 0)) for size, b, e in zip(x.shape, begin, end))
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if mode == "constant":
        return np.pad(x[kept], widths, constant_values=attrs["value"])
    return np.pad(x[kept], widths, mode=mode)


COPY_LAYERS = {
    "Pad": lambda args, a: pad(args[0], a),
    "Tile": lambda args, a: np.tile(args[0], a["repeats"]),
}
