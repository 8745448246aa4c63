"""Writes the constants of ../int8_conv.vir (seeded; run from the repository root):
i8 weights, i32 biases with the input zero point folded in (bias - zp * sum(w), as the NPU
compiler folds it), and the PPE's per-channel scales: (mult, shift) rows from the float
requantization scale by the NPU compiler's QuantizationApproximation, f32 for f16 out."""

from pathlib import Path

import numpy as np

from vpuc.ir.fixed_point import fixed_point_scale

HERE = Path(__file__).parent
rng = np.random.default_rng(11)
IN_ZERO_POINT, MID_ZERO_POINT = 128, -5

w1 = rng.integers(-127, 128, (32, 16, 3, 3), dtype=np.int8)
b1 = rng.integers(-2000, 2000, 32).astype(np.int32)
folded1 = (b1 - IN_ZERO_POINT * w1.reshape(32, -1).astype(np.int64).sum(1)).astype(np.int32)
real1 = rng.uniform(2e-4, 8e-4, 32)                 # s_x * s_w[c] / s_y
scale1 = np.array([fixed_point_scale(s) for s in real1], np.int32)

w2 = rng.integers(-127, 128, (32, 1, 3, 3), dtype=np.int8)
b2 = rng.integers(-500, 500, 32).astype(np.int32)
folded2 = (b2 - MID_ZERO_POINT * w2.reshape(32, -1).astype(np.int64).sum(1)).astype(np.int32)
scale2 = rng.uniform(1e-3, 4e-3, 32).astype(np.float32)   # s_y * s_w[c]: dequantized

for name, array in (("w1", w1), ("bias1", folded1), ("scale1", scale1), ("w2", w2),
                    ("bias2", folded2), ("scale2", scale2)):
    np.save(HERE / f"{name}.npy", array)
