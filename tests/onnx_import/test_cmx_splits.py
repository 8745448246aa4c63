"""Layers whose weights do not fit a tile's CMX, at the smallest shapes that need it under a
reduced budget: compiled, simulated, and compared with onnxruntime to the derived f16
tolerance of ``test_lower_dpu_nn.compile_and_compare`` (3u (|want| + max|want|)).

- a convolution cut over its output channels whose chunks must also be cut into row
  blocks (each block loads its chunk's weights: two blocks live per tile, counted once);
- a MatMul (ONNX Gemm and MatMul) cut over its output columns N
  (``vpuc/fusion/lower_dpu_matmul.py``).
"""

from __future__ import annotations

import pytest

from tests.onnx_import.test_lower_dpu_nn import _x, compile_and_compare
from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuOp
from vpuc.onnx_import.zoo import ModelBuilder


def test_conv_split_over_channels_and_rows(tmp_path):
    """64 -> 96 channels, 3x3, 12x12 under 96 KiB: the fewest chunks that fit are 3 of 32
    output channels (36992 bytes of weights and bias each) in blocks of 3 rows (2 * (36992
    + 2304 * 3 + 3072) = 93952 bytes); the cost model's estimate prefers 6 chunks of 16
    in two blocks of 6 rows (2 * (18496 + 64 * 7 * 12 * 2 + 16 * 6 * 12 * 2) = 63104
    bytes): block r of every chunk runs on tile r, which loads its rows once and keeps
    them for the later chunks (``lower_dpu_split.InputReuse``; simulated 46,496 cycles
    against 49,104 for one block of 12 rows and 52,180 for 3 chunks of 4 blocks)."""
    build = lambda m: m.node("Relu", [m.node("Conv", [_x(m, (1, 64, 12, 12)), m.weight((96, 64, 3, 3)),
                                                      m.weight((96,), 0.1)], kernel_shape=[3, 3],
                                             pads=[1, 1, 1, 1])])
    tasks = compile_and_compare(tmp_path, build, cmx_budget=96 * 1024)
    assert {t.variants[0].end[2] + 1 for t in tasks} == {16}
    rows = sorted({t.variants[-1].end[1] + 1 for t in tasks})
    assert rows == [6] and len(tasks) == 12          # 6 chunks x 2 blocks of 6 rows
    assert all(t.op is DpuOp.CONV and t.bias is not None for t in tasks)
    assert {t.tile for t in tasks} == {0, 1}
    # each tile loads its half of the input rows from DDR once, and its later chunks read
    # that CMX buffer (compared above with onnxruntime)
    program = api.compile(tmp_path / "m.onnx", cmx_budget=96 * 1024)
    symbols = SymbolTable(program.module)
    input_loads = [t for tl in program.module.task_lists for t in tl.tasks
                   if isinstance(t, DmaTask) and symbols.region(t.src).kind is BufferKind.INPUT]
    assert len(input_loads) == 2
    assert len({t.inputs[0] for t in tasks}) == 2


MATMULS = {
    # Gemm with transB: weights [N, K], bias folded into the DPU task
    "gemm": lambda m: m.node("Gemm", [_x(m, (4, 64)), m.weight((96, 64)), m.weight((96,), 0.1)],
                             transB=1),
    # MatMul of weights [K, N]: each chunk is a column slice of the DDR weights
    "matmul": lambda m: m.node("Relu", [m.node("MatMul", [_x(m, (4, 64)), m.weight((64, 96))])]),
}


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_matmul_split_over_output_columns(case, tmp_path):
    """K = 64, N = 96 under 8000 bytes: the whole weights (12288 bytes) do not fit; chunks
    of 16 columns do, double-buffered with their 4 rows (2 * (16 * 132 + 4 * 80 * 2) = 5504
    bytes), chunks of 32 do not (9728): 6 tasks of 16 columns."""
    tasks = compile_and_compare(tmp_path, MATMULS[case], cmx_budget=8000)
    assert all(t.op is DpuOp.MATMUL for t in tasks)
    assert [t.variants[0].end[2] + 1 for t in tasks] == [16] * 6
    assert {t.tile for t in tasks} == {0, 1}
    # --schedule default: each chunk's weights [16, K] (transposed at compile time for the
    # MatMul's [K, N]) and the Gemm's bias rows after them are one contiguous region of one
    # table constant (``lower_dpu_table.MatrixTable``), loaded by one DMA: no bias load
    module = api.compile(tmp_path / "m.onnx", cmx_budget=8000).module
    symbols = SymbolTable(module)
    dmas = [t for tl in module.task_lists for t in tl.tasks if isinstance(t, DmaTask)]
    loads = [t for t in dmas if symbols.region(t.src).kind is BufferKind.CONST]
    assert len(loads) == 6 and not [t for t in dmas if "bias" in t.label]
    assert len({symbols.region(t.src).root.name for t in loads}) == 1
    assert all(symbols.region(t.src).is_dense for t in loads)
    for task in tasks:
        weights = symbols.region(task.weights)
        assert weights.type.dims == (16, 64)
        if case == "gemm":
            assert symbols.region(task.bias).root.name == weights.root.name
        else:
            assert task.bias is None


def test_matmul_that_cannot_split_further_is_an_error(tmp_path):
    m = ModelBuilder(seed=0, opset=17)
    m.output(m.node("MatMul", [_x(m, (4, 64)), m.weight((64, 96))]))
    path = m.save(tmp_path / "m.onnx", "m")
    with pytest.raises(VpucError, match="does not fit a tile.s CMX: .*K split into f32 partial sums"):
        api.compile(path, cmx_budget=1000)
