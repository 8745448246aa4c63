"""The roofline plot names only its longest layers; every point still names its layer
on hover (a model's dozens of labels drawn at once covered each other)."""

from __future__ import annotations

import math

from tests.sim.simlib import run_cli
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.report.data import read_report_dir
from vpuc.report.label_placement import (CHAR_WIDTH, LINE_HEIGHT, MARKER, PLOT_WIDTH, POSITIONS,
                                         axis_range, place_labels)
from vpuc.report.plots import ROOFLINE_LABELS, roofline


def conv_chain(path, layers: int) -> str:
    m = ModelBuilder(0)
    x = m.input("x", [1, 16, 8, 8])
    for _ in range(layers):
        x = m.node("Relu", [m.node("Conv", [x, m.weight([16, 16, 3, 3]), m.weight([16])],
                                   pads=[1, 1, 1, 1])])
    m.output(x)
    return m.save(path)


def test_only_the_longest_layers_carry_a_label(tmp_path, capsys, monkeypatch):
    model = conv_chain(tmp_path / "chain.onnx", ROOFLINE_LABELS + 4)
    code, _, err = run_cli(["run", model, "--timing-only", "--report-dir", tmp_path / "dir"],
                           capsys, monkeypatch)
    assert code == 0, err
    data = read_report_dir(tmp_path / "dir")
    with_macs = [r for r in data.compute if r["macs"] and r["cycles"]]
    assert len(with_macs) > ROOFLINE_LABELS
    figure = roofline(data)
    layer_traces = [t for t in figure.data if t.mode == "markers+text"]
    names = [n for t in layer_traces for n in t.customdata]
    labels = [s for t in layer_traces for s in t.text if s]
    assert sorted(names) == sorted(r["layer"] for r in with_macs)      # every point on hover
    longest = sorted(data.compute, key=lambda r: r["cycles"], reverse=True)[:ROOFLINE_LABELS]
    # the longest only; here their points coincide, so some are left to hover
    # (``label_placement``: no label covers another)
    assert labels and set(labels) <= {r["layer"] for r in longest if r in with_macs}


def _boxes(points, text, where, x_range, y_range, height):
    """The label boxes ``place_labels`` reasons with, rebuilt from its answer."""
    boxes = []
    for (x, y), label, position in zip(points, text, where):
        if not label:
            continue
        fx = (math.log10(x) - x_range[0]) / (x_range[1] - x_range[0]) * PLOT_WIDTH
        fy = (math.log10(y) - y_range[0]) / (y_range[1] - y_range[0]) * height
        dx, dy = POSITIONS[position]
        half_w, half_h = len(label) * CHAR_WIDTH / 2, LINE_HEIGHT / 2
        bx, by = fx + dx * (half_w + MARKER), fy + dy * (half_h + MARKER)
        boxes.append((bx - half_w, by - half_h, bx + half_w, by + half_h))
    return boxes


def test_labels_of_points_close_together_do_not_cover_each_other():
    """Twelve points in a tight cluster and one apart: each label drawn covers no other
    (ResNet-18's stage 4 overprinted its names), the most important first, the rest
    left to hover once no position is free; the lone point keeps its label."""
    points = [(100 * (1 + 0.01 * k), 1000 * (1 + 0.02 * k)) for k in range(12)] + [(5, 50)]
    labels = [f"layer_{k}.convolution" for k in range(13)]
    order = list(range(13))[::-1]
    x_range, y_range = axis_range([1, 10_000]), axis_range([10, 10_000])
    text, where = place_labels(points, labels, order, x_range, y_range, 320)
    boxes = _boxes(points, text, where, x_range, y_range, 320)
    assert all(not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])
               for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert text[12] == labels[12] and where[12] == "top center"
    assert 2 <= sum(1 for t in text[:12] if t) < 12
    assert text[11] == labels[11]          # the first in order is placed first
