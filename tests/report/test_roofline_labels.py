"""The roofline plot names only its longest layers; every point still names its layer
on hover (a model's dozens of labels drawn at once covered each other)."""

from __future__ import annotations

from tests.sim.simlib import run_cli
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.report.data import read_report_dir
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
    assert sorted(labels) == sorted(r["layer"] for r in longest if r in with_macs)
