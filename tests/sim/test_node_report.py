"""Provenance in the run's reports: ``--report`` gains the layer and its ONNX nodes,
``--layer-report`` has one row per ONNX node (or fused node group) whose columns add up
to the run's totals, ``--trace`` names slices by ONNX node."""

from __future__ import annotations

import json

import pytest

from runtime_sim.node_report import LAYER_COLUMNS
from tests.sim.simlib import run_cli
from tests.sim.test_layer_reports import conv_relu_sigmoid, read_csv
from vpuc import api


def small_cnn(path) -> str:
    from vpuc.onnx_import.zoo import small_cnn as build
    return build(0).save(path)


def run_reports(tmp_path, capsys, monkeypatch, model):
    files = {k: tmp_path / f"{k}.out" for k in ("tasks", "layers", "trace")}
    code, stdout, err = run_cli(["run", model, "--timing-only", "--json",
                                 "--report", files["tasks"], "--layer-report", files["layers"],
                                 "--trace", files["trace"]], capsys, monkeypatch)
    assert code == 0, err
    return json.loads(stdout), files


@pytest.mark.parametrize("build, op_types", [
    (conv_relu_sigmoid, {"Conv", "Relu", "Sigmoid"}),
    # Shape/Gather/Concat fold at import; the BatchNormalization folds into its Conv.
    (small_cnn, {"Conv", "BatchNormalization", "Relu", "MaxPool", "HardSwish", "Reshape",
                 "Gemm", "Softmax"})])
def test_layer_report_adds_up_to_the_run(build, op_types, tmp_path, capsys, monkeypatch):
    model = build(tmp_path / "m.onnx")
    summary, files = run_reports(tmp_path, capsys, monkeypatch, model)
    header, layers = read_csv(files["layers"])
    assert header == LAYER_COLUMNS
    program = api.compile(model)
    tasks = sum(len(tl.tasks) for tl in program.module.task_lists)
    assert sum(int(r["tasks"]) for r in layers) == tasks
    assert sum(int(r["units"]) for r in layers) == summary["units"]
    assert sum(int(r["macs"]) for r in layers) == summary["dpu_macs"] > 0
    assert sum(int(r["dma_bytes"]) for r in layers) == summary["dma"]["bytes"]
    slack = 0.002 * summary["units"]       # the summary rounds each engine to 3 decimals
    for kind, column in (("DMA", "dma_cycles"), ("DPU", "dpu_cycles"),
                         ("SHAVE", "shave_cycles")):
        busy = sum(e["busy_cycles"] for e in summary["engines"] if e["name"].startswith(kind))
        assert sum(float(r[column]) for r in layers) == pytest.approx(busy, abs=slack)
    for r in layers:
        assert r["onnx_nodes"] and float(r["start"]) <= float(r["end"])
        assert len(r["onnx_nodes"].split(";")) == len(r["onnx_op_types"].split(";"))
    seen = {t for r in layers for t in r["onnx_op_types"].split(";")}
    assert seen == op_types
    # Each ONNX node is in one layer (a node's ops all land in one segment here).
    nodes = [n for r in layers for n in r["onnx_nodes"].split(";")]
    assert len(nodes) == len(set(nodes))

    header, rows = read_csv(files["tasks"])
    assert header[-3:] == ["layer", "onnx_nodes", "onnx_op_types"]
    by_layer = {r["layer"]: r for r in layers}
    assert len(rows) == summary["units"]
    for row in rows:
        assert row["onnx_nodes"], row["name"]        # every task of a model has provenance
        layer = by_layer[row["layer"]]
        assert (row["onnx_nodes"], row["onnx_op_types"]) == (layer["onnx_nodes"],
                                                             layer["onnx_op_types"])

    events = json.loads(files["trace"].read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == summary["units"]
    assert {e["name"] for e in slices} == {r["onnx_nodes"] for r in layers}
    assert all(e["args"]["task"] and e["args"]["onnx_op_types"] for e in slices)


def test_a_hand_written_program_keeps_its_labels(tmp_path, capsys, monkeypatch):
    summary, files = run_reports(tmp_path, capsys, monkeypatch, "examples/clamp.vir")
    _, rows = read_csv(files["tasks"])
    assert all(r["layer"] == r["name"].split(".")[0] and r["onnx_nodes"] == "" for r in rows)
    _, layers = read_csv(files["layers"])
    assert sum(int(r["units"]) for r in layers) == summary["units"]
    assert all(r["onnx_nodes"] == "" for r in layers)


def test_a_single_fused_segment_is_the_empty_key(tmp_path, capsys, monkeypatch):
    """A model that lowers to one fused block: its tasks carry no prefix, so the layer
    table's key is "" and every task belongs to it (reported under the module's name)."""
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(0)
    x = m.input("x", [1, 8, 16, 16])
    m.output(m.node("Sigmoid", [m.node("Relu", [x])]))
    model = m.save(tmp_path / "chain.onnx")
    program = api.compile(model)
    assert [layer.key for layer in program.module.layers] == [""]
    summary, files = run_reports(tmp_path, capsys, monkeypatch, model)
    _, layers = read_csv(files["layers"])
    assert len(layers) == 1 and layers[0]["layer"] == program.module.name
    assert layers[0]["onnx_op_types"] == "Relu;Sigmoid"
    assert int(layers[0]["units"]) == summary["units"]
