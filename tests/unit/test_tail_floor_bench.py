"""bench/tail_floor.py: a CNN's cycles above the CMX floor of its DDR-bound tail, split into
the head's DPU losses, the CMX left without tail weights and the tail's time over its DDR
time, on the small ResNet-18 of the schedule tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import tail_floor as tf  # noqa: E402


@pytest.fixture(scope="module")
def row(tmp_path_factory):
    path = tf.SMALL["resnet18"]().save(tmp_path_factory.mktemp("r") / "r.onnx", "r")
    return tf.measure("resnet18", path)


def test_the_parts_add_up_to_the_cycles_above_the_floor(row) -> None:
    """(a) + (b) + (c) is the schedule's cycles less the floor, and the head's losses per
    layer and mechanism add up to (a): every DPU cycle before the boundary is the ideal
    work, one loss or one idle gap.  Sums of a few hundred float terms: 1e-9 relative."""
    rate = row["ddr_bytes_per_cycle"]
    a = row["boundary"] - row["head_ideal"]
    b = (min(row["cmx_bytes"], row["tail_weight_bytes"]) - row["tail_weights_in_cmx"]) / rate
    c = row["tail_cycles"] - row["tail_ddr_floor"]
    assert a + b + c == pytest.approx(row["cycles"] - row["floor"], rel=1e-9)
    losses = sum(sum(layer.values()) for layer in row["head_losses"].values())
    assert losses == pytest.approx(a, rel=1e-9)
    assert row["head"] and row["tail"] and not set(row["head"]) & set(row["tail"])


def test_the_tail_starts_after_the_last_dpu_bound_layer_with_weights(row) -> None:
    """Every tail layer that reads weights from DDR takes longer on the DDR than on the DPUs
    (the bound's per-layer terms), and the tail's weights are all read from constants."""
    assert row["tail_weight_bytes"] > 0
    assert 0 <= row["tail_weights_in_cmx"] <= row["tail_weight_bytes"]
    assert row["tail_ddr"]["bytes"] <= row["tail_cycles"] * row["ddr_bytes_per_cycle"] * (1 + 1e-9)
