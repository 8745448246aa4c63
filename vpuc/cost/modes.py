"""Execution modes of the NPU37XX (VPU 2.7) DPU: how a workload's output is laid on the MPE.

The MPE has 16 cells of 16 MACs per cycle each.  A mode fixes how a workload's
output cuboid is cut into *blocks* (VPUNN ``mpe_mode_to_nthw_ntk_grid``, X, Y, Z =
W, H, C): CUBOID_16x16 works on 16x16 positions x 64 channels, CUBOID_8x16 on
16x8 x 128, CUBOID_4x16 on 8x8 x 256 (every block is 16384 outputs).  Each block
is spread over the MPE as a *grid* of a quarter of the block per side, the cells
stepping over the grid in lock-step, so the output is padded up to whole grid
cells: CUBOID_16x16 pads to 4x4 positions x 16 channels (VPUNN
``mpe_mode_to_grid`` {4, 4, 16}; the calibration data shows W = 1 costing as W = 4
and H = 1 as H = 4), CUBOID_8x16 to 4x2 x 32, CUBOID_4x16 to 2x2 x 64.  The
numbers live in the timing TOML (``[dpu.modes]``); this module names the modes.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE_NAMES = ("CUBOID_16x16", "CUBOID_8x16", "CUBOID_4x16")


@dataclass(frozen=True)
class ModeGrid:
    name: str
    grid: tuple[int, int, int]      # padding unit of the output: W, H, C
    block: tuple[int, int, int]     # output block (NTHW x NTK): W, H, C

    def padded(self, w: int, h: int, c: int) -> int:
        """Output volume padded up to whole grid cells."""
        gx, gy, gz = self.grid
        return -(-w // gx) * gx * (-(-h // gy) * gy) * (-(-c // gz) * gz)

    def blocks(self, w: int, h: int, c: int) -> tuple[int, int]:
        """(spatial blocks, channel blocks) the output is cut into."""
        bx, by, bz = self.block
        return -(-w // bx) * -(-h // by), -(-c // bz)
