"""Channelwise layers (depthwise convolution, max and average pools) whose one output row of
16 channels does not fit a tile's CMX: the row's columns cut into blocks with their halo
columns (``lower_dpu_nn.emit_jobs``), padding only at the image's left and right border.
Compiled under a reduced budget, simulated, compared with onnxruntime within
``test_lower_dpu_nn.compile_and_compare``'s derived f16 bound (a pool or a depthwise tap sum
is computed as unsplit: the cut moves no arithmetic), and with vpuc's graph reference.
"""

from __future__ import annotations

import pytest

from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from vpuc.ir.tasks import DpuOp

SHAPE = (1, 32, 6, 96)      # a 3x3 window's row of 16 channels: 2 * 2 * 16 * 3 * 96 > 4096 bytes
BUDGET = 4096

CASES = {
    "depthwise": (lambda m: m.node("Conv", [_x(m, SHAPE), m.weight((32, 1, 3, 3)),
                                            m.weight((32,), 0.1)],
                                   kernel_shape=[3, 3], group=32, pads=[1, 1, 1, 1]),
                  DpuOp.DWCONV),
    "depthwise_strided_dilated": (lambda m: m.node("Conv", [_x(m, SHAPE), m.weight((32, 1, 3, 3))],
                                                   kernel_shape=[3, 3], group=32, strides=[1, 2],
                                                   dilations=[1, 2], pads=[1, 2, 1, 1]),
                                  DpuOp.DWCONV),
    "maxpool_s2": (lambda m: m.node("MaxPool", [_x(m, SHAPE)], kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1]), DpuOp.MAXPOOL),
    "avgpool_exclude_pad": (lambda m: m.node("AveragePool", [_x(m, SHAPE)], kernel_shape=[3, 3],
                                             pads=[1, 1, 1, 1]), DpuOp.AVGPOOL),
    "avgpool_count_pad": (lambda m: m.node("AveragePool", [_x(m, SHAPE)], kernel_shape=[3, 3],
                                           pads=[1, 1, 1, 1], count_include_pad=1),
                          DpuOp.DWCONV),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_row_too_wide_is_cut_into_column_blocks(case, tmp_path):
    build, dpu_op = CASES[case]
    tasks = compile_and_compare(tmp_path, build, seed=sorted(CASES).index(case),
                                cmx_budget=BUDGET)
    assert {t.op for t in tasks} == {dpu_op}
    assert {t.tile for t in tasks} == {0, 1}
    widths = {t.variants[0].end[0] + 1 for t in tasks}
    ow = 48 if case in ("depthwise_strided_dilated", "maxpool_s2") else 96
    assert max(widths) < ow, "blocks of columns, not whole rows"
    # every block's input and output fit the budget twice over (double-buffered)
    assert all(2 * (t_in + t_out) <= BUDGET for t_in, t_out in _block_bytes(tmp_path))


def _block_bytes(tmp_path):
    from vpuc import api
    from vpuc.ir.symbols import SymbolTable
    program = api.compile(tmp_path / "m.onnx", cmx_budget=BUDGET)
    symbols = SymbolTable(program.module)
    for tl in program.module.task_lists:
        if tl.executor.name == "DPU":
            for t in tl.tasks:
                yield (symbols.region(t.inputs[0]).root.type.nbytes,
                       symbols.region(t.output).root.type.nbytes)
