"""The cost term of an ACT SHAVE's reads of a DDR operand (vpuc/cost/shave_ddr.py):
each run pays the DDR read latency, each 64-byte line moves at the DDR bandwidth."""

import pytest

from vpuc.cost.shave_ddr import LINE_BYTES, DdrRead, ddr_read_cycles, library_ddr_read
from vpuc.cost.timing import load_timing


def test_runs_pay_the_latency_and_lines_the_bandwidth():
    # 128 rows of 384 bytes (BERT's f16 width 192): 6 lines each
    read = DdrRead(128, 384)
    assert read.lines == 768 and read.bytes == 768 * LINE_BYTES
    assert ddr_read_cycles(read, 870.0, 24.0) == pytest.approx(128 * 870 + 768 * 64 / 24)


def test_a_partial_line_is_a_whole_line():
    assert DdrRead(3, 65).lines == 6 and DdrRead(1, 64).lines == 1 and DdrRead(2, 1).lines == 2


def test_nothing_read_costs_nothing():
    assert ddr_read_cycles(DdrRead(0, 384), 870.0, 24.0) == 0.0
    assert ddr_read_cycles(DdrRead(5, 0), 870.0, 24.0) == 0.0


def test_the_latency_is_the_dma_models():
    """The term takes the DMA model's DDR read latency and the shared DDR bandwidth."""
    timing = load_timing("NPU37XX")
    one = ddr_read_cycles(DdrRead(1, 64), timing.dma.ddr_read_latency, timing.ddr_bytes_per_cycle)
    assert one == pytest.approx(timing.dma.ddr_read_latency + 64 / timing.ddr_bytes_per_cycle)


def test_gather_reads_one_row_per_index():
    dims = {"data": (30522, 192), "indices": (128,), "output": (128, 192)}
    assert library_ddr_read("gather", "data", dims, 2) == DdrRead(128, 384)
    dims3 = {"data": (4, 1000, 8), "indices": (5,), "output": (4, 5, 8)}
    assert library_ddr_read("gather", "data", dims3, 4) == DdrRead(20, 32)


def test_any_other_operand_is_read_whole():
    dims = {"input": (16, 32), "output": (16, 32)}
    assert library_ddr_read("broadcast", "input", dims, 2) == DdrRead(1, 16 * 32 * 2)
    dims = {"data": (30, 8), "indices": (4,), "output": (4, 8)}
    assert library_ddr_read("gather", "indices", dims, 4) == DdrRead(1, 4 * 4)
